"""System columns hashed ahead: used only when the file holds exactly the known values, and the digest
is always the file's."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.hashing import arrow_digest as lh
from airflow_odf.odf.hashing import hash_ahead
from airflow_odf.odf.hashing import parquet_hashes as pqh
from airflow_odf.odf.hashing.arrow_digest import logical_hash_of_table
from airflow_odf.odf.hashing.hash_ahead import HashAhead
from airflow_odf.odf.hashing.parquet_hashes import parquet_hashes, physical_hash_of_file

TIME = Timestamp.parse("2024-05-01T12:30:15.123456789Z")
MILLIS = TIME.epoch_nanos() // 1_000_000
ROWS = 1_000
NEXT = 7


def _slice(path: Path, **overrides: pa.Array) -> pa.Table:
    """A transform's slice: offsets from NEXT, op +A, system_time TIME (ms), then data."""
    columns = {
        "offset": pa.array(np.arange(NEXT, NEXT + ROWS), pa.int64()),
        "op": pa.array(np.zeros(ROWS, np.int32)),
        "system_time": pa.array(np.full(ROWS, MILLIS), pa.timestamp("ms", tz="UTC")),
        "event_time": pa.array(np.arange(ROWS) * 1000, pa.timestamp("ms", tz="UTC")),
        "name": pa.array([f"n{i % 13}" for i in range(ROWS)]),
    }
    table = pa.table({**columns, **overrides})
    pq.write_table(table, path, row_group_size=300)
    return table


def _ahead(max_rows: int = ROWS) -> HashAhead:
    """Hashed ahead as far as it goes (`max_rows`), waited for."""
    with HashAhead(
        offset="offset", op="op", system_time="system_time", next_offset=NEXT, time=TIME, max_rows=max_rows
    ) as ahead:
        target = _covered(max_rows)
        deadline = time.monotonic() + 30
        while any(c.hasher_at(ROWS)[1] < target for c in ahead.columns.values()):
            assert time.monotonic() < deadline, "the background hashing did not advance"
            time.sleep(0.01)
    return ahead


def _covered(max_rows: int) -> int:
    """Rows hashed ahead, in whole states: `max_rows` rounded up, at most the file's rows rounded down."""
    per_state = hash_ahead.ROWS_PER_STATE
    return min(-(-max_rows // per_state), ROWS // per_state) * per_state


@pytest.fixture
def read_from_file(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Small states (many of them), and the names of the columns hashed from the file as usual."""
    monkeypatch.setattr(hash_ahead, "ROWS_PER_STATE", 64)
    names: list[str] = []
    read = pqh.hash_parquet_column

    def recording(
        digest: lh.RecordDigest, data: pa.Buffer, metadata: pq.FileMetaData, index: int, *rest: int
    ) -> None:
        names.append(digest.schema.names[index])
        read(digest, data, metadata, index, *rest)

    monkeypatch.setattr(pqh, "hash_parquet_column", recording)
    return names


@pytest.mark.parametrize("max_rows", [ROWS, 200, 0])
def test_known_columns_continue_from_the_hashed_ahead_state(
    tmp_path: Path, read_from_file: list[str], max_rows: int
) -> None:
    """Whatever was hashed ahead (all, some, or nothing: fewer rows than a state), the digest is the
    file's, and the system columns are not hashed from the file again."""
    path = tmp_path / "slice.parquet"
    table = _slice(path)
    ahead = _ahead(max_rows)
    covered = ahead.columns["offset"].hasher_at(ROWS)[1]
    assert covered == _covered(max_rows) == {ROWS: 960, 200: 256, 0: 0}[max_rows]
    logical, physical = parquet_hashes(path, ahead.columns)
    assert logical == logical_hash_of_table(pq.read_table(path)) == logical_hash_of_table(table)
    assert physical == physical_hash_of_file(path)
    assert sorted(read_from_file) == ["event_time", "name"]


@pytest.mark.parametrize(
    ("column", "values"),
    [
        ("offset", pa.array(np.arange(NEXT + 1, NEXT + 1 + ROWS), pa.int64())),  # shifted by one
        ("offset", pa.array(np.r_[np.arange(NEXT, NEXT + 500), np.arange(NEXT + 501, NEXT + 1 + ROWS)])),
        ("op", pa.array(np.r_[np.zeros(999, np.int32), np.ones(1, np.int32)])),  # one retraction, last
        ("op", pa.array([0] * 500 + [None] + [0] * 499, pa.int32())),  # a null
        ("op", pa.array(np.zeros(ROWS, np.int64))),  # another type
        ("system_time", pa.array(np.full(ROWS, MILLIS + 1), pa.timestamp("ms", tz="UTC"))),
        ("system_time", pa.array(np.full(ROWS, MILLIS * 1000), pa.timestamp("us", tz="UTC"))),
    ],
)
def test_other_values_are_hashed_from_the_file(
    tmp_path: Path, read_from_file: list[str], column: str, values: pa.Array
) -> None:
    path = tmp_path / "slice.parquet"
    table = _slice(path, **{column: values})
    logical, _ = parquet_hashes(path, _ahead().columns)
    assert logical == logical_hash_of_table(table)
    assert sorted(read_from_file) == sorted(["event_time", "name", column])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread scheduling policy: Linux")
def test_the_thread_runs_only_on_idle_cpu() -> None:
    """SCHED_IDLE, not merely nice 19: a thread that wakes up takes the CPU from it at once."""
    seen: list[int] = []

    def probe() -> None:
        hash_ahead._lowest_priority()
        seen.append(os.sched_getscheduler(threading.get_native_id()))

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    assert seen == [os.SCHED_IDLE]
    assert os.sched_getscheduler(threading.get_native_id()) == os.SCHED_OTHER  # the caller's own stays

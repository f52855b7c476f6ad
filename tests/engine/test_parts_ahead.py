"""A transform slice's data columns hashed from Spark's part files while the engine runs: the engine
publishes committed parts in their places (parts_publisher), the coordinator hashes them in order
(parts_ahead) and continues from them only where the slice's column chunks are the parts' own bytes.
The hashes are always the file's."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_odf.engine import writer
from airflow_odf.engine.partition_order import NEVER_PACK, PartitionKey, SplitPlan
from airflow_odf.engine.parts_publisher import PartsPublisher, PartsTarget, places
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.hashing import arrow_digest as lh
from airflow_odf.odf.hashing import parquet_hashes as pqh
from airflow_odf.odf.hashing.parts_ahead import PartsAhead
from airflow_odf.utils.engine_json import Vocab

ROWS = 400  # per part, in two row groups
SYSTEM_TIME = datetime(2024, 2, 1, tzinfo=timezone.utc)


def _part(path: Path, start: int, *, compression: str = "snappy") -> Path:
    """A part as Spark writes a transform's output: event time first, then the data columns."""
    rows = np.arange(start, start + ROWS)
    table = pa.table(
        {
            "event_time": pa.array(rows * 1000, pa.timestamp("ms", tz="UTC")),
            "symbol": pa.array([f"S{i % 7}" for i in rows]),
            "notional": pa.array(rows * 1.5),
        }
    )
    pq.write_table(table, path, compression=compression, row_group_size=ROWS // 2)
    return path


@pytest.fixture
def parts(tmp_path: Path) -> list[Path]:
    (tmp_path / "parts").mkdir()
    return [_part(tmp_path / "parts" / f"part-{i}.parquet", i * ROWS) for i in range(3)]


def _slice(tmp_path: Path, parts: list[Path]) -> Path:
    """The slice spliced from `parts` in order, as the engine writes it (system columns added)."""
    path = tmp_path / "slice.parquet"
    writer._assemble([str(p) for p in parts], str(path), Vocab(), SYSTEM_TIME, 10)
    return path


def _publish(ready: Path, parts: list[Path]) -> None:
    ready.mkdir(exist_ok=True)
    for place, part in enumerate(parts):
        os.link(part, ready / f"{place:06d}-000.parquet")


@pytest.fixture
def first_row_groups(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Per column hashed from the slice (the first time): the row group it was read from (0: all of it)."""
    found: dict[str, int] = {}
    read = pqh.hash_parquet_column

    def recording(
        digest: lh.RecordDigest, data: pa.Buffer, metadata: pq.FileMetaData, index: int, *rest: int
    ) -> bool:
        if metadata.num_columns == 6:  # the slice's, not a part's
            found.setdefault(digest.schema.names[index], rest[0] if rest else 0)
        return read(digest, data, metadata, index, *rest)

    monkeypatch.setattr(pqh, "hash_parquet_column", recording)
    return found


def _data_columns(first_row_groups: dict[str, int]) -> list[int]:
    return [first_row_groups[name] for name in ("event_time", "symbol", "notional")]


def _expected(path: Path) -> tuple[Multihash, Multihash]:
    """The file's hashes the plain way: its rows as one table, its bytes streamed."""
    return lh.logical_hash_of_table(pq.read_table(path)), pqh.physical_hash_of_file(path)


def test_parts_hashed_ahead_are_continued_from(
    tmp_path: Path, parts: list[Path], first_row_groups: dict[str, int]
) -> None:
    _publish(tmp_path / "ready", parts)
    ahead, stop = PartsAhead(tmp_path / "ready"), threading.Event()
    assert [ahead.hash_next(stop) for _ in range(4)] == [True, True, True, False]  # then nothing more
    assert ahead.hashed is not None and ahead.hashed.fed == {"event_time": 3, "symbol": 3, "notional": 3}
    path = _slice(tmp_path, parts)
    assert pqh.parquet_hashes(path, parts=ahead.hashed) == _expected(path)
    # the data columns continue after the parts' six row groups; the system columns are read whole
    assert first_row_groups == {
        "offset": 0,
        "op": 0,
        "system_time": 0,
        "event_time": 6,
        "symbol": 6,
        "notional": 6,
    }


def test_the_first_parts_only_are_continued_from(
    tmp_path: Path, parts: list[Path], first_row_groups: dict[str, int]
) -> None:
    _publish(tmp_path / "ready", parts[:1])
    ahead = PartsAhead(tmp_path / "ready")
    assert ahead.hash_next(threading.Event())
    path = _slice(tmp_path, parts)
    assert pqh.parquet_hashes(path, parts=ahead.hashed) == _expected(path)
    assert _data_columns(first_row_groups) == [2, 2, 2]


def test_parts_whose_bytes_are_not_the_slices_are_not_continued_from(
    tmp_path: Path, parts: list[Path], first_row_groups: dict[str, int]
) -> None:
    """The same rows, compressed otherwise: their digests would be right, but only byte for byte the same
    chunks prove the slice holds what was hashed."""
    other = _part(tmp_path / "other.parquet", ROWS, compression="zstd")
    _publish(tmp_path / "ready", [parts[0], other, parts[2]])
    ahead, stop = PartsAhead(tmp_path / "ready"), threading.Event()
    assert [ahead.hash_next(stop) for _ in range(3)] == [True, True, True]
    path = _slice(tmp_path, parts)
    assert pqh.parquet_hashes(path, parts=ahead.hashed) == _expected(path)
    assert _data_columns(first_row_groups) == [0, 0, 0]


def test_hashing_ahead_stops_when_told(tmp_path: Path, parts: list[Path]) -> None:
    _publish(tmp_path / "ready", parts)
    ahead, stop = PartsAhead(tmp_path / "ready"), threading.Event()
    assert ahead.hash_next(stop)
    stop.set()
    assert not ahead.hash_next(stop) and not ahead.hash_next(threading.Event())  # stopped for good
    assert ahead.hashed is not None and ahead.hashed.fed == {"event_time": 1, "symbol": 1, "notional": 1}
    path = _slice(tmp_path, parts)
    assert pqh.parquet_hashes(path, parts=ahead.hashed) == _expected(path)


# --- the engine's side: which parts, in which places, when ------------------------------------------------


def test_splits_in_file_order_are_as_long_as_the_smallest_file_when_every_rest_is_empty() -> None:
    sizes = [100, 150, 190]  # Spark's own split size: min(1000, (440 + 3 * 4) // 2) = 226
    middles = [[40], [20, 80], [90]]
    assert SplitPlan.of(sizes, 4, 1000, 2) == SplitPlan(226, NEVER_PACK)
    # the rests (from byte 100) share a partition: no open cost
    assert SplitPlan.of(sizes, 4, 1000, 2, middles) == SplitPlan(100, 0)
    # a row group's middle in a rest, a file twice the smallest (two splits with rows possible), or 8
    # cores (Spark splits at 55 bytes, less than the smallest file): Spark's own split size
    assert SplitPlan.of(sizes, 4, 1000, 2, [[40], [20, 120], [90]]) == SplitPlan(226, NEVER_PACK)
    assert SplitPlan.of([100, 150, 200], 4, 1000, 2, middles) == SplitPlan(231, NEVER_PACK)
    assert SplitPlan.of(sizes, 4, 1000, 8, middles) == SplitPlan(56, NEVER_PACK)
    # files of one size are in order as they are
    assert SplitPlan.of([100, 100], 4, 1000, 2, [[40], [40]]) == SplitPlan(100, NEVER_PACK)


def test_places_of_the_partitions_that_hold_rows() -> None:
    keys: list[PartitionKey | None] = [(200, 0, 100), (0, 0, 100), (100, 0, 100), (0, 100, 20), None]
    # file 0's rest (from byte 100) holds no row group's middle; the last partition packs the rests
    assert places(keys, {0: [50], 100: [60], 200: [40]}) == {1: 0, 2: 1, 0: 2}


def _commit(parts_dir: Path, partition: int) -> None:
    """A task's commit under FileOutputCommitter's algorithm 1: its directory of committed files."""
    task = parts_dir / "_temporary" / "0" / f"task_202402010000_0001_m_{partition:06d}"
    task.mkdir(parents=True)
    (task / f"part-{partition:05d}-1234-c000.snappy.parquet").write_bytes(b"part %d" % partition)


def test_committed_parts_are_published_in_their_places_once_few_are_to_come(tmp_path: Path) -> None:
    parts_dir, ready = tmp_path / "parts", tmp_path / "ready"
    keys: Future[list[PartitionKey | None] | None] = Future()
    keys.set_result([(0, 0, 100), (100, 0, 100), (200, 0, 100), None])
    target = PartsTarget(str(ready), {0: [50], 100: [50], 200: [50]})
    with PartsPublisher(str(parts_dir), target, keys, cores=2):
        _commit(parts_dir, 1)
        time.sleep(0.1)
        assert list(ready.iterdir()) == []  # two of three to come: both cores still busy with them
        _commit(parts_dir, 0)
        _wait_for(ready, 2)
        _commit(parts_dir, 2)
        _wait_for(ready, 3)
    assert {p.name: p.read_bytes() for p in ready.iterdir()} == {
        "000000-000.parquet": b"part 0",
        "000001-000.parquet": b"part 1",
        "000002-000.parquet": b"part 2",
    }


def _wait_for(directory: Path, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(list(directory.glob("*.parquet"))) < count:
        assert time.monotonic() < deadline, f"{count} parts were not published"
        time.sleep(0.01)


def test_a_partition_without_a_key_that_wrote_rows_leaves_the_order_unknown(tmp_path: Path) -> None:
    parts_dir = tmp_path / "parts"
    parts_dir.mkdir()
    first, second = (parts_dir / f"part-{p:05d}-1234-c000.snappy.parquet" for p in (0, 1))
    _part(first, 0)
    _part(second, ROWS)
    assert writer._part_files(str(parts_dir), [(5, 0, 10), (1, 0, 10)]) == [str(second), str(first)]
    assert writer._part_files(str(parts_dir), [(5, 0, 10), None]) is None
    pq.write_table(pq.read_table(second).slice(0, 0), second)  # no rows: placed last (its schema kept)
    assert writer._part_files(str(parts_dir), [(5, 0, 10), None]) == [str(first), str(second)]

"""An ingest of input already in event-time order skips the sort (`engine/event_time_order`): the same
records, offsets, hashes and block events as the sorting path, on ordered, reverse-ordered and shuffled
inputs, with ties in event time kept in input order.

The CSV is read in several partitions (small splits), so the check runs across the parts' boundaries.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from airflow_odf.engine import event_time_order, ingest_job
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.engine.session import session_conf
from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import encode_table
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.hashing.parquet_hashes import logical_hash_of_parquet, physical_hash_of_file
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.operation import IngestError
from airflow_odf.odf.repo.repository import Repository

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
T1 = Timestamp.parse("2024-03-01T10:00:00.123Z")
BASE = datetime(2024, 1, 1, tzinfo=timezone.utc)
ROWS = 6_000  # 2,000 seconds, 3 rows each: ties in event time
READ = model.ReadStepCsv(header=True, ddl_schema=["event_time TIMESTAMP", "id BIGINT", "name STRING"])
SPLIT = 40_000  # bytes per read partition: the 170 kB CSV is read in 5 partitions


@pytest.fixture(autouse=True)
def small_splits(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Several read partitions, and no gathering of this small input into one task."""
    monkeypatch.setattr(ingest_job, "_GATHER_BYTES", 0)
    conf = {"spark.sql.files.maxPartitionBytes": str(SPLIT), "spark.sql.files.openCostInBytes": "0"}
    with session_conf(spark, conf):
        yield


def _lines(order: str) -> list[str]:
    """Rows (event time, id, name); three per second. `by-second` orders shuffle or reverse the seconds
    and keep each second's rows in input order, so the sorted records are the same as the ordered
    input's; `reversed` reverses every row, ties included."""
    seconds = list(range(ROWS // 3))
    if order == "shuffled-by-second":
        random.Random(7).shuffle(seconds)
    elif order == "reversed-by-second":
        seconds.reverse()
    lines = [
        f"{BASE + timedelta(seconds=s):%Y-%m-%dT%H:%M:%S}Z,{s * 3 + k},n{(s * 3 + k) % 97}\n"
        for s in seconds
        for k in range(3)
    ]
    return lines[::-1] if order == "reversed" else lines


def _ingest(tmp_path: Path, runner: LocalSparkRunner, order: str, *, skip: bool) -> dict[str, Any]:
    """Ingests the input in `order` into a new dataset; what was committed."""
    folder = tmp_path / f"{order}-{'skip' if skip else 'sort'}"
    repo = Repository.init(folder / "repo")
    events = [model.AddPushSource(source_name="default", read=READ, merge=model.MergeStrategyAppend())]
    repo.add(
        model.DatasetSnapshot(name="trades", kind=model.DatasetKind.ROOT, metadata=events), system_time=T0
    )
    dataset = repo.dataset("trades")
    data = folder / "in.csv"
    data.write_text("event_time,id,name\n" + "".join(_lines(order)))
    options = IngestOptions(work_dir=folder / "work", source_dir=folder)
    original = event_time_order.SKIP_SORT
    event_time_order.SKIP_SORT = skip
    try:
        result = push_ingest(dataset, "trades", runner, [data], options, system_time=T1)
    finally:
        event_time_order.SKIP_SORT = original
    assert result.records == ROWS
    schema, add = [b.event for _, b in reversed(list(dataset.iter_blocks()))][-2:]
    assert isinstance(schema, model.SetDataSchema) and isinstance(add, model.AddData)
    path = dataset.store.local_path(f"data/{add.new_data.physical_hash}")
    assert physical_hash_of_file(path) == add.new_data.physical_hash
    assert logical_hash_of_parquet(path) == add.new_data.logical_hash
    return {
        "events": [encode_table(schema), encode_table(add)],
        "add": add,
        "rows": pq.read_table(path).to_pylist(),
        "row_groups": pq.ParquetFile(path).metadata.num_row_groups,
    }


@pytest.mark.parametrize("order", ["ordered", "reversed", "shuffled-by-second"])
def test_skipping_the_sort_gives_the_sorting_paths_bytes(
    tmp_path: Path, runner: LocalSparkRunner, order: str
) -> None:
    skipped = _ingest(tmp_path, runner, order, skip=True)
    sorted_ = _ingest(tmp_path, runner, order, skip=False)
    assert skipped["events"] == sorted_["events"]  # SetDataSchema and AddData, hashes included
    assert skipped["rows"] == sorted_["rows"]
    rows = skipped["rows"]
    assert [r["offset"] for r in rows] == list(range(ROWS))
    assert [r["event_time"] for r in rows] == sorted(r["event_time"] for r in rows)
    # ties: input order (ids grow within a second in the ordered input, fall in the reversed one)
    first_second = [r["id"] for r in rows[:3]]
    assert first_second == ([2, 1, 0] if order == "reversed" else [0, 1, 2])
    # the ordered input was written as read (one row group per read partition); the others were sorted
    assert (skipped["row_groups"] > 1) == (order == "ordered")


def test_ordered_and_shuffled_inputs_give_the_same_records(tmp_path: Path, runner: LocalSparkRunner) -> None:
    """The skip changes no record, offset or logical hash against a global sort of the same records."""
    ordered = _ingest(tmp_path, runner, "ordered", skip=True)
    for order in ("shuffled-by-second", "reversed-by-second"):
        other = _ingest(tmp_path, runner, order, skip=True)
        assert other["rows"] == ordered["rows"]
        assert other["add"].new_data.logical_hash == ordered["add"].new_data.logical_hash
        assert other["add"].new_data.offset_interval == ordered["add"].new_data.offset_interval
        assert other["add"].new_watermark == ordered["add"].new_watermark


def test_out_of_order_after_the_first_rows_is_sorted(
    tmp_path: Path, runner: LocalSparkRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In order where it is first looked at, not further on: the write is dropped and the rows sorted."""
    monkeypatch.setattr(event_time_order, "PREFIX_ROWS", 1_000)
    checked: list[bool] = []
    check = event_time_order.parts_in_order

    def parts_in_order(parts: list[str], column: str) -> bool:
        checked.append(check(parts, column))
        return checked[-1]

    monkeypatch.setattr(event_time_order, "parts_in_order", parts_in_order)
    lines = _lines("ordered")
    lines[-300:] = lines[-300:][::-1]  # the last 100 seconds reversed, ties too
    folder = tmp_path / "late"
    repo = Repository.init(folder / "repo")
    events = [model.AddPushSource(source_name="default", read=READ, merge=model.MergeStrategyAppend())]
    repo.add(
        model.DatasetSnapshot(name="trades", kind=model.DatasetKind.ROOT, metadata=events), system_time=T0
    )
    data = folder / "in.csv"
    data.write_text("event_time,id,name\n" + "".join(lines))
    options = IngestOptions(work_dir=folder / "work", source_dir=folder)
    result = push_ingest(repo.dataset("trades"), "trades", runner, [data], options, system_time=T1)
    assert result.records == ROWS
    [add] = [b.event for _, b in repo.dataset("trades").iter_blocks() if isinstance(b.event, model.AddData)]
    path = repo.dataset("trades").store.local_path(f"data/{add.new_data.physical_hash}")
    rows = pq.read_table(path).to_pylist()
    assert [r["offset"] for r in rows] == list(range(ROWS))
    assert [r["event_time"] for r in rows] == sorted(r["event_time"] for r in rows)
    assert [r["id"] for r in rows[-3:]] == [ROWS - 1, ROWS - 2, ROWS - 3]  # ties in input order
    assert checked == [False]  # written as read, found out of order there, then sorted
    assert pq.ParquetFile(path).metadata.num_row_groups == 1  # the global sort's file
    assert list((folder / "work" / "operations").iterdir()) == []  # the dropped parts with it


def test_a_broken_record_late_in_ordered_input_fails_naming_its_line(
    tmp_path: Path, runner: LocalSparkRunner
) -> None:
    lines = _lines("ordered")
    lines[-10] = "2024-01-01T00:33:16Z,notanumber,x\n"
    folder = tmp_path / "broken"
    repo = Repository.init(folder / "repo")
    events = [model.AddPushSource(source_name="default", read=READ, merge=model.MergeStrategyAppend())]
    repo.add(
        model.DatasetSnapshot(name="trades", kind=model.DatasetKind.ROOT, metadata=events), system_time=T0
    )
    dataset = repo.dataset("trades")
    head = dataset.head()
    data = folder / "in.csv"
    data.write_text("event_time,id,name\n" + "".join(lines))
    options = IngestOptions(work_dir=folder / "work", source_dir=folder)
    with pytest.raises(IngestError) as err:
        push_ingest(dataset, "trades", runner, [data], options, system_time=T1)
    assert err.value.kind == "bad-input" and f"line {ROWS - 8}" in str(err.value)
    assert dataset.head() == head and list(dataset.store.list("data")) == []
    assert list((folder / "work" / "operations").iterdir()) == []


def test_input_without_an_event_time_column_is_written_as_read(
    tmp_path: Path, runner: LocalSparkRunner
) -> None:
    """A push's event time is one value for every row: in order by itself. Looking at the first rows
    must still scan a data column — Spark refuses a CSV scan for its corrupt-record column alone."""
    folder = tmp_path / "no-event-time"
    repo = Repository.init(folder / "repo")
    read = model.ReadStepCsv(header=True, ddl_schema=["id BIGINT", "name STRING"])
    events = [model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())]
    repo.add(model.DatasetSnapshot(name="ids", kind=model.DatasetKind.ROOT, metadata=events), system_time=T0)
    dataset = repo.dataset("ids")
    data = folder / "in.csv"
    data.write_text("id,name\n" + "".join(f"{i},n{i % 97}\n" for i in range(ROWS)))
    options = IngestOptions(work_dir=folder / "work", source_dir=folder)
    result = push_ingest(dataset, "ids", runner, [data], options, event_time=T0, system_time=T1)
    assert result.records == ROWS
    [add] = [b.event for _, b in dataset.iter_blocks() if isinstance(b.event, model.AddData)]
    path = dataset.store.local_path(f"data/{add.new_data.physical_hash}")
    rows = pq.read_table(path).to_pylist()
    assert [(r["offset"], r["id"]) for r in rows] == [(i, i) for i in range(ROWS)]
    assert pq.ParquetFile(path).metadata.num_row_groups > 1  # written as read, no sort


def _ts(*seconds: int | None) -> pa.Array:
    values = [None if s is None else BASE + timedelta(seconds=s) for s in seconds]
    return pa.array(values, pa.timestamp("us", tz="UTC"))


@pytest.mark.parametrize(
    ("parts", "in_order"),
    [
        ([[1, 2, 2], [2, 3]], True),  # ties across a boundary
        ([[None, None, 1], [1, 5]], True),  # nulls first
        ([[None], [None, 0], []], True),
        ([[1, 2], [None]], False),  # a null after a value
        ([[1, None, 2]], False),
        ([[1, 3], [2, 4]], False),  # out of order at a boundary
        ([[2, 1]], False),
    ],
)
def test_parts_in_order(tmp_path: Path, parts: list[list[int | None]], in_order: bool) -> None:
    paths = []
    for i, seconds in enumerate(parts):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(pa.table({"event_time": _ts(*seconds)}), path)
        paths.append(str(path))
    assert event_time_order.parts_in_order(paths, "event_time") is in_order

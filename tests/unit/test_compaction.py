"""Compaction planning and the chain it rebuilds, without an engine: grouping by the limits, events that
break groups, the merged AddData's fields, keep-metadata-only, refusals (`odf.compaction.plan`).

`build_root` makes a root of many small slices directly (Parquet slices written with pyarrow, AddData
blocks through the core's commit), as ingests would leave it; the engine tests and bench_compact use it.
"""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_odf.odf.chain.dataset import StagedObject
from airflow_odf.odf.compaction.plan import (
    CompactionError,
    CompactionOptions,
    SliceGroup,
    parse_byte_size,
    plan_compaction,
)
from airflow_odf.odf.compaction.records import RecordsChangedError, check_same_records
from airflow_odf.odf.engine_client.compact_contract import CompactGroup, CompactRequest, CompactResponse
from airflow_odf.odf.engine_client.contract import EngineContractError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.hashing.arrow_digest import logical_hash_of_table
from airflow_odf.odf.hashing.parquet_hashes import parquet_hashes
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.data_schema import data_schema_from_arrow

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
SCHEMA = pa.schema(
    [
        ("offset", pa.int64()),
        ("op", pa.int32()),
        ("system_time", pa.timestamp("ms", tz="UTC")),
        ("event_time", pa.timestamp("ms", tz="UTC")),
        ("city", pa.string()),
        ("population", pa.int64()),
    ]
)
PUSH_SOURCE = model.AddPushSource(
    source_name="default",
    read=model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "city STRING", "population BIGINT"]
    ),
    merge=model.MergeStrategyAppend(),
)


def slice_table(start: int, records: int) -> pa.Table:
    """Records `start..start+records-1` as an ingest writes them (system columns first)."""
    offsets = list(range(start, start + records))
    return pa.table(
        {
            "offset": offsets,
            "op": [0] * records,
            "system_time": [T0 + timedelta(hours=o // records) for o in offsets],
            "event_time": [T0 + timedelta(minutes=o) for o in offsets],
            "city": [f"city-{o % 7}" for o in offsets],
            "population": [o * 10 for o in offsets],
        },
        schema=SCHEMA,
    )


def data_events(state_offset: int | None, slices: list[int], folder: Path) -> tuple[list, list[StagedObject]]:
    """AddData events (and their files) of slices of the given record counts, following `state_offset`;
    each carries the source state and watermark an ingest would."""
    events, objects = [], []
    last = state_offset
    for records in slices:
        start = 0 if last is None else last + 1
        path = folder / f"slice-{start}.parquet"
        pq.write_table(slice_table(start, records), path)
        logical, physical = parquet_hashes(path)
        data = model.DataSlice(
            logical_hash=logical,
            physical_hash=physical,
            offset_interval=model.OffsetInterval(start=start, end=start + records - 1),
            size=path.stat().st_size,
        )
        events.append(
            model.AddData(
                prev_offset=last,
                new_data=data,
                new_watermark=Timestamp.parse((T0 + timedelta(minutes=start + records - 1)).isoformat()),
                new_source_state=model.SourceState(source_name="default", kind="odf/etag", value=f"v{start}"),
            )
        )
        objects.append(StagedObject(f"data/{physical}", path))
        last = start + records - 1
    return events, objects


def build_root(repo: Repository, name: str, slices: list[int], *, chunk: int = 2000) -> None:
    """A root dataset `name` with a push source, a schema and one AddData per entry of `slices` (its
    record count); committed `chunk` blocks at a time."""
    snapshot = model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=[PUSH_SOURCE])
    repo.add(snapshot, system_time=Timestamp.parse("2024-01-01T00:00:00Z"))
    dataset = repo.dataset(name)
    dataset.commit([model.SetDataSchema(schema=data_schema_from_arrow(SCHEMA))])
    append_slices(repo, name, slices, chunk=chunk)


def append_slices(repo: Repository, name: str, slices: list[int], *, chunk: int = 2000) -> None:
    dataset = repo.dataset(name)
    repo.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=repo.work_dir) as folder:
        for i in range(0, len(slices), chunk):
            events, objects = data_events(dataset.state().last_offset, slices[i : i + chunk], Path(folder))
            dataset.commit(events, objects=objects)


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return Repository.init(tmp_path / "repo")


def _shape(entries: list) -> list:
    """Groups as their slices' record counts, other events by type name."""
    return [
        [s.offset_interval.end - s.offset_interval.start + 1 for s in e.slices]
        if isinstance(e, SliceGroup)
        else type(e).__name__
        for e in entries
    ]


def test_groups_are_made_from_the_head_back_within_the_record_limit(repo: Repository) -> None:
    build_root(repo, "cities", [3, 3, 3, 3, 3])
    plan = plan_compaction(repo.dataset("cities"), "cities", CompactionOptions(max_slice_records=6))
    # newest first: [3,3] [3,3] then the oldest alone
    assert _shape(plan.entries) == ["AddPushSource", "SetDataSchema", [3], [3, 3], [3, 3]]
    assert plan.old_blocks == 8 and plan.new_blocks == 6 and plan.old_slices == 5 and plan.new_slices == 3
    assert len(plan.to_merge) == 2 and plan.changes_anything


def test_the_size_limit_bounds_a_group_and_a_big_slice_stands_alone(repo: Repository) -> None:
    build_root(repo, "cities", [2, 3000, 2, 2])
    sizes = [
        s.size
        for g in plan_compaction(repo.dataset("cities"), "cities", CompactionOptions()).groups
        for s in g.slices
    ]
    small, big = min(sizes), max(sizes)
    options = CompactionOptions(max_slice_size=2 * small + small // 2, max_slice_records=10_000)
    plan = plan_compaction(repo.dataset("cities"), "cities", options)
    assert big > options.max_slice_size
    assert _shape(plan.entries) == ["AddPushSource", "SetDataSchema", [2], [3000], [2, 2]]


def test_any_other_event_breaks_a_group(repo: Repository) -> None:
    build_root(repo, "cities", [2, 2])
    dataset = repo.dataset("cities")
    dataset.commit([model.SetInfo(description="cities of the world")])
    append_slices(repo, "cities", [2, 2])
    plan = plan_compaction(dataset, "cities", CompactionOptions())
    assert _shape(plan.entries) == ["AddPushSource", "SetDataSchema", [2, 2], "SetInfo", [2, 2]]
    assert [g.schema_epoch for g in plan.groups] == [1, 1]


def test_the_merged_add_data_takes_its_fields_from_the_group_bounds(repo: Repository) -> None:
    build_root(repo, "cities", [2, 3, 4])
    plan = plan_compaction(repo.dataset("cities"), "cities", CompactionOptions())
    [group] = plan.groups
    merged = model.DataSlice(
        logical_hash=group.slices[0].logical_hash,
        physical_hash=group.slices[0].physical_hash,
        offset_interval=model.OffsetInterval(start=0, end=8),
        size=1,
    )
    event = group.event(merged)
    first, last = group.blocks[0], group.blocks[-1]
    assert event.prev_offset is None and event.prev_offset == first.prev_offset
    assert event.prev_checkpoint == first.prev_checkpoint
    assert event.new_data == merged
    assert event.new_watermark == last.new_watermark
    assert (
        event.new_source_state
        == last.new_source_state
        == model.SourceState(source_name="default", kind="odf/etag", value="v5")
    )
    assert plan.events({0: merged})[-1] == event


def test_a_compact_chain_has_nothing_to_do(repo: Repository) -> None:
    build_root(repo, "cities", [5, 5])
    plan = plan_compaction(repo.dataset("cities"), "cities", CompactionOptions(max_slice_records=5))
    assert not plan.changes_anything and plan.to_merge == []


def test_keep_metadata_only_drops_every_data_block(repo: Repository) -> None:
    build_root(repo, "cities", [2, 2, 2])
    plan = plan_compaction(repo.dataset("cities"), "cities", CompactionOptions(keep_metadata_only=True))
    assert _shape(plan.entries) == ["AddPushSource", "SetDataSchema"]
    assert plan.new_slices == 0 and plan.old_slices == 3 and plan.events({}) == plan.entries


def test_a_derivative_is_compacted_only_to_its_metadata(repo: Repository) -> None:
    build_root(repo, "cities", [2])
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref="cities")],
        transform=model.TransformSql(engine="spark", query="SELECT * FROM cities"),
    )
    repo.add(model.DatasetSnapshot(name="copy", kind=model.DatasetKind.DERIVATIVE, metadata=[transform]))
    with pytest.raises(CompactionError, match=r"copy is a derivative.*--keep-metadata-only"):
        plan_compaction(repo.dataset("copy"), "copy", CompactionOptions())
    plan = plan_compaction(repo.dataset("copy"), "copy", CompactionOptions(keep_metadata_only=True))
    assert _shape(plan.entries) == ["SetTransform"] and not plan.changes_anything


@pytest.mark.parametrize(
    ("text", "expected"),
    [("300MB", 300_000_000), ("64MiB", 64 * 2**20), ("1024", 1024), ("2 kb", 2000), (7, 7)],
)
def test_byte_sizes(text: str | int, expected: int) -> None:
    assert parse_byte_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "1.5GB", "12 parsecs", "-3"])
def test_bad_byte_sizes_are_named(text: str) -> None:
    with pytest.raises(CompactionError, match="expected a size such as 300MB"):
        parse_byte_size(text)


def test_limits_below_one_are_refused(repo: Repository) -> None:
    build_root(repo, "cities", [1])
    with pytest.raises(CompactionError, match="max_slice_records must be at least 1, got 0"):
        plan_compaction(repo.dataset("cities"), "cities", CompactionOptions(max_slice_records=0))


def test_the_compact_request_and_response_travel_as_json() -> None:
    request = CompactRequest(
        operation_id="op",
        dataset_id="did:odf:x",
        dataset_alias="cities",
        groups=[CompactGroup(data_paths=["/a", "/b"], offset_start=0, offset_end=9, schema_epoch=1)],
        out_dir="/out",
    )
    sent = json.loads(request.to_json())
    assert (
        sent["kind"] == "compact" and sent["version"] == 1 and sent["groups"][0]["data_paths"] == ["/a", "/b"]
    )
    response = CompactResponse.from_json(
        json.dumps(
            {
                "version": 1,
                "slices": [{"path": "/out/f", "offset_start": 0, "offset_end": 9, "num_records": 10}],
            }
        )
    )
    assert [(s.path, s.offset_start, s.offset_end) for s in response.slices] == [("/out/f", 0, 9)]
    refused = CompactResponse.from_json(
        json.dumps({"version": 1, "error": {"kind": "contract", "message": "no"}})
    )
    assert refused.error is not None and refused.error.kind == "contract"
    with pytest.raises(EngineContractError, match="contract version 2"):
        CompactResponse.from_json(json.dumps({"version": 2}))
    with pytest.raises(EngineContractError, match="engine response"):
        CompactResponse.from_json(json.dumps({"version": 1, "slices": [{"path": "/out/f"}]}))


def test_the_records_check_finds_a_changed_record(repo: Repository, tmp_path: Path) -> None:
    build_root(repo, "cities", [2, 3])
    dataset = repo.dataset("cities")
    [group] = plan_compaction(dataset, "cities", CompactionOptions()).to_merge
    same = pa.concat_tables([slice_table(0, 2), slice_table(2, 3)])
    changed = same.set_column(5, "population", pa.array([0, 10, 20, 31, 40], pa.int64()))

    def merged(table: pa.Table) -> model.DataSlice:
        return model.DataSlice(
            logical_hash=logical_hash_of_table(table),
            physical_hash=group.slices[0].physical_hash,
            offset_interval=model.OffsetInterval(start=0, end=4),
            size=1,
        )

    check_same_records(dataset, "cities", group.slices, merged(same), tmp_path)
    with pytest.raises(
        RecordsChangedError, match=r"cities: offsets 0\.\.4: the merged file's records differ"
    ):
        check_same_records(dataset, "cities", group.slices, merged(changed), tmp_path)

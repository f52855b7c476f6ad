"""`odf compact` end to end on the shared local SparkSession: merged slices, the rebuilt chain (fields,
integrity, records unchanged), `--verify`, garbage for `odf gc`, a concurrent ingest that wins, slices
written by real ingests, and both recovery paths of a derivative whose input was compacted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_odf.cli.main import main
from airflow_odf.engine.connect_runner import SparkConnectRunner
from airflow_odf.engine.job import run_request
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.data_access import iter_slices, read_slice
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.compaction.execute import CompactionConflictError, run_compaction
from airflow_odf.odf.compaction.plan import CompactionOptions
from airflow_odf.odf.format import model
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.execute import TransformOptions, run_transform
from airflow_odf.odf.transform.plan import InputDivergedError
from tests.unit.test_compaction import append_slices, build_root

ROOT = "cities"
SQL = f"SELECT event_time, city, population * 2 AS doubled FROM {ROOT} WHERE population % 20 = 0"


def records(dataset: Dataset, *, system_time: bool = True) -> list[dict[str, Any]]:
    """Every record in offset order."""
    tables = [read_slice(dataset, s) for s in reversed(list(iter_slices(dataset)))]
    rows = pa.concat_tables(tables).sort_by("offset").to_pylist() if tables else []
    return [{k: v for k, v in r.items() if system_time or k != "system_time"} for r in rows]


def data_keys(dataset: Dataset) -> set[str]:
    return {f"data/{s.physical_hash}" for s in iter_slices(dataset)}


def events(dataset: Dataset) -> list[Any]:
    return [b.event for _, b in reversed(list(dataset.iter_blocks()))]


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return Repository.init(tmp_path / "repo")


def _compact(repo: Repository, *extra: str) -> list[str]:
    return ["compact", "--repo", str(repo.root), *extra, "--format", "json", "--master", "local[2]"]


def test_compaction_merges_slices_keeps_every_record_and_leaves_garbage_for_gc(
    repo: Repository, runner: LocalSparkRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    build_root(repo, ROOT, [3, 4, 5, 2, 6])
    dataset = repo.dataset(ROOT)
    before = records(dataset)
    old_events = events(dataset)
    old_head, old_data = dataset.head(), data_keys(dataset)
    capsys.readouterr()
    assert main([*_compact(repo, ROOT, "--max-slice-records", "12", "--verify")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["prev_head"] == str(old_head) and out["new_head"] == str(dataset.head()) != str(old_head)
    assert (out["blocks_before"], out["blocks_after"], out["slices_before"], out["slices_after"]) == (
        8,
        5,
        5,
        2,
    )
    assert len(out["new_blocks"]) == 4 and out["new_blocks"][-1] == out["new_head"]
    assert out["verified"] and out["merged_groups"] == 2 and not out["up_to_date"]

    new_events = events(dataset)
    assert new_events[:3] == old_events[:3]  # Seed, AddPushSource, SetDataSchema kept as they were
    first, second = new_events[3:]
    old_adds = old_events[3:]
    # from the head back: 6 + 2 records, then 5 would make 13 > 12: groups [3, 4, 5] and [2, 6]
    assert first.new_data.offset_interval == model.OffsetInterval(start=0, end=11)
    assert second.new_data.offset_interval == model.OffsetInterval(start=12, end=19)
    assert (first.prev_offset, first.prev_checkpoint) == (None, None)
    assert (second.prev_offset, second.prev_checkpoint) == (11, old_adds[3].prev_checkpoint)
    assert (
        first.new_watermark == old_adds[2].new_watermark and second.new_watermark == old_adds[4].new_watermark
    )
    assert second.new_source_state == old_adds[4].new_source_state
    assert records(dataset) == before  # offsets, op codes, system and event times, values
    assert verify_integrity(dataset) == []
    state = dataset.state()
    assert (state.num_records, state.last_offset, len(state.data_slices)) == (20, 19, 2)

    assert main(["verify", "--repo", str(repo.root), ROOT, "--integrity"]) == 0
    assert main(["gc", "--repo", str(repo.root), "--min-age", "0"]) == 0
    assert not any(dataset.store.exists(key) for key in old_data)
    assert not dataset.store.exists(f"blocks/{old_head}")
    assert main(["verify", "--repo", str(repo.root), ROOT, "--integrity", "--full"]) == 0
    assert records(dataset) == before

    capsys.readouterr()
    assert main([*_compact(repo, ROOT, "--max-slice-records", "12")]) == 0
    assert json.loads(capsys.readouterr().out)["up_to_date"]  # already compact: nothing changes


def test_a_concurrent_ingest_wins_and_the_compaction_changes_nothing(repo: Repository) -> None:
    build_root(repo, ROOT, [2, 2, 2])
    dataset = repo.dataset(ROOT)

    class IngestMeanwhile(LocalSparkRunner):
        def run(self, request_json: str, work_dir: Path) -> str:
            response = super().run(request_json, work_dir)
            append_slices(repo, ROOT, [3])  # another writer commits while the engine merges
            return response

    with pytest.raises(CompactionConflictError, match="another writer committed while the compaction ran"):
        run_compaction(repo, ROOT, IngestMeanwhile("local[2]"), CompactionOptions())
    assert [type(e).__name__ for e in events(dataset)].count("AddData") == 4  # the ingest is there
    assert dataset.state().num_records == 9 and verify_integrity(dataset) == []
    assert main(["compact", "--repo", str(repo.root), ROOT, "--verify", "--master", "local[2]"]) == 0
    assert [type(e).__name__ for e in events(dataset)].count("AddData") == 1
    assert [r["offset"] for r in records(dataset)] == list(range(9))


def test_the_same_compaction_on_spark_connect(repo: Repository, connect_url: str) -> None:
    build_root(repo, ROOT, [2, 3, 4, 5])
    dataset = repo.dataset(ROOT)
    before = records(dataset)
    options = CompactionOptions(max_slice_records=9, verify=True)
    result = run_compaction(repo, ROOT, SparkConnectRunner(connect_url), options)
    assert result.verified and (result.slices_before, result.slices_after, result.merged_groups) == (4, 2, 2)
    assert [s.offset_interval for s in reversed(list(iter_slices(dataset)))] == [
        model.OffsetInterval(start=0, end=4),
        model.OffsetInterval(start=5, end=13),
    ]
    assert records(dataset) == before and verify_integrity(dataset) == []


def test_slices_of_real_ingests_compact_and_verify(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    read = model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "city STRING", "population BIGINT"]
    )
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(model.DatasetSnapshot(name=ROOT, kind=model.DatasetKind.ROOT, metadata=[source]))
    dataset = repo.dataset(ROOT)
    options = IngestOptions(work_dir=repo.work_dir, log=lambda _line: None)
    for day in range(1, 4):
        path = tmp_path / f"day{day}.csv"
        path.write_text(
            "event_time,city,population\n"
            + "".join(f"2024-01-0{day}T0{i}:00:00Z,C{i},{day * 100 + i}\n" for i in range(3))
        )
        push_ingest(dataset, ROOT, runner, [path], options)
    before = records(dataset)
    result = run_compaction(repo, ROOT, runner, CompactionOptions(verify=True))
    assert result.verified and (result.slices_before, result.slices_after) == (3, 1)
    assert records(dataset) == before and verify_integrity(dataset) == []


def _derivative(repo: Repository, name: str) -> None:
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref=ROOT)],
        transform=model.TransformSql(engine="spark", query=SQL),
    )
    repo.add(model.DatasetSnapshot(name=name, kind=model.DatasetKind.DERIVATIVE, metadata=[transform]))


def _transform(repo: Repository, name: str, runner: LocalSparkRunner, *, recover: bool = False) -> None:
    options = TransformOptions(work_dir=repo.work_dir, recover_diverged=recover, log=lambda _line: None)
    run_transform(repo, name, runner, options)


def _derived(repo: Repository, name: str) -> list[dict[str, Any]]:
    return records(repo.dataset(name), system_time=False)


def test_a_derivative_of_a_compacted_input_recovers_both_ways(
    repo: Repository, runner: LocalSparkRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    build_root(repo, ROOT, [3, 3, 3])
    for name in ("by-reset", "by-compaction"):
        _derivative(repo, name)
        _transform(repo, name, runner)
    append_slices(repo, ROOT, [4])
    run_compaction(repo, ROOT, runner, CompactionOptions())
    append_slices(repo, ROOT, [2])
    _derivative(repo, "fresh")
    _transform(repo, "fresh", runner)
    expected = _derived(repo, "fresh")
    assert [r["offset"] for r in expected] == list(range(len(expected))) and expected

    with pytest.raises(InputDivergedError) as diverged:
        _transform(repo, "by-reset", runner)
    message = str(diverged.value)
    assert "derivative 'by-reset'" in message and "reset or compacted" in message
    assert "`odf pull by-reset --reset-derivatives-on-diverged-input`" in message
    assert "recover_diverged=True" in message and "`odf compact by-reset --keep-metadata-only`" in message

    # way 1: re-process from scratch
    _transform(repo, "by-reset", runner, recover=True)
    assert _derived(repo, "by-reset") == expected

    # way 2: drop the derivative's data, then transform again (the CLI reports the divergence first)
    base = ["--repo", str(repo.root), "--master", "local[2]"]
    assert main(["transform", *base, "by-compaction"]) == 2
    assert "odf compact by-compaction --keep-metadata-only" in capsys.readouterr().err
    assert main(["compact", *base, "by-compaction", "--keep-metadata-only"]) == 0
    derivative = repo.dataset("by-compaction")
    assert [type(e).__name__ for e in events(derivative)] == ["Seed", "SetTransform", "SetDataSchema"]
    assert main(["transform", *base, "by-compaction"]) == 0
    assert _derived(repo, "by-compaction") == expected
    assert verify_integrity(derivative) == []


def test_a_request_without_groups_is_refused(spark: Any) -> None:
    response = run_request(spark, {"version": 1, "kind": "compact", "groups": [], "out_dir": "/nowhere"})
    assert response["error"] == {"kind": "contract", "message": "a compact request needs at least one group"}


def test_a_derivative_needs_keep_metadata_only(repo: Repository, capsys: pytest.CaptureFixture[str]) -> None:
    build_root(repo, ROOT, [1])
    _derivative(repo, "copy")
    assert main(["compact", "--repo", str(repo.root), "copy"]) == 2
    assert "copy is a derivative" in capsys.readouterr().err
    assert main(["compact", "--repo", str(repo.root), "nope"]) == 2
    assert "nope" in capsys.readouterr().err

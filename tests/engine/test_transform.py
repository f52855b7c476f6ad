"""Derivative transforms end to end: roots ingested, SQL run on Spark, ExecuteTransform committed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.cli.main import main
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf import operation
from airflow_odf.odf.chain.data_access import read_slice
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.hashing import parquet_hashes as logical_hash_pq
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.operation import IngestError
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.execute import TransformOptions, run_transform

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
T1 = Timestamp.parse("2024-01-02T00:00:00Z")
T2 = Timestamp.parse("2024-01-03T00:00:00Z")
T3 = Timestamp.parse("2024-01-04T00:00:00Z")


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    repo = Repository.init(tmp_path / "repo")
    read = model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "symbol STRING", "price DOUBLE"]
    )
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(
        model.DatasetSnapshot(name="trades", kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
    )
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref="trades")],
        transform=model.TransformSql(
            engine="spark",
            queries=[
                model.SqlQueryStep(
                    alias="acme", query="SELECT event_time, symbol, price FROM trades WHERE symbol = 'ACME'"
                ),
                model.SqlQueryStep(query="SELECT event_time, symbol, price * 10 AS price10 FROM acme"),
            ],
        ),
    )
    repo.add(
        model.DatasetSnapshot(name="acme", kind=model.DatasetKind.DERIVATIVE, metadata=[transform]),
        system_time=T0,
    )
    return repo


def _push(repo: Repository, runner: LocalSparkRunner, tmp_path: Path, text: str, at: Timestamp) -> str:
    path = tmp_path / f"in-{at.epoch_nanos}.csv"
    path.write_text("event_time,symbol,price\n" + text)
    result = push_ingest(
        repo.dataset("trades"),
        "trades",
        runner,
        [path],
        IngestOptions(work_dir=tmp_path / "w"),
        system_time=at,
    )
    assert result.new_head is not None
    return result.new_head


def _rows(repo: Repository, name: str) -> list[tuple[Any, ...]]:
    dataset = repo.dataset(name)
    events = [b.event for _, b in reversed(list(dataset.iter_blocks()))]
    slices = [e.new_data for e in events if isinstance(e, model.ExecuteTransform) and e.new_data]
    return [
        (r["offset"], r["op"], r["symbol"], r["price10"])
        for s in slices
        for r in read_slice(dataset, s).to_pylist()
    ]


def test_incremental_and_pinned_transforms(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = TransformOptions(work_dir=tmp_path / "w")
    first_head = _push(
        repo, runner, tmp_path, "2024-01-02T10:00:00Z,ACME,1.5\n2024-01-02T11:00:00Z,INIT,2\n", T1
    )
    _push(repo, runner, tmp_path, "2024-01-03T10:00:00Z,ACME,2.5\n", T2)
    # pinned to the first head: only what the upstream produced then
    pinned = run_transform(
        repo,
        "acme",
        runner,
        TransformOptions(work_dir=tmp_path / "w", pinned_heads={"trades": first_head}),
        system_time=T2,
    )
    assert len(pinned.new_blocks) == 2  # SetDataSchema, ExecuteTransform
    assert _rows(repo, "acme") == [(0, 0, "ACME", 15.0)]
    derivative = repo.dataset("acme")
    execute = derivative.block(derivative.head()).event
    [consumed] = execute.query_inputs
    assert consumed.dataset_id == repo.resolve("trades")
    assert (consumed.prev_block_hash, consumed.prev_offset, consumed.new_offset) == (None, None, 1)
    assert str(execute.query_inputs[0].new_block_hash) == first_head
    assert execute.new_watermark == Timestamp.parse("2024-01-02T11:00:00Z")
    # then the rest, incrementally; the system columns are hashed ahead (and checked), not read again
    read_from_file: list[str] = []
    read = logical_hash_pq.hash_parquet_column
    monkeypatch.setattr(
        logical_hash_pq,
        "hash_parquet_column",
        lambda digest, *args: read_from_file.append(digest.schema.names[args[2]]) or read(digest, *args),
    )
    flushed: list[str] = []  # the slice goes into the local store: written out while it is hashed
    flush = operation.fsync_path
    monkeypatch.setattr(operation, "fsync_path", lambda path: flushed.append(Path(path).name) or flush(path))
    rest = run_transform(repo, "acme", runner, options, system_time=T3)
    assert sorted(read_from_file) == ["event_time", "price10", "symbol"]
    assert flushed == ["slice.parquet"]
    assert len(rest.new_blocks) == 1 and rest.records == 1
    assert _rows(repo, "acme") == [(0, 0, "ACME", 15.0), (1, 0, "ACME", 25.0)]
    last = derivative.block(derivative.head()).event
    assert (
        last.prev_offset == 0
        and last.query_inputs[0].prev_offset == 1
        and last.query_inputs[0].new_offset == 2
    )
    assert run_transform(repo, "acme", runner, options, system_time=T3).up_to_date
    assert verify_integrity(derivative) == []


def test_bad_query_commits_nothing(repo: Repository, runner: LocalSparkRunner, tmp_path: Path) -> None:
    _push(repo, runner, tmp_path, "2024-01-02T10:00:00Z,ACME,1.5\n", T1)
    broken = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref="trades")],
        transform=model.TransformSql(engine="spark", query="SELECT symbol FROM trades"),
    )
    repo.add(
        model.DatasetSnapshot(name="broken", kind=model.DatasetKind.DERIVATIVE, metadata=[broken]),
        system_time=T0,
    )
    head = repo.dataset("broken").head()
    with pytest.raises(IngestError, match="no event-time column"):
        run_transform(repo, "broken", runner, TransformOptions(work_dir=tmp_path / "w"), system_time=T2)
    assert repo.dataset("broken").head() == head


def test_odf_transform_command(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _push(repo, runner, tmp_path, "2024-01-02T10:00:00Z,ACME,1.5\n", T1)
    _push(repo, runner, tmp_path, "2024-01-03T10:00:00Z,ACME,2.5\n", T2)
    capsys.readouterr()
    base = ["transform", "--repo", str(repo.root), "acme", "--master", "local[2]", "--format", "json"]
    assert main([*base, "--input-head", f"trades={first}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["records"] == 1 and len(out["new_blocks"]) == 2
    assert main(base) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 1
    assert main([*base, "--input-head", "trades"]) == 2
    assert "expected ALIAS=HASH" in capsys.readouterr().err
    assert main([*base, "--input-head", "nope=" + first]) == 2
    assert "nope" in capsys.readouterr().err


def test_provenance_of_a_transformed_record_and_the_offsets_read(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real transform in two batches: the result (the operator's XCom) says which offsets of the input
    its ExecuteTransforms read, and `odf inspect provenance` leads from an output record to the
    input's AddData blocks that hold what its step read."""
    first = _push(repo, runner, tmp_path, "2024-01-02T10:00:00Z,ACME,1.5\n2024-01-02T11:00:00Z,INIT,2\n", T1)
    second = _push(repo, runner, tmp_path, "2024-01-03T10:00:00Z,ACME,2.5\n", T2)
    trades = str(repo.resolve("trades"))
    options = TransformOptions(work_dir=tmp_path / "w", max_input_records=2)  # one batch per slice
    result = run_transform(repo, "acme", runner, options, system_time=T3)
    assert result.as_dict()["input_offsets"] == {trades: [{"start": 0, "end": 2}]}
    assert run_transform(repo, "acme", runner, options, system_time=T3).as_dict()["input_offsets"] == {}

    assert (
        main(["inspect", "provenance", "acme", "--offset", "1", "-o", "json", "--repo", str(repo.root)]) == 0
    )
    acme, root = json.loads(capsys.readouterr().out)["datasets"]
    derivative = repo.dataset("acme")
    [step] = acme["blocks"]
    assert (step["block"], step["offsets"]) == (str(derivative.head()), {"start": 1, "end": 1})
    assert step["inputs"] == [
        {
            "dataset_id": trades,
            "name": "trades",
            "prev_block_hash": first,
            "new_block_hash": second,
            "offsets": {"start": 2, "end": 2},
        }
    ]
    assert (root["name"], root["status"], root["offsets"]) == ("trades", "resolved", [{"start": 2, "end": 2}])
    assert [b["block"] for b in root["blocks"]] == [second]
    assert root["blocks"][0]["watermark"] == "2024-01-03T10:00:00Z"

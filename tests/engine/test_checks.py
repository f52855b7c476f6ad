"""Quality checks before the head moves (docs/checks.md), on the shared local SparkSession: column and
table checks pass and fail on the candidate slice, uniqueness across history, the failing rows, nothing
committed on a failure (head, blocks and data files unchanged, staged objects gone), the rejected slice
kept and listed, removed by gc; the same gate on transforms."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_odf.cli.main import main
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.checks import ChecksFailed, resolve_suite
from airflow_odf.odf.checks.quarantine import collect_rejected, list_rejected
from airflow_odf.odf.checks.record import read_checks_record
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.operation import IngestResult
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.execute import TransformOptions, run_transform

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
TRADES = "trades"
DAILY = "daily"
CHECKS = {
    "columns": {
        "id": {"null_check": {"equal_to": 0}, "unique_check": {"equal_to": 0}},
        "price": {"min": {"geq_to": 0}, "max": {"leq_to": 1000}},
        "symbol": {"distinct_check": {"geq_to": 1}},
    },
    "tables": {
        "not_empty": {"check_statement": "COUNT(*) > 0"},
        "positive_qty": {"check_statement": "qty > 0"},
    },
}


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    repo = Repository.init(tmp_path / "repo")
    read = model.ReadStepCsv(
        header=True,
        ddl_schema=["event_time TIMESTAMP", "id BIGINT", "symbol STRING", "price DOUBLE", "qty BIGINT"],
    )
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(
        model.DatasetSnapshot(name=TRADES, kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
    )
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref=TRADES)],
        transform=model.TransformSql(
            engine="spark",
            query=f"SELECT event_time, symbol, price * qty AS notional FROM {TRADES}",
        ),
    )
    repo.add(
        model.DatasetSnapshot(name=DAILY, kind=model.DatasetKind.DERIVATIVE, metadata=[transform]),
        system_time=T0,
    )
    return repo


class Env:
    def __init__(self, repo: Repository, runner: LocalSparkRunner, tmp_path: Path) -> None:
        self.repo, self.runner, self.tmp = repo, runner, tmp_path
        self.pushes = 0

    def push(self, rows: list[str], checks: Any = CHECKS, **options: Any) -> IngestResult:
        self.pushes += 1
        path = self.tmp / f"in-{self.pushes}.csv"
        path.write_text("event_time,id,symbol,price,qty\n" + "".join(f"{r}\n" for r in rows))
        opts = IngestOptions(work_dir=self.repo.work_dir, checks=resolve_suite(checks), **options)
        return push_ingest(self.repo.dataset(TRADES), TRADES, self.runner, [path], opts)

    def snapshot(self, name: str = TRADES) -> tuple[str | None, list[str], list[str]]:
        """The head, the block files and the data files of a dataset."""
        root = self.repo.dataset(name).store.local_path("refs/head")
        assert root is not None
        folder = root.parent.parent
        head = (folder / "refs" / "head").read_text()
        data = sorted(os.listdir(folder / "data")) if (folder / "data").is_dir() else []
        return head, sorted(os.listdir(folder / "blocks")), data


@pytest.fixture
def env(repo: Repository, runner: LocalSparkRunner, tmp_path: Path) -> Env:
    return Env(repo, runner, tmp_path)


GOOD = ["2024-01-02T00:00:00Z,1,ACME,10.5,3", "2024-01-02T00:01:00Z,2,INIT,20,1"]


def _by_name(result: IngestResult | ChecksFailed) -> dict[str, dict[str, Any]]:
    checks = result.as_dict()["checks"]
    return {c["name"]: c for c in checks}


def test_passing_checks_commit_and_report_every_result(env: Env, repo: Repository) -> None:
    result = env.push(GOOD)
    assert result.records == 2
    checks = _by_name(result)
    assert list(checks) == [
        "id.null_check",
        "id.unique_check",
        "price.min",
        "price.max",
        "symbol.distinct_check",
        "not_empty",
        "positive_qty",
    ]
    assert all(c["success"] for c in checks.values())
    assert checks["price.min"]["observed"] == 10.5 and checks["price.max"]["observed"] == 20
    assert checks["symbol.distinct_check"]["observed"] == 2
    assert checks["id.unique_check"] == {
        "name": "id.unique_check",
        "kind": "column",
        "column": "id",
        "check": "unique_check",
        "success": True,
        "observed": 0,
        "expected": "equal_to 0",
        "failing_rows": [],
    }
    assert checks["not_empty"]["kind"] == "table" and checks["not_empty"]["check"] == "sql"
    assert checks["not_empty"]["observed"] == 1 and checks["not_empty"]["expected"] == "true"
    # the commit's record, keyed by the head it made
    record = read_checks_record(repo.dataset(TRADES))
    assert list(record) == [result.new_head]
    assert [(e["name"], e["success"]) for e in record[result.new_head]][:2] == [
        ("id.null_check", True),
        ("id.unique_check", True),
    ]


def test_failing_column_and_table_checks_commit_nothing(env: Env, repo: Repository) -> None:
    env.push(GOOD)
    before = env.snapshot()
    bad = [
        "2024-01-03T00:00:00Z,3,ACME,-1,2",
        "2024-01-03T00:00:01Z,3,ACME,5,0",
        "2024-01-03T00:00:02Z,,ACME,7,4",
    ]
    with pytest.raises(ChecksFailed) as caught:
        env.push(bad)
    error = caught.value
    failed = {r.name: r for r in error.failed}
    assert set(failed) == {"id.null_check", "id.unique_check", "price.min", "positive_qty"}
    assert failed["id.null_check"].observed == 1
    assert [r["price"] for r in failed["id.null_check"].failing_rows] == [7.0]
    assert failed["id.unique_check"].observed == 1
    assert sorted(r["qty"] for r in failed["id.unique_check"].failing_rows) == [0, 2]
    assert failed["price.min"].observed == -1.0
    assert [(r["id"], r["price"]) for r in failed["price.min"].failing_rows] == [(3, -1.0)]
    assert failed["positive_qty"].observed == 0
    assert [r["qty"] for r in failed["positive_qty"].failing_rows] == [0]
    lines = error.lines()
    assert lines[0] == f"{TRADES}: 4 of 7 check(s) failed; nothing was committed"
    assert (
        len(lines) == 5
        and "check 'price.min' (min of price) failed: observed -1.0, expected geq_to 0" in lines[3]
    )
    # the dataset is exactly as it was; nothing staged is left in the scratch space
    assert env.snapshot() == before
    assert repo.dataset(TRADES).state().num_records == 2
    assert os.listdir(repo.work_dir / "operations") == []
    assert list_rejected(repo.work_dir) == []


def test_aggregate_statement_and_tolerance(env: Env) -> None:
    checks = {
        "columns": {"qty": {"max": {"equal_to": 100, "tolerance": 0.1}}},
        "tables": {"enough": {"check_statement": "SUM(qty) >= 100"}},
    }
    assert all(c["success"] for c in env.push(["2024-01-02T00:00:00Z,1,A,1,105"], checks=checks).checks or [])
    with pytest.raises(ChecksFailed) as caught:
        env.push(["2024-01-02T00:00:00Z,2,A,1,89"], checks=checks)
    failed = {r.name: r for r in caught.value.failed}
    assert failed["qty.max"].observed == 89 and failed["qty.max"].expected == "equal_to 100 (tolerance 0.1)"
    assert failed["enough"].observed == 0 and failed["enough"].failing_rows == []  # an aggregate names no row


def test_unique_across_history(env: Env) -> None:
    checks = {
        "columns": {"id": {"unique_check": {"equal_to": 0, "scope": "dataset"}}},
        "tables": {
            "new_ids": {
                "query": "SELECT c.id FROM candidate c JOIN dataset d ON c.id = d.id "
                "GROUP BY c.id HAVING COUNT(*) > 1",
                "scope": "dataset",
            }
        },
    }
    env.push(GOOD, checks=checks)
    before = env.snapshot()
    with pytest.raises(ChecksFailed) as caught:
        env.push(["2024-01-05T00:00:00Z,2,INIT,21,1", "2024-01-05T00:00:00Z,9,INIT,21,1"], checks=checks)
    failed = {r.name: r for r in caught.value.failed}
    assert failed["id.unique_check"].observed == 1
    assert [r["id"] for r in failed["id.unique_check"].failing_rows] == [2]
    assert failed["new_ids"].observed == 1 and failed["new_ids"].failing_rows == [{"id": 2}]
    assert env.snapshot() == before
    # over the candidate alone the same slice passes
    assert (
        env.push(
            ["2024-01-05T00:00:00Z,2,INIT,21,1"],
            checks={"columns": {"id": {"unique_check": {"equal_to": 0}}}},
        ).records
        == 1
    )


def test_distinct_counts_stay_exact_when_hashes_collide(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine counts distinct values from 64-bit hashes (engine/exact_distinct.py): with every hash
    forced into 2 buckets, the counts and the failing rows are still exact (also across history)."""
    from pyspark.sql import functions as F

    from airflow_odf.engine import exact_distinct

    monkeypatch.setattr(exact_distinct, "_hash", lambda c: F.pmod(F.xxhash64(c), F.lit(2)))
    checks = {
        "columns": {
            "symbol": {"unique_check": {"equal_to": 0}, "distinct_check": {"equal_to": 5}},
            "id": {"unique_check": {"equal_to": 0, "scope": "dataset"}},
        }
    }
    symbols = ["A", "B", "C", "D", "E"]
    passed = env.push([f"2024-01-02T00:0{k}:00Z,{k},{s},1,1" for k, s in enumerate(symbols)], checks=checks)
    assert [(c["name"], c["observed"], c["success"]) for c in passed.as_dict()["checks"]] == [
        ("symbol.unique_check", 0, True),
        ("symbol.distinct_check", 5, True),
        ("id.unique_check", 0, True),
    ]
    before = env.snapshot()
    again = ["A", "B", "C", "A", "D", "E", "A"]  # A three times: 2 values repeat one before them
    rows = [f"2024-01-03T00:0{k}:00Z,{10 + k},{s},1,1" for k, s in enumerate(again)]
    rows[1] = "2024-01-03T00:01:00Z,4,B,1,1"  # id 4 is in the history
    with pytest.raises(ChecksFailed) as caught:
        env.push(rows, checks=checks)
    results = {r.name: r for r in caught.value.results}
    assert results["symbol.distinct_check"].observed == 5 and results["symbol.distinct_check"].success
    unique = results["symbol.unique_check"]
    assert unique.observed == 2 and not unique.success
    assert sorted(r["id"] for r in unique.failing_rows) == [10, 13, 16]
    history = results["id.unique_check"]
    assert history.observed == 1 and [r["id"] for r in history.failing_rows] == [4]
    assert env.snapshot() == before


def test_failing_rows_are_a_sample_of_ten(env: Env) -> None:
    rows = [f"2024-01-02T00:00:{i:02d}Z,{i},A,-{i + 1},1" for i in range(25)]
    with pytest.raises(ChecksFailed) as caught:
        env.push(rows, checks={"tables": {"negative": {"query": "SELECT * FROM candidate WHERE price < 0"}}})
    [failed] = caught.value.failed
    assert failed.observed == 25 and len(failed.failing_rows) == 10
    assert all(r["price"] < 0 for r in failed.failing_rows)


def test_quarantine_keeps_lists_and_gc_removes(
    env: Env, repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    env.push(GOOD)
    before = env.snapshot()
    with pytest.raises(ChecksFailed) as caught:
        env.push(["2024-01-03T00:00:00Z,5,ACME,-3,1"], quarantine=True)
    kept = caught.value.quarantine
    assert kept is not None and kept.parent == repo.work_dir / "rejected"
    assert str(kept) in caught.value.lines()[0]
    assert env.snapshot() == before
    [rejected] = list_rejected(repo.work_dir, TRADES)
    assert rejected.path == kept and rejected.records == 1 and rejected.head == before[0]
    [slice_file] = rejected.files
    table = pq.read_table(slice_file)
    assert table.column("id").to_pylist() == [5] and table.column("offset").to_pylist() == [2]
    assert [r.name for r in rejected.results if not r.success] == ["price.min"]

    capsys.readouterr()
    assert main(["inspect", "rejected", "--repo", str(repo.location)]) == 0
    out = capsys.readouterr().out
    assert kept.name in out and TRADES in out and "1 of 7 failed" in out
    assert main(["inspect", "rejected", "--repo", str(repo.location), kept.name[:8], "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["records"] == 1 and shown["files"] == [str(slice_file)]
    assert [c["name"] for c in shown["checks"] if not c["success"]] == ["price.min"]

    assert collect_rejected(repo.work_dir, 3600) == []  # young: kept
    os.utime(kept, (0, 0))
    assert main(["gc", "--repo", str(repo.location)]) == 0
    assert f"removed a rejected slice: {kept}" in capsys.readouterr().out
    assert not kept.exists() and list_rejected(repo.work_dir) == []


def test_transform_checks_gate_the_commit(env: Env, repo: Repository) -> None:
    env.push(["2024-01-02T00:00:00Z,1,A,10,2", "2024-01-02T00:00:01Z,2,B,-5,2"], checks=None)
    before = env.snapshot(DAILY)
    checks = resolve_suite(None, ["non_negative=MIN(notional) >= 0"])
    options = TransformOptions(work_dir=repo.work_dir, checks=checks, quarantine=True)
    with pytest.raises(ChecksFailed) as caught:
        run_transform(repo, DAILY, env.runner, options)
    [failed] = caught.value.failed
    assert failed.name == "non_negative" and failed.observed == 0
    assert env.snapshot(DAILY) == before
    assert [r.dataset for r in list_rejected(repo.work_dir)] == [DAILY]

    passing = resolve_suite({"columns": {"notional": {"null_check": {"equal_to": 0}}}})
    result = run_transform(repo, DAILY, env.runner, TransformOptions(work_dir=repo.work_dir, checks=passing))
    assert result.records == 2 and [(c["name"], c["success"]) for c in result.checks or []] == [
        ("notional.null_check", True)
    ]
    assert list(read_checks_record(repo.dataset(DAILY))) == [result.new_head]


def test_an_unknown_column_is_named(env: Env) -> None:
    from airflow_odf.odf.operation import IngestError

    with pytest.raises(IngestError, match=r"check 'volume\.min': the data has no column 'volume'"):
        env.push(GOOD, checks={"columns": {"volume": {"min": {"geq_to": 0}}}})


def test_the_cli_reports_checks_in_json_and_exits_4_on_a_failure(
    env: Env, repo: Repository, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text("event_time,id,symbol,price,qty\n" + "\n".join(GOOD) + "\n")
    bad.write_text("event_time,id,symbol,price,qty\n2024-01-03T00:00:00Z,7,A,-2,1\n")
    checks = tmp_path / "checks.yaml"
    checks.write_text("columns:\n  price:\n    min: {geq_to: 0}\n")
    base = ["ingest", "--repo", str(repo.location), TRADES, "--checks", str(checks), "--format", "json"]
    capsys.readouterr()
    assert main([*base[:4], str(good), *base[4:], "--check", "has_rows=COUNT(*) > 0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["records"] == 2
    assert [(c["name"], c["success"], c["observed"]) for c in out["checks"]] == [
        ("price.min", True, 10.5),
        ("has_rows", True, 1),
    ]
    head = env.snapshot()
    assert main([*base[:4], str(bad), *base[4:]]) == 4
    captured = capsys.readouterr()
    failure = json.loads(captured.out)
    assert failure["committed"] is False and failure["quarantine"] is None
    [check] = failure["checks"]
    assert check["name"] == "price.min" and check["observed"] == -2.0 and not check["success"]
    assert [r["id"] for r in check["failing_rows"]] == [7]
    lines = [line for line in captured.err.splitlines() if not line.startswith(("WARN", "26/"))]
    assert f"{TRADES}: 1 of 1 check(s) failed; nothing was committed" in lines
    assert env.snapshot() == head
    # a derivative through `odf transform`, passing
    capsys.readouterr()
    transform = ["transform", "--repo", str(repo.location), DAILY, "--check", "rows=COUNT(*) = 2"]
    assert main([*transform, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["records"] == 2 and out["checks"][0]["name"] == "rows" and out["checks"][0]["success"]


def test_the_warm_engine_evaluates_the_same_checks(
    repo: Repository, tmp_path: Path, connect_url: str
) -> None:
    """On a Spark Connect server (how production tasks run): the same results, the same failing rows,
    nothing committed on a failure."""
    from airflow_odf.engine.connect_runner import SparkConnectRunner

    env = Env(repo, SparkConnectRunner(connect_url), tmp_path)  # type: ignore[arg-type]
    passed = env.push(GOOD)
    assert [(c["name"], c["success"]) for c in passed.checks or []][:3] == [
        ("id.null_check", True),
        ("id.unique_check", True),
        ("price.min", True),
    ]
    before = env.snapshot()
    with pytest.raises(ChecksFailed) as caught:
        env.push(["2024-01-03T00:00:00Z,1,ACME,-1,2"])
    failed = {r.name: r for r in caught.value.failed}
    assert set(failed) == {"price.min"}  # id 1 again, but unique_check reads the candidate alone here
    assert failed["price.min"].failing_rows[0]["price"] == -1.0
    assert env.snapshot() == before
    # a repeated value: its hash repeats, and the engine recounts those rows on the server
    with pytest.raises(ChecksFailed) as caught:
        env.push(
            [
                "2024-01-04T00:00:00Z,5,ACME,1,1",
                "2024-01-04T00:00:00Z,6,INIT,1,1",
                "2024-01-04T00:00:00Z,7,ACME,1,1",
            ],
            checks={
                "columns": {"symbol": {"unique_check": {"equal_to": 0}, "distinct_check": {"equal_to": 2}}}
            },
        )
    results = {r.name: r for r in caught.value.results}
    assert results["symbol.distinct_check"].observed == 2 and results["symbol.distinct_check"].success
    assert results["symbol.unique_check"].observed == 1
    assert sorted(r["id"] for r in results["symbol.unique_check"].failing_rows) == [5, 7]
    assert env.snapshot() == before

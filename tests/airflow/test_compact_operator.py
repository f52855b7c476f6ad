"""`OdfCompactOperator` and the example maintenance DAG `odf_compaction` with `dag.test()` on SQLite and
the local Spark: the trades root of example DAG 1 compacted (records verified), its derivative
re-derived to the same records and verified; XCom and asset event; refusals at parse time; a compaction
that loses the race against an ingest fails for a retry and changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow.exceptions import AirflowException
from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.odf.chain.data_access import iter_slices, read_slice
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.operators.compact import OdfCompactOperator
from tests.airflow.dag_runs import asset_events, load_dag, task_states, xcom
from tests.unit.test_compaction import append_slices, build_root


def _records(dataset: Dataset) -> list[dict[str, Any]]:
    rows = [r for s in reversed(list(iter_slices(dataset))) for r in read_slice(dataset, s).to_pylist()]
    return [{k: v for k, v in r.items() if k != "system_time"} for r in rows]


def _adds(dataset: Dataset) -> int:
    return sum(isinstance(b.event, model.AddData) for _, b in dataset.iter_blocks())


@pytest.mark.usefixtures("airflow_db", "spark")
def test_the_maintenance_dag_compacts_the_root_and_rederives_its_derivative(odf_repo: Path) -> None:
    assert task_states(load_dag("odf_trades_pipeline.py", "odf_trades_pipeline").test())["verify_daily"] == (
        "success"
    )
    repo = Repository.open(odf_repo)
    trades, daily = repo.dataset("com.example.trades"), repo.dataset("com.example.trades.daily")
    trades_before, daily_before = _records(trades), _records(daily)
    assert _adds(trades) == 2 and trades_before

    run = load_dag("odf_compaction.py", "odf_compaction").test()
    assert task_states(run) == {
        "trades_need_compaction": "success",
        "compact_trades": "success",
        "rederive_daily": "success",
        "verify_daily": "success",
    }
    compacted = xcom(run, "compact_trades")
    assert compacted["new_head"] == str(trades.head()) != compacted["prev_head"]
    assert compacted["verified"] and (compacted["slices_before"], compacted["slices_after"]) == (2, 1)
    assert compacted["dataset_id"] == str(trades.state().dataset_id) and not compacted["up_to_date"]
    assert _adds(trades) == 1 and _records(trades) == trades_before
    assert _records(daily) == daily_before
    assert xcom(run, "verify_daily")["ok"]
    events = [e for e in asset_events("odf://") if e["source_task_id"] == "compact_trades"]
    assert [e["extra"] for e in events] == [
        {"head": compacted["new_head"], "prev_head": compacted["prev_head"]}
    ]


@pytest.mark.usefixtures("airflow_db")
def test_the_maintenance_dag_skips_when_there_is_nothing_to_compact(odf_repo: Path) -> None:
    """Enabled before anything was ingested, or over slices already as few as the limits allow, the
    weekly run short-circuits: nothing runs on the engine, the chain is untouched (no Spark here)."""
    dag = load_dag("odf_compaction.py", "odf_compaction")
    skipped = dict.fromkeys(("compact_trades", "rederive_daily", "verify_daily"), "skipped")
    # no repository yet, then a repository without the dataset
    assert task_states(dag.test(logical_date=None)) == {"trades_need_compaction": "success", **skipped}
    repo = Repository.init(odf_repo)
    assert task_states(dag.test(logical_date=None)) == {"trades_need_compaction": "success", **skipped}
    # the dataset with one slice: nothing to merge
    build_root(repo, "com.example.trades", [3])
    head = repo.dataset("com.example.trades").head()
    assert task_states(dag.test(logical_date=None)) == {"trades_need_compaction": "success", **skipped}
    assert repo.dataset("com.example.trades").head() == head


def test_bad_limits_fail_at_parse_time() -> None:
    with pytest.raises(ValueError, match="expected a size such as 300MB"):
        OdfCompactOperator(task_id="c", dataset="x", max_slice_size="big")
    with pytest.raises(ValueError, match="max_slice_records must be at least 1"):
        OdfCompactOperator(task_id="c", dataset="x", max_slice_records=0)


@pytest.mark.usefixtures("spark")
def test_a_lost_race_is_retried_and_a_derivative_needs_keep_metadata_only(odf_repo: Path) -> None:
    repo = Repository.init(odf_repo)
    build_root(repo, "cities", [2, 2])
    dataset = repo.dataset("cities")
    op = OdfCompactOperator(task_id="compact", dataset="cities", engine="local")
    runner = op.runner
    op.runner = lambda: _IngestMeanwhile(runner(), repo)  # type: ignore[method-assign]
    with pytest.raises(AirflowException, match="another writer committed") as lost:
        op.execute({})
    assert not isinstance(lost.value, AirflowFailException)  # retried
    assert _adds(dataset) == 3 and [r["offset"] for r in _records(dataset)] == list(range(7))

    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref="cities")],
        transform=model.TransformSql(engine="spark", query="SELECT event_time, city FROM cities"),
    )
    repo.add(model.DatasetSnapshot(name="copy", kind=model.DatasetKind.DERIVATIVE, metadata=[transform]))
    with pytest.raises(AirflowFailException, match="copy is a derivative"):
        OdfCompactOperator(task_id="compact_copy", dataset="copy", engine="local").execute({})


class _IngestMeanwhile:
    """The engine runner, with another writer committing while it merges."""

    def __init__(self, runner: Any, repo: Repository) -> None:
        self.runner, self.repo = runner, repo

    def run(self, request_json: str, work_dir: Path) -> str:
        response = self.runner.run(request_json, work_dir)
        append_slices(self.repo, "cities", [3])
        return response

"""Example DAG 1 end to end with `dag.test()` on SQLite and the local Spark: manifests applied, root
ingested, derivative transformed pinned to the ingest's head through XCom, verified; asset events."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_odf.odf import model
from airflow_odf.odf.repository import Repository
from tests.airflow.dag_runs import asset_events, load_dag, task_states, xcom


@pytest.mark.usefixtures("airflow_db", "spark")
def test_trades_pipeline(odf_repo: Path) -> None:
    dag = load_dag("odf_trades_pipeline.py", "odf_trades_pipeline")
    run = dag.test()
    assert task_states(run) == {
        "apply_manifests": "success",
        "ingest_trades": "success",
        "transform_daily": "success",
        "verify_daily": "success",
    }
    repo = Repository.open(odf_repo)
    trades, daily = repo.dataset("com.example.trades"), repo.dataset("com.example.trades.daily")
    ingested = xcom(run, "ingest_trades")
    assert ingested["dataset_id"] == str(trades.state().dataset_id)
    assert ingested["new_head"] == str(trades.head()) and ingested["records"] > 0
    transformed = xcom(run, "transform_daily")
    assert transformed["new_head"] == str(daily.head()) and transformed["records"] > 0
    execute = daily.block(daily.head()).event
    assert isinstance(execute, model.ExecuteTransform)
    assert str(execute.query_inputs[0].new_block_hash) == ingested["new_head"]
    report = xcom(run, "verify_daily")
    assert report["ok"] and report["reproducibility"] == "checked"
    applied = {r["dataset"]: r for r in xcom(run, "apply_manifests")}
    assert applied["com.example.trades"]["created"] and applied["com.example.trades.daily"]["created"]
    events = asset_events("odf://")
    by_task = {
        e["source_task_id"]: e
        for e in events
        if e["extra"].get("head") in (ingested["new_head"], transformed["new_head"])
    }
    did = str(daily.state().dataset_id).removeprefix("did:odf:")
    assert by_task["transform_daily"]["uri"].rstrip("/") == f"odf://{did}"
    assert by_task["transform_daily"]["extra"] == {
        "head": transformed["new_head"],
        "prev_head": transformed["prev_head"],
    }
    assert by_task["ingest_trades"]["extra"]["head"] == ingested["new_head"]

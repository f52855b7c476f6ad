"""Example DAG 1 through real `spark-submit`: every engine request of every task is a separate Spark
application submitted by the Spark provider's `SparkSubmitHook` to the master of the `spark_default`
connection (`local[2]`), our package shipped with `--py-files`. Same outcome as the in-process engine
(tests/airflow/test_trades_pipeline_dag.py); Spark's own output lands in the task log."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_odf.odf import model
from airflow_odf.odf.repository import Repository
from tests.airflow.dag_runs import asset_events, load_dag, task_states, xcom

pytestmark = pytest.mark.skipif(shutil.which("spark-submit") is None, reason="spark-submit is not on PATH")


@pytest.fixture(scope="module")
def airflow_db() -> None:
    from airflow.utils import db

    db.resetdb()


@pytest.mark.usefixtures("airflow_db")
def test_trades_pipeline_through_spark_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "repo"
    repo_conn = {"conn_type": "odf_repo", "host": root.as_uri()}
    monkeypatch.setenv("AIRFLOW_CONN_ODF_DEFAULT", json.dumps(repo_conn))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("AIRFLOW__ODF__DEFAULT_ENGINE", "spark-submit")
    dag = load_dag("odf_trades_pipeline.py", "odf_trades_pipeline")
    assert {t.task_id: t.engine for t in dag.tasks} == dict.fromkeys(
        ["apply_manifests", "ingest_trades", "transform_daily", "verify_daily"], "spark-submit"
    )
    run = dag.test()
    assert task_states(run) == {
        "apply_manifests": "success",
        "ingest_trades": "success",
        "transform_daily": "success",
        "verify_daily": "success",
    }
    repo = Repository.open(root)
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
    heads = {ingested["new_head"], transformed["new_head"]}
    events = {e["source_task_id"]: e for e in asset_events("odf://") if e["extra"].get("head") in heads}
    did = str(daily.state().dataset_id).removeprefix("did:odf:")
    assert events["transform_daily"]["uri"].rstrip("/") == f"odf://{did}"
    assert events["transform_daily"]["extra"] == {
        "head": transformed["new_head"],
        "prev_head": transformed["prev_head"],
    }
    assert events["ingest_trades"]["extra"]["head"] == ingested["new_head"]
    # the Spark provider's hook ran one spark-submit per engine request (two files ingested, one
    # transform, its replay by verify) and streamed each application's output into the task log
    out = capfd.readouterr()
    log = (out.out + out.err).splitlines()
    commands = [line for line in log if "Spark-Submit cmd: spark-submit --master local[2]" in line]
    assert len(commands) == 4
    assert all("--py-files" in c and "job.py --request" in c for c in commands)
    spark_lines = [line for line in log if "SparkSubmitHook" in line and "INFO SparkContext:" in line]
    assert any("Running Spark version" in line for line in spark_lines)

"""Example DAG 1 through real `spark-submit`: every engine request of every task is a separate Spark
application submitted by the Spark provider's `SparkSubmitHook` to the master of the `spark_default`
connection (`local[2]`), our package shipped with `--py-files`. Same outcome as the in-process engine
(tests/airflow/test_trades_pipeline_dag.py); Spark's own output lands in the task log."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.airflow.dag_runs import check_trades_pipeline, load_dag

pytestmark = pytest.mark.skipif(shutil.which("spark-submit") is None, reason="spark-submit is not on PATH")

SPARK_INFO = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO [\w$.]+: ")


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
    check_trades_pipeline(run, root)
    # the Spark provider's hook ran one spark-submit per engine request (two files ingested, one
    # transform, its replay by verify) and streamed each application's output into the task log
    out = capfd.readouterr()
    log = (out.out + out.err).splitlines()
    commands = [line for line in log if "Spark-Submit cmd: spark-submit --master local[2]" in line]
    assert len(commands) == 4
    assert all("--py-files" in c and "job.py --request" in c for c in commands)
    # ... at WARN ([odf] spark_log_level): not one of Spark's INFO lines, its startup's included
    assert all("spark.log.level=WARN" in c for c in commands)
    spark_info = [line for line in log if "SparkSubmitHook" in line and SPARK_INFO.search(line)]
    assert spark_info == []

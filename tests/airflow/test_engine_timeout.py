"""The engine request's deadline in Airflow (issue 34, "Deadlines"): the operators' `engine_timeout`, else
`[odf] engine_timeout`, else $ODF_ENGINE_TIMEOUT, else one hour, handed to every engine runner; a bad
value fails the DAG's import or the task, in one line; a request stopped at its deadline fails the task
without retries; and the spark-submit runner kills a job past its deadline through the Spark provider's
hook (a stand-in `spark-submit` on PATH that only sleeps: no JVM starts)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.exceptions import airflow_error
from airflow_odf.hooks.spark_engine import SparkConnectEngineRunner, SparkSubmitEngineRunner
from airflow_odf.odf.operation import IngestError
from airflow_odf.operators.sql import OdfSqlOperator
from airflow_odf.operators.transform import OdfTransformOperator
from airflow_odf.utils.engine_deadline import TIMEOUT, timeout_error
from tests.unit.test_engine_deadline import _sleeping_spark_submit, assert_killed_at_the_deadline


@pytest.fixture(autouse=True)
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ODF_ENGINE_TIMEOUT", raising=False)
    monkeypatch.delenv("AIRFLOW__ODF__ENGINE_TIMEOUT", raising=False)


def _transform(**kwargs: object) -> OdfTransformOperator:
    return OdfTransformOperator(task_id="t", dataset="com.example.daily", **kwargs)  # type: ignore[arg-type]


def test_task_argument_then_odf_option_then_environment_then_one_hour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _transform().request_deadline() == 3600
    monkeypatch.setenv("ODF_ENGINE_TIMEOUT", "1200")
    assert _transform().request_deadline() == 1200
    monkeypatch.setenv("AIRFLOW__ODF__ENGINE_TIMEOUT", "600")
    assert _transform().request_deadline() == 600
    assert _transform(engine_timeout=30).request_deadline() == 30


def test_every_engine_runner_gets_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    monkeypatch.setenv("AIRFLOW_CONN_ODF_DEFAULT", json.dumps({"conn_type": "odf_repo", "host": "/nowhere"}))
    for engine in ("local", "spark-submit", "spark-connect"):
        runner = OdfSqlOperator(task_id="q", sql="SELECT 1", engine=engine, engine_timeout=7).runner()
        assert runner.timeout == 7, engine  # type: ignore[attr-defined]
    assert isinstance(runner, SparkConnectEngineRunner)


def test_a_bad_deadline_fails_the_dag_import_or_the_task_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"^engine_timeout 0: expected a number of seconds above 0$"):
        _transform(engine_timeout=0)
    monkeypatch.setenv("AIRFLOW__ODF__ENGINE_TIMEOUT", "soon")
    with pytest.raises(AirflowFailException, match=r"^\[odf\] engine_timeout 'soon': expected a number"):
        _transform().request_deadline()


def test_a_request_stopped_at_its_deadline_fails_the_task_without_retries() -> None:
    error = airflow_error("com.example.daily", IngestError(TIMEOUT, f"com.example.daily: {timeout_error(5)}"))
    assert type(error) is AirflowFailException


def test_spark_submit_past_its_deadline_is_killed_through_the_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark_submit, pid_file = _sleeping_spark_submit(tmp_path)
    monkeypatch.setenv("PATH", f"{spark_submit.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_ODF_SLEEPY", json.dumps({"conn_type": "spark", "host": "local[1]"})
    )
    runner = SparkSubmitEngineRunner("spark_odf_sleepy", timeout=0.5)
    assert_killed_at_the_deadline(runner, tmp_path, pid_file)

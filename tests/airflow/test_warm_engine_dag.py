"""The warm engine in Airflow: a Spark connection of type `spark_connect` selects the Connect engine with
the hook's URL (token and TLS included); an unreachable server fails the task retryably, naming its URL;
and the example DAG `odf_warm_engine` runs end to end with `dag.test()` on the session's Connect server
(`connect_url`) — no Spark session in this process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.chain.verification import read_record
from airflow_odf.odf.engine_client.connect_server import free_port
from airflow_odf.odf.repo.repository import Repository
from tests.airflow.dag_runs import check_trades_pipeline, load_dag
from tests.connections import spark_connect_conn

CONNECT_CONN = "odf_connect_test"


def spark_connect_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> None:
    env = f"AIRFLOW_CONN_{conn_id.upper()}"
    monkeypatch.setenv(env, json.dumps({"conn_type": "spark_connect", **fields}))


@pytest.fixture
def production_default_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """`[odf] default_engine` as shipped (spark-submit), not the tests' local engine."""
    monkeypatch.setenv("AIRFLOW__ODF__DEFAULT_ENGINE", "spark-submit")


@pytest.mark.usefixtures("production_default_engine")
def test_a_spark_connect_connection_selects_the_connect_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_odf.hooks.spark_engine import SparkConnectEngineRunner, SparkSubmitEngineRunner
    from airflow_odf.operators.ingest import OdfPushIngestOperator

    spark_connect_connection(
        monkeypatch,
        CONNECT_CONN,
        host="spark-connect.internal",
        port=15002,
        password="s3cret",
        extra={"use_ssl": True},
    )

    def runner(**kwargs: Any) -> Any:
        return OdfPushIngestOperator(task_id="push", dataset="d", files=["x.csv"], **kwargs).runner()

    connect = runner(spark_conn_id=CONNECT_CONN)
    assert isinstance(connect, SparkConnectEngineRunner)
    assert connect.remote() == "sc://spark-connect.internal:15002/;token=s3cret;use_ssl=True"
    assert isinstance(runner(spark_conn_id=CONNECT_CONN, engine="spark-connect"), SparkConnectEngineRunner)
    assert isinstance(runner(), SparkSubmitEngineRunner)  # spark_default is of type spark
    assert type(runner(spark_conn_id=CONNECT_CONN, engine="local")).__name__ == "LocalSparkRunner"

    def engine_in_use(**kwargs: Any) -> str:  # what the verification record names (issue 36)
        return OdfPushIngestOperator(task_id="push", dataset="d", files=["x.csv"], **kwargs).engine_in_use()

    assert engine_in_use(spark_conn_id=CONNECT_CONN) == "spark-connect"
    assert engine_in_use() == "spark-submit"
    assert engine_in_use(spark_conn_id=CONNECT_CONN, engine="local") == "local"


@pytest.mark.usefixtures("production_default_engine")
def test_engine_spark_connect_needs_a_spark_connect_connection() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_odf.operators.ingest import OdfPushIngestOperator

    op = OdfPushIngestOperator(task_id="push", dataset="d", files=["x.csv"], engine="spark-connect")
    with pytest.raises(AirflowFailException) as e:
        op.runner().remote()
    assert str(e.value) == (
        "engine spark-connect needs a Spark connection of type 'spark_connect': 'spark_default' is of type "
        "'spark' (host = the server, e.g. sc://127.0.0.1:15002 of `odf engine serve`), or pass spark_conn_id"
    )


@pytest.mark.usefixtures("production_default_engine")
def test_an_unreachable_server_fails_the_task_retryably_naming_its_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip(
        "airflow_odf.engine.connect_runner", reason="engineer A's SparkConnectRunner is not there yet"
    )
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from airflow_odf.operators.ingest import OdfPushIngestOperator

    port = free_port("127.0.0.1")  # nothing listens there
    spark_connect_connection(monkeypatch, CONNECT_CONN, host="127.0.0.1", port=port)
    op = OdfPushIngestOperator(task_id="push", dataset="d", files=["x.csv"], spark_conn_id=CONNECT_CONN)
    runner = op.runner()
    with pytest.raises(AirflowException) as e:
        op.call(lambda: runner.run(json.dumps({"version": 1, "kind": "ingest"}), tmp_path))
    assert not isinstance(e.value, AirflowFailException)  # the task's retries apply
    assert f"sc://127.0.0.1:{port}" in str(e.value) and "odf engine serve" in str(e.value)


@pytest.mark.usefixtures("airflow_db")
def test_warm_engine_dag(odf_repo: Path, connect_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip(
        "airflow_odf.engine.connect_runner", reason="engineer A's SparkConnectRunner is not there yet"
    )
    from airflow_odf.hooks.spark_engine import SparkConnectEngineRunner

    monkeypatch.setenv("AIRFLOW__ODF__DEFAULT_ENGINE", "spark-submit")  # after odf_repo's `local`
    spark_connect_connection(monkeypatch, "spark_connect_default", **spark_connect_conn(connect_url))
    remotes: list[str] = []
    original = SparkConnectEngineRunner.run

    def counted(self: SparkConnectEngineRunner, request_json: str, work_dir: Path) -> str:
        remotes.append(self.remote())
        return original(self, request_json, work_dir)

    monkeypatch.setattr(SparkConnectEngineRunner, "run", counted)
    dag = load_dag("odf_warm_engine.py", "odf_warm_engine")
    run = dag.test()
    check_trades_pipeline(run, odf_repo)
    # ingest, transform and the verification's replay all ran on the server
    assert len(remotes) >= 3 and set(remotes) == {f"{connect_url}/"}
    # and the verification record names it, not the configured default (spark-submit; issue 36)
    daily = Repository.open(odf_repo).dataset("com.example.trades.daily")
    replayed = read_record(daily).replay
    assert replayed is not None and replayed.state.head == daily.head()
    assert replayed.engine == "spark-connect"

"""The real-deployment test's restarted engine (tests/deployment): one push ingest of the CSV file named
in the run's conf on the Spark Connect server of the connection `odf_restart_connect` (the test's own
server, restarted while the first try's request runs), retried by Airflow."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag

from airflow_odf.operators.ingest import OdfPushIngestOperator

DATASET = "com.example.restart.rows"


@dag(
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={"file": ""},
    # a retry while the server still starts fails at once ("no server answered"): the next one waits
    default_args={"retries": 3, "retry_delay": timedelta(seconds=10)},
)
def odf_deployment_restart() -> None:
    OdfPushIngestOperator(
        task_id="push",
        dataset=DATASET,
        files="{{ params.file }}",
        event_time="2024-01-01T00:00:00Z",
        spark_conn_id="odf_restart_connect",
    )


odf_deployment_restart()

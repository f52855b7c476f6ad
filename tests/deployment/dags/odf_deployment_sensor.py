"""The real-deployment test's DAG (tests/deployment): one deferrable `OdfHeadChangedSensor` whose dataset
and known head come from the run's conf, so the test can start it on the current head and then move the
dataset from the `odf` command line, outside Airflow; the triggerer resumes it."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag

from airflow_odf.sensors.head import OdfHeadChangedSensor


@dag(
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    params={"dataset": "com.example.fills", "known_head": ""},
)
def odf_deployment_sensor() -> None:
    OdfHeadChangedSensor(
        task_id="wait_for_head",
        dataset="{{ params.dataset }}",
        known_head="{{ params.known_head }}",
        deferrable=True,
        poke_interval=timedelta(seconds=1),
        timeout=timedelta(minutes=5),
    )


odf_deployment_sensor()

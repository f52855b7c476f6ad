"""Example DAG 2: a scheduled polling source, ingested only when it has something new.

Every hour `wait_for_prices` asks the Url source of `com.example.prices` whether it changed — a
conditional GET carrying the ETag the last ingest recorded, whose body is never read — and only then
`ingest_prices` fetches it and runs the ingest on Spark. With nothing new the sensor gives up after
its timeout and ends *skipped* (`soft_fail`), and so does the ingest: no Spark job, no block. In
`reschedule` mode the sensor frees its worker slot between pokes. `soft_fail` skips a timeout only: a
source that cannot be asked (the URL variable not set, a malformed source) fails the sensor with the
core's message, and one that does not answer (HTTP 5xx, network) is logged and asked again.

Production settings: `max_active_runs=1`, so an hourly run never overlaps the previous one still
waiting; `retries=2`, a few minutes apart, for an ingest whose source or Spark job failed in a way that
may pass (the sensor itself fails only for good: a failure that may pass is retried by its next poke).
It is the only DAG that writes `com.example.prices`.

The source URL is `${{ env.ODF_EXAMPLE_PRICES_URL }}` in the manifest: set that variable where tasks
run. Connections: `odf_default` (an `odf_repo` connection) and, with the default engine,
`spark_default`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import dag

from airflow_odf.operators.ingest import OdfIngestOperator
from airflow_odf.operators.manifest import OdfApplyManifestOperator
from airflow_odf.sensors.source import OdfSourceChangedSensor

EXAMPLES = Path(__file__).resolve().parent


@dag(
    schedule="@hourly",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    tags=["odf", "example"],
)
def odf_polling_source() -> None:
    apply = OdfApplyManifestOperator(
        task_id="apply_manifest",
        manifests=[str(EXAMPLES / "manifests" / "com.example.prices.yaml")],
        create_repository=True,
    )
    # [START howto_sensor_odf_source_changed]
    wait = OdfSourceChangedSensor(
        task_id="wait_for_prices",
        dataset="com.example.prices",
        mode="reschedule",
        poke_interval=timedelta(minutes=5),
        timeout=timedelta(minutes=50),
        soft_fail=True,
    )
    ingest = OdfIngestOperator(task_id="ingest_prices", dataset="com.example.prices")
    wait >> ingest
    # [END howto_sensor_odf_source_changed]
    apply >> wait


polling = odf_polling_source()

"""Example DAG: a derivative transformed in batches — kamu's batching rule in Airflow.

`odf_batching` keeps `com.example.trades.settlement` up to date, but not after every ingest of
`com.example.trades` (example DAG 1 ingests one small file per run): it transforms once the trades hold
at least 1,000 records it has not settled (`min_records_to_await`), or once an hour has passed since
the first of them arrived (`max_batching_interval`) — whichever comes first. The clearing system
reading the settlement dataset gets a few large commits instead of one per ingest.

How it runs: scheduled on the asset of `com.example.trades` (through its alias, as example DAG 5), so
the first ingest after a batch starts a run. Its `await_batch` sensor waits, deferred in the triggerer
(no worker slot), until the rule holds: each check reads the heads and summaries of the derivative and
of its input (no chain walk), and the trigger wakes exactly when the hour ends. The transform is then
pinned to the heads the sensor counted (`input_heads`, through XCom): it processes exactly that batch,
even if more trades arrived meanwhile — those are the next batch. Ingests during the wait queue one
more run, which starts after this one and waits for the next batch; `max_active_runs=1` keeps batches
in order. A day without any trade ends the wait skipped (`timeout`, `soft_fail`); the next ingest
starts a new run.

Production settings: `max_active_runs=1`, `retries=2` a few minutes apart on the transform; a sensor
that cannot ask (a missing connection, an unknown dataset) fails at once with the check's message.

Connections: `odf_default` (an `odf_repo` connection, the repository DAG 1 writes) and, with the
default engine, `spark_default`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import dag

from airflow_odf.operators.base import asset_alias
from airflow_odf.operators.manifest import OdfApplyManifestOperator
from airflow_odf.operators.transform import OdfTransformOperator
from airflow_odf.sensors.batching import OdfBatchingSensor

MANIFESTS = Path(__file__).resolve().parent / "manifests"


# [START howto_sensor_odf_batching]
@dag(
    schedule=asset_alias("com.example.trades"),  # woken by the ingests of the input
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,  # one batch at a time, in order
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    tags=["odf", "example"],
)
def odf_batching() -> None:
    apply = OdfApplyManifestOperator(
        task_id="apply_manifest", manifests=[str(MANIFESTS / "com.example.trades.settlement.yaml")]
    )
    batch = OdfBatchingSensor(
        task_id="await_batch",
        dataset="com.example.trades.settlement",
        min_records_to_await=1000,
        max_batching_interval=timedelta(hours=1),
        deferrable=True,
        poke_interval=timedelta(minutes=1),
        timeout=timedelta(days=1),
        soft_fail=True,
    )
    transform = OdfTransformOperator(
        task_id="transform_settlement",
        dataset="com.example.trades.settlement",
        input_heads=batch.output["input_heads"],  # the heads the rule counted
    )
    apply >> batch >> transform


# [END howto_sensor_odf_batching]

batching = odf_batching()

"""Example DAG 1: a root ingest and a derivative transform, block hashes flowing through XCom.

`apply_manifests` creates (or evolves) the datasets, `ingest_trades` ingests the trade files of
`dags_examples/data` (FilesGlob, one file per block), `transform_daily` runs the daily aggregation
pinned to the head `ingest_trades` returned — so it processes exactly what its upstream committed — and
`verify_daily` replays the transform to prove it reproducible. Each ODF task emits an event on its
dataset's `odf://<dataset id>` asset with `{head, prev_head}`.

Production settings: runs may overlap (a manual trigger during another run): the writers reconcile —
a task that loses the race for the head plans again from the winner's and commits only what is still
missing — so up to `max_active_runs=3` run at once, and a burst of triggers queues instead of taking
every worker slot. `retries=2`, a few minutes apart, for what may pass (a Spark job that crashed, a
repository or engine that did not answer); a bad manifest, query or schema fails at once, no retry.
It is started by hand (`schedule=None`): enabled together with every other example DAG, it runs
only when triggered, and `odf_asset_scheduled` follows what it ingests.

Connections: `odf_default` (an `odf_repo` connection, e.g. host `file:///data/odf`) and, with the
default engine, `spark_default` (host = Spark master URL, e.g. `local[*]`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import dag

from airflow_odf.operators.ingest import OdfIngestOperator
from airflow_odf.operators.manifest import OdfApplyManifestOperator
from airflow_odf.operators.transform import OdfTransformOperator
from airflow_odf.operators.verify import OdfVerifyOperator

EXAMPLES = Path(__file__).resolve().parent


def trades_pipeline_tasks() -> None:
    """The pipeline's tasks, made inside a DAG (example DAG `odf_warm_engine` runs the same ones)."""
    # [START howto_operator_odf_pipeline]
    apply = OdfApplyManifestOperator(
        task_id="apply_manifests",
        manifests=[
            str(EXAMPLES / "manifests" / "com.example.trades.yaml"),
            str(EXAMPLES / "manifests" / "com.example.trades.daily.yaml"),
        ],
        create_repository=True,
    )
    ingest = OdfIngestOperator(
        task_id="ingest_trades",
        dataset="com.example.trades",
        source_dir=str(EXAMPLES),
        # write-audit-publish: each new slice is checked before it becomes the head (docs/checks.md)
        checks={
            "columns": {
                "trade_id": {"null_check": {"equal_to": 0}, "unique_check": {"equal_to": 0}},
                "price": {"min": {"greater_than": 0}},
            },
            "tables": {"positive_quantity": {"check_statement": "quantity > 0"}},
        },
    )
    daily = OdfTransformOperator(task_id="transform_daily", dataset="com.example.trades.daily")
    verify = OdfVerifyOperator(task_id="verify_daily", dataset="com.example.trades.daily")
    apply >> ingest >> daily >> verify
    # [END howto_operator_odf_pipeline]


@dag(
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=3,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    tags=["odf", "example"],
)
def odf_trades_pipeline() -> None:
    trades_pipeline_tasks()


if __name__ != "odf_trades_pipeline":  # not when `odf_warm_engine` imports this file for its tasks:
    pipeline = odf_trades_pipeline()  # the DAG would be defined by that file too (a duplicate DAG id)

"""Example DAG 1: a root ingest and a derivative transform, block hashes flowing through XCom.

`apply_manifests` creates (or evolves) the datasets, `ingest_trades` ingests the trade files of
`dags_examples/data` (FilesGlob, one file per block), `transform_daily` runs the daily aggregation
pinned to the head `ingest_trades` returned — so it processes exactly what its upstream committed — and
`verify_daily` replays the transform to prove it reproducible. Each ODF task emits an event on its
dataset's `odf://<dataset id>` asset with `{head, prev_head}`.

Connections: `odf_default` (an `odf_repo` connection, e.g. host `file:///data/odf`) and, with the
default engine, `spark_default` (host = Spark master URL, e.g. `local[*]`).
"""

from __future__ import annotations

from datetime import datetime
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
        task_id="ingest_trades", dataset="com.example.trades", source_dir=str(EXAMPLES)
    )
    daily = OdfTransformOperator(task_id="transform_daily", dataset="com.example.trades.daily")
    verify = OdfVerifyOperator(task_id="verify_daily", dataset="com.example.trades.daily")
    apply >> ingest >> daily >> verify
    # [END howto_operator_odf_pipeline]


@dag(schedule=None, start_date=datetime(2024, 1, 1), catchup=False, tags=["odf", "example"])
def odf_trades_pipeline() -> None:
    trades_pipeline_tasks()


pipeline = odf_trades_pipeline()

"""Example DAG 6: publish a pipeline's datasets to S3, pull them into a second repository, verify there.

`ingest_trades` and `transform_daily` build the datasets of example 1 in the repository of
`odf_default`; `push_*` copy both to the S3 repository of `odf_s3` (objects, then blocks verbatim,
then the head by compare-and-swap); `pull_*` copy them from there into the repository of
`odf_replica`, hashing every block and object on arrival and requiring each head to be signed by its
dataset's key (`signatures="require"`: the datasets were created by `odf_default`'s repository, which
signs their heads); `verify_replica` re-checks the replica's integrity, names who signed its head and
replays its transform on the pulled input — a consumer proving the data it received.

The pulls commit into the replica, but they declare no outlet (`outlets=[]`): the asset of a dataset
is its id, the same in every repository, and the replica's copy of blocks already reported by the
tasks that wrote them is no news — DAGs scheduled on the datasets (`odf_asset_scheduled`) must not run
again for it. `max_active_runs=1`: one publication at a time; `retries=2` for the network and the
stores (a tampered or diverged copy fails at once, no retry). Its ingest and transform write the
datasets of example DAG 1, whose writers reconcile with them.

Connections (all `odf_repo`): `odf_default` (e.g. host `file:///data/odf`), `odf_s3` (host
`s3://bucket/odf`, extras `{"aws_conn_id": "aws_default"}` or `endpoint_url` and keys for an
S3-compatible store), `odf_replica` (e.g. host `file:///data/replica`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import dag

from airflow_odf.operators.ingest import OdfIngestOperator
from airflow_odf.operators.manifest import OdfApplyManifestOperator
from airflow_odf.operators.sharing import OdfPullOperator, OdfPushOperator
from airflow_odf.operators.transform import OdfTransformOperator
from airflow_odf.operators.verify import OdfVerifyOperator

EXAMPLES = Path(__file__).resolve().parent
TRADES = "com.example.trades"
DAILY = "com.example.trades.daily"


@dag(
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    tags=["odf", "example"],
)
def odf_sharing() -> None:
    apply = OdfApplyManifestOperator(
        task_id="apply_manifests",
        manifests=[
            str(EXAMPLES / "manifests" / f"{TRADES}.yaml"),
            str(EXAMPLES / "manifests" / f"{DAILY}.yaml"),
        ],
        create_repository=True,
    )
    ingest = OdfIngestOperator(task_id="ingest_trades", dataset=TRADES, source_dir=str(EXAMPLES))
    daily = OdfTransformOperator(task_id="transform_daily", dataset=DAILY)
    # [START howto_operator_odf_push_pull]
    push_trades = OdfPushOperator(task_id="push_trades", dataset=TRADES, remote_conn_id="odf_s3")
    push_daily = OdfPushOperator(task_id="push_daily", dataset=DAILY, remote_conn_id="odf_s3")
    pull_trades = OdfPullOperator(
        task_id="pull_trades",
        dataset=TRADES,
        remote_conn_id="odf_s3",
        odf_conn_id="odf_replica",
        create_repository=True,
        signatures="require",  # a head without its owner's signature is refused
        outlets=[],  # the replica's copy is no news: no asset event
    )
    pull_daily = OdfPullOperator(
        task_id="pull_daily",
        dataset=DAILY,
        remote_conn_id="odf_s3",
        odf_conn_id="odf_replica",
        signatures="require",
        outlets=[],
    )
    verify = OdfVerifyOperator(task_id="verify_replica", dataset=DAILY, odf_conn_id="odf_replica")
    # [END howto_operator_odf_push_pull]
    apply >> ingest >> daily >> [push_trades, push_daily]
    push_trades >> pull_trades >> pull_daily
    push_daily >> pull_daily >> verify


sharing = odf_sharing()

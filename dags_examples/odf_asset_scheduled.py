"""Example DAG 5: data-aware scheduling — a transform DAG that runs whenever its input dataset moves.

Three ways to follow `com.example.trades`, each keeping `com.example.trades.large` up to date (use one):

- `odf_asset_scheduled` — scheduled on the dataset's asset through its alias; for datasets written by
  ODF tasks of this Airflow. The main example, below.
- `odf_trades_follower` — a daily run whose deferrable `OdfHeadChangedSensor` waits in the triggerer
  until the head moved past the one the previous run saw; for datasets written anywhere.
- `odf_asset_watcher` — scheduled on the asset with an `AssetWatcher` (`OdfHeadEventTrigger`): the
  triggerer polls the head and every move starts a run; for datasets written outside this Airflow
  (`odf pull`, another deployment). It needs the dataset id when the file is parsed: it is defined
  only when `ODF_EXAMPLE_TRADES_DID` is set (`odf list` shows it; a DID never changes).

`odf_asset_scheduled` is scheduled on the asset of `com.example.trades`, which example DAG 1
(`odf_trades_pipeline`) ingests: every ingest that commits emits an asset event carrying
`{head, prev_head}`, the scheduler starts this DAG, and `transform_large_trades` pins its input to the
head of that event — it processes exactly the blocks that update committed, even if the dataset
moved on before this run started.

Why an `AssetAlias`: the asset of a dataset is `odf://<dataset id>`, and the dataset id (DID) exists
only once the dataset was created — it cannot be known when the DAG file is parsed (which must not read
the repository). Every ODF operator reports its dataset through the alias `odf:<dataset name>`
(`airflow_odf.operators.base.asset_alias`), and a DAG scheduled on that alias is started by those
events: Airflow resolves the alias to the `odf://` asset when the first event arrives, and hands the
events to the run as `triggering_asset_events`.

Connections: `odf_default` (an `odf_repo` connection, the repository DAG 1 writes) and, with the
default engine, `spark_default`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Asset, AssetWatcher, dag

from airflow_odf.assets import dataset_uri
from airflow_odf.operators.base import asset_alias
from airflow_odf.operators.manifest import OdfApplyManifestOperator
from airflow_odf.operators.transform import OdfTransformOperator
from airflow_odf.sensors.head import OdfHeadChangedSensor
from airflow_odf.triggers.head import OdfHeadEventTrigger

EXAMPLES = Path(__file__).resolve().parent
LARGE_TRADES = str(EXAMPLES / "manifests" / "com.example.trades.large.yaml")


# [START howto_asset_event_heads]
def odf_event_heads(triggering_asset_events: Mapping[Any, Iterable[Any]]) -> dict[str, str]:
    """Dataset name -> head of the newest ODF asset event that triggered this run.

    Reads both forms of event: `{head, prev_head}` from ODF operators and `{payload: {head, ...}}`
    from an `OdfHeadEventTrigger` watcher. A run started by hand has no events: `{}` pins nothing,
    and the transform takes its inputs' current heads.
    """
    newest: dict[str, Any] = {}  # name -> event; a name re-created with a new id has several assets
    for key in triggering_asset_events:
        if not isinstance(key, Asset) or not key.uri.startswith("odf://"):
            continue
        for event in triggering_asset_events[key]:
            if key.name not in newest or event.timestamp > newest[key.name].timestamp:
                newest[key.name] = event
    heads: dict[str, str] = {}
    for name, event in newest.items():
        extra = event.extra or {}
        head = extra.get("head") or (extra.get("payload") or {}).get("head")
        if head:
            heads[name] = head
    return heads


# [END howto_asset_event_heads]


# [START howto_asset_schedule_odf]
@dag(
    schedule=asset_alias("com.example.trades"),  # AssetAlias("odf:com.example.trades")
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["odf", "example"],
    user_defined_macros={"odf_event_heads": odf_event_heads},
    render_template_as_native_obj=True,  # input_heads renders to a mapping
)
def odf_asset_scheduled() -> None:
    apply = OdfApplyManifestOperator(task_id="apply_manifest", manifests=[LARGE_TRADES])
    transform = OdfTransformOperator(
        task_id="transform_large_trades",
        dataset="com.example.trades.large",
        input_heads="{{ odf_event_heads(triggering_asset_events) }}",
    )
    apply >> transform


# [END howto_asset_schedule_odf]

scheduled = odf_asset_scheduled()


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False, tags=["odf", "example"])
def odf_trades_follower() -> None:
    # [START howto_sensor_odf_head_changed]
    wait = OdfHeadChangedSensor(
        task_id="wait_for_trades",
        dataset="com.example.trades",
        # the head the previous run saw ("None" on the first run: any head will do)
        known_head=(
            "{{ (ti.xcom_pull(task_ids='wait_for_trades', include_prior_dates=True) or {}).get('head') }}"
        ),
        deferrable=True,
        poke_interval=timedelta(minutes=1),
        timeout=timedelta(hours=23),
        soft_fail=True,
    )
    apply = OdfApplyManifestOperator(task_id="apply_manifest", manifests=[LARGE_TRADES])
    transform = OdfTransformOperator(
        task_id="transform_large_trades",
        dataset="com.example.trades.large",
        input_heads={"com.example.trades": "{{ ti.xcom_pull(task_ids='wait_for_trades')['head'] }}"},
    )
    wait >> apply >> transform
    # [END howto_sensor_odf_head_changed]


follower = odf_trades_follower()

TRADES_DID = os.environ.get("ODF_EXAMPLE_TRADES_DID", "")

if TRADES_DID:
    # [START howto_trigger_odf_head_event]
    trades_asset = Asset(
        name="com.example.trades",
        uri=dataset_uri(TRADES_DID),  # odf://<dataset id>
        watchers=[
            AssetWatcher(
                name="com_example_trades_head",
                trigger=OdfHeadEventTrigger(dataset=TRADES_DID, poll_interval=60),
            )
        ],
    )

    @dag(
        schedule=trades_asset,
        start_date=datetime(2024, 1, 1),
        catchup=False,
        tags=["odf", "example"],
        user_defined_macros={"odf_event_heads": odf_event_heads},
        render_template_as_native_obj=True,
    )
    def odf_asset_watcher() -> None:
        apply = OdfApplyManifestOperator(task_id="apply_manifest", manifests=[LARGE_TRADES])
        transform = OdfTransformOperator(
            task_id="transform_large_trades",
            dataset="com.example.trades.large",
            input_heads="{{ odf_event_heads(triggering_asset_events) }}",
        )
        apply >> transform

    # [END howto_trigger_odf_head_event]

    watcher = odf_asset_watcher()

"""Example DAG 5: data-aware scheduling — DAGs that run whenever their input dataset moves.

Three ways to follow a dataset, each the only follower of its output, so that all of them (and every
other example DAG) can be enabled in one deployment without two DAGs writing the same dataset:

- `odf_asset_scheduled` — scheduled on the asset of `com.example.trades` through its alias; for
  datasets written by ODF tasks of this Airflow. Keeps `com.example.trades.large` up to date. The
  main example, below.
- `odf_trades_follower` — a daily run whose deferrable `OdfHeadChangedSensor` waits in the triggerer
  until the head of `com.example.trades` moved past the one the previous run saw; for datasets written
  anywhere. Keeps `com.example.trades.notional` up to date. A head without records (the dataset only
  just created from its manifest, nothing ingested yet) is nothing to transform: `has_records` skips
  the rest of that run, and the next run waits from that head for the data.
- `odf_asset_watcher` — scheduled on the asset of `com.example.sensors` with an `AssetWatcher`
  (`OdfHeadEventTrigger`): the triggerer polls the head and every move starts a run; for datasets
  written outside this Airflow (`odf ingest` from a gateway, `odf pull`, another deployment) — and
  only for those: a dataset an ODF task of this Airflow writes already gets an asset event per commit,
  and the watcher's would start a second run for the same commit. Keeps
  `com.example.sensors.fahrenheit` up to date. It needs the dataset id when the file is parsed: it is
  defined only when `ODF_EXAMPLE_SENSORS_DID` is set (`odf list` shows it; a DID never changes).

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

Production settings, the same for the three: `max_active_runs=1`, so the runs of a follower process
its input's moves in order, each pinned to its own head (the follower's sensor even starts from the
head the previous run saw); `retries=2`, a few minutes apart, for what may pass (a Spark job that
crashed, a repository or engine that did not answer) — a bad manifest or query fails at once, without
retry.

Connections: `odf_default` (an `odf_repo` connection, the repository DAG 1 writes) and, with the
default engine, `spark_default`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Asset, AssetWatcher, dag, task

from airflow_odf.assets import dataset_uri
from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.operators.base import asset_alias
from airflow_odf.operators.manifest import OdfApplyManifestOperator
from airflow_odf.operators.transform import OdfTransformOperator
from airflow_odf.sensors.head import OdfHeadChangedSensor
from airflow_odf.triggers.head import OdfHeadEventTrigger

EXAMPLES = Path(__file__).resolve().parent
MANIFESTS = EXAMPLES / "manifests"
# a follower processes its input's moves one run at a time, in order; what may pass is tried again
FOLLOWER_SETTINGS: dict[str, Any] = {
    "start_date": datetime(2024, 1, 1),
    "catchup": False,
    "max_active_runs": 1,
    "default_args": {"retries": 2, "retry_delay": timedelta(minutes=2)},
    "tags": ["odf", "example"],
}


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
    user_defined_macros={"odf_event_heads": odf_event_heads},
    render_template_as_native_obj=True,  # input_heads renders to a mapping
    **FOLLOWER_SETTINGS,
)
def odf_asset_scheduled() -> None:
    apply = OdfApplyManifestOperator(
        task_id="apply_manifest", manifests=[str(MANIFESTS / "com.example.trades.large.yaml")]
    )
    transform = OdfTransformOperator(
        task_id="transform_large_trades",
        dataset="com.example.trades.large",
        input_heads="{{ odf_event_heads(triggering_asset_events) }}",
    )
    apply >> transform


# [END howto_asset_schedule_odf]

scheduled = odf_asset_scheduled()


@task.short_circuit
def has_records(moved: dict[str, Any]) -> bool:
    """Whether the head an `OdfHeadChangedSensor` found (its XCom) holds any record: False skips the
    rest of the run when the dataset has only metadata yet (created, nothing ingested)."""
    dataset = OdfRepoHook().open_repository().dataset(moved["dataset"])
    state = dataset.state_at(Multihash.parse(moved["head"]))
    logging.getLogger(__name__).info(
        "%s: %d record(s) at %s", moved["dataset"], state.num_records, moved["head"]
    )
    return state.num_records > 0


@dag(schedule="@daily", **FOLLOWER_SETTINGS)
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
    apply = OdfApplyManifestOperator(
        task_id="apply_manifest", manifests=[str(MANIFESTS / "com.example.trades.notional.yaml")]
    )
    transform = OdfTransformOperator(
        task_id="transform_notional",
        dataset="com.example.trades.notional",
        input_heads={"com.example.trades": "{{ ti.xcom_pull(task_ids='wait_for_trades')['head'] }}"},
    )
    # nothing to transform while the head holds no record yet: the rest of the run is skipped
    has_records(wait.output) >> apply >> transform
    # [END howto_sensor_odf_head_changed]


follower = odf_trades_follower()

SENSORS_DID = os.environ.get("ODF_EXAMPLE_SENSORS_DID", "")

if SENSORS_DID:
    # [START howto_trigger_odf_head_event]
    sensors_asset = Asset(
        name="com.example.sensors",
        uri=dataset_uri(SENSORS_DID),  # odf://<dataset id>
        watchers=[
            AssetWatcher(
                name="com_example_sensors_head",
                trigger=OdfHeadEventTrigger(dataset=SENSORS_DID, poll_interval=60),
            )
        ],
    )

    @dag(
        schedule=sensors_asset,
        user_defined_macros={"odf_event_heads": odf_event_heads},
        render_template_as_native_obj=True,
        **FOLLOWER_SETTINGS,
    )
    def odf_asset_watcher() -> None:
        apply = OdfApplyManifestOperator(
            task_id="apply_manifest", manifests=[str(MANIFESTS / "com.example.sensors.fahrenheit.yaml")]
        )
        transform = OdfTransformOperator(
            task_id="transform_fahrenheit",
            dataset="com.example.sensors.fahrenheit",
            input_heads="{{ odf_event_heads(triggering_asset_events) }}",
        )
        apply >> transform

    # [END howto_trigger_odf_head_event]

    watcher = odf_asset_watcher()

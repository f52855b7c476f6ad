"""ODF assets as Airflow records them: URIs exactly `odf://<dataset id>` (Airflow turned the empty path
into `/` before our handler, which kept it), and a task writing a dataset known when the DAG file is
parsed (a `did:odf:` reference) declared as the producer of its asset — checked with Airflow's own
serialization and the code that fills `task_outlet_asset_reference` (the Assets page's "producing
tasks"), then what a run of the task sends back to Airflow when it succeeds: one event per commit,
through the alias, none when up to date."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, Asset, AssetAlias

from airflow_odf.assets import dataset_uri, declared_assets
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.operators.base import asset_alias
from airflow_odf.operators.transform import OdfTransformOperator
from airflow_odf.operators.verify import OdfVerifyOperator


def _did() -> tuple[str, str]:
    """A fresh `did:odf:…` and its exact asset URI."""
    did = str(DatasetId.generate()[0])
    return did, "odf://" + did.removeprefix("did:odf:")


def _collected(dag: DAG) -> Any:
    """What the DAG processor collects from the serialized DAG for the asset tables."""
    from airflow.dag_processing.collection import AssetModelOperation
    from airflow.serialization.serialized_objects import LazyDeserializedDAG

    return AssetModelOperation.collect({dag.dag_id: LazyDeserializedDAG.from_dag(dag)})


def test_the_serialized_uri_has_no_trailing_slash() -> None:
    did, uri = _did()
    assert dataset_uri(did) == uri
    assert Asset(name="com.example.trades", uri=uri.upper().replace("ODF://", "odf://")).uri == uri
    assert Asset(name="com.example.trades", uri=uri + "/").uri == uri
    with DAG(
        "odf_test_scheduled_on_asset",
        schedule=Asset(name="com.example.trades", uri=uri),
        start_date=datetime(2024, 1, 1),
    ) as dag:
        OdfTransformOperator(task_id="t", dataset="com.example.trades.large")
    collected = _collected(dag)
    assert [a.uri for a in collected.schedule_asset_references[dag.dag_id]] == [uri]
    assert set(collected.assets) == {("com.example.trades", uri)}


def test_a_task_writing_a_dataset_known_at_parse_time_is_its_producer() -> None:
    did, uri = _did()
    with DAG("odf_test_producers", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        by_id = OdfTransformOperator(task_id="by_id", dataset=did)
        OdfTransformOperator(task_id="by_name", dataset="com.example.daily")  # its id exists at run time only
        OdfVerifyOperator(task_id="verify", dataset=did)  # reads only: no outlet at all
    assert by_id.outlets == [AssetAlias(name=f"odf:{did}"), Asset(name=did, uri=uri)]
    collected = _collected(dag)
    assert [(task, a.name, a.uri) for task, a in collected.outlet_references[dag.dag_id]] == [
        ("by_id", did, uri)
    ]
    assert set(collected.asset_aliases) == {f"odf:{did}", "odf:com.example.daily"}


def test_declared_assets_only_for_dataset_ids() -> None:
    did, uri = _did()
    assert declared_assets(did) == [Asset(name=did, uri=uri)]
    assert declared_assets("com.example.trades") == []
    assert declared_assets("{{ params.dataset }}") == []
    assert declared_assets("did:odf:not-an-id") == []  # the task fails when it runs, naming it


def _result(did: str, *, committed: bool) -> dict[str, Any]:
    head = "f1620" + "a" * 64
    return {
        "dataset": did,
        "dataset_id": did,
        "prev_head": "f1620" + "b" * 64 if committed else head,
        "new_head": head,
        "new_blocks": [head] if committed else [],
        "records": 1 if committed else 0,
        "up_to_date": not committed,
    }


def _sent_on_success(operator: OdfTransformOperator, result: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """(task outlets, outlet events) of the message a task sends Airflow when it succeeded, made by the
    task runner's own functions after `pre_execute` and `execute` (here: `report`) ran."""
    from airflow.sdk.execution_time.context import OutletEventAccessors
    from airflow.sdk.execution_time.task_runner import _build_asset_profiles, _serialize_outlet_events

    events = OutletEventAccessors()
    operator.pre_execute({})
    operator.report({"outlet_events": events}, result)  # type: ignore[typeddict-item]
    return list(_build_asset_profiles(operator.outlets)), list(_serialize_outlet_events(events))


def test_a_declared_producer_emits_one_event_per_commit_and_none_when_up_to_date() -> None:
    """Airflow emits an event on every declared `Asset` outlet of a successful task (with no extra);
    the declared asset leaves the outlets for the run, so the alias's event, carrying the heads, is
    the only one — and an up-to-date run emits none."""
    did, uri = _did()
    committed = _result(did, committed=True)
    outlets, events = _sent_on_success(OdfTransformOperator(task_id="t", dataset=did), committed)
    assert [(o.type, o.name) for o in outlets] == [("AssetAlias", f"odf:{did}")]
    [event] = events
    assert event["source_alias_name"] == asset_alias(did).name
    assert event["dest_asset_key"] == {"name": did, "uri": uri}  # the declared asset, exactly
    assert event["extra"] == {"head": committed["new_head"], "prev_head": committed["prev_head"]}

    outlets, events = _sent_on_success(
        OdfTransformOperator(task_id="t", dataset=did), _result(did, committed=False)
    )
    assert [o.type for o in outlets] == ["AssetAlias"] and events == []


def test_outlets_given_by_the_dag_author_are_left_as_given() -> None:
    did, uri = _did()
    mine = Asset(name=did, uri=uri)
    operator = OdfTransformOperator(task_id="t", dataset=did, outlets=[mine])
    operator.pre_execute({})
    assert operator.outlets == [mine] and operator.declared_assets == []

"""Asset events only for commits, and the "ODF dataset" extra link: `report()` against Airflow's own
outlet-event accessors, the URL template, then example DAG 1 run twice for real — the first run commits
(one asset event per written dataset, its link in XCom, the transform's input offsets in its XCom), the
second finds everything up to date (no asset event, so nothing scheduled on the datasets runs for it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_odf.links import OdfDatasetLink, dataset_url
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.operators.base import asset_alias
from airflow_odf.operators.transform import OdfTransformOperator
from tests.airflow.dag_runs import load_dag, task_states, xcom

TEMPLATE = "http://127.0.0.1:8080/{dataset_name}/blocks/{head}?id={dataset_id}"
LINK_KEY = f"_link_{OdfDatasetLink.__name__}"


def _result(dataset_id: str, *, committed: bool) -> dict[str, Any]:
    head = "f1620" + "a" * 64
    return {
        "dataset": "com.example.daily",
        "dataset_id": dataset_id,
        "prev_head": "f1620" + "b" * 64 if committed else head,
        "new_head": head,
        "new_blocks": [head] if committed else [],
        "records": 1 if committed else 0,
        "up_to_date": not committed,
    }


def test_report_adds_an_asset_event_only_for_committed_blocks() -> None:
    from airflow.sdk.execution_time.context import OutletEventAccessors

    operator = OdfTransformOperator(task_id="transform", dataset="com.example.daily")
    did = str(DatasetId.generate()[0])
    events = OutletEventAccessors()
    alias = asset_alias("com.example.daily")

    operator.report({"outlet_events": events}, _result(did, committed=False))  # type: ignore[typeddict-item]
    assert events[alias].asset_alias_events == []

    committed = _result(did, committed=True)
    operator.report({"outlet_events": events}, committed)  # type: ignore[typeddict-item]
    [event] = events[alias].asset_alias_events
    assert event.source_alias_name == "odf:com.example.daily"
    assert event.dest_asset_key.uri == f"odf://{did.removeprefix('did:odf:')}"
    assert event.extra == {"head": committed["new_head"], "prev_head": committed["prev_head"]}


def test_dataset_url_from_a_task_result() -> None:
    did = str(DatasetId.generate()[0])
    result = _result(did, committed=True)
    head = result["new_head"]
    assert dataset_url(TEMPLATE, result) == f"http://127.0.0.1:8080/com.example.daily/blocks/{head}?id={did}"
    assert dataset_url("", result) == ""  # not configured: no link
    assert dataset_url(TEMPLATE, None) == ""  # the task failed before returning
    assert dataset_url(TEMPLATE, [result]) == ""  # several datasets (applying manifests)
    assert dataset_url(TEMPLATE, {"dataset": "x", "new_head": head}) == ""  # no id to fill in
    assert dataset_url("http://ui/{dataset_name}", {"dataset": "a b"}) == "http://ui/a%20b"
    verified = {"dataset": "x", "dataset_id": did, "head": head}  # OdfVerifyOperator's result
    assert dataset_url("{head}", verified) == head
    with pytest.raises(ValueError, match="unknown field"):
        dataset_url("http://ui/{name}", result)


def _run_events(run: Any) -> dict[str, list[dict[str, Any]]]:
    """Task id -> the asset events (URI, extra) a DAG run emitted, from the metadata DB."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent, AssetModel)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetEvent.source_dag_id == run.dag_id, AssetEvent.source_run_id == run.run_id)
            .order_by(AssetEvent.id)
            .all()
        )
        found: dict[str, list[dict[str, Any]]] = {}
        for event, asset in rows:
            found.setdefault(event.source_task_id, []).append({"uri": asset.uri, "extra": event.extra})
        return found


@pytest.mark.usefixtures("airflow_db", "spark")
def test_a_committing_run_emits_one_event_per_dataset_an_up_to_date_run_none(
    odf_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__ODF__DATASET_URL_TEMPLATE", TEMPLATE)
    dag = load_dag("odf_trades_pipeline.py", "odf_trades_pipeline")
    first = dag.test()
    assert set(task_states(first).values()) == {"success"}
    repo = Repository.open(odf_repo)
    uris, links = {}, {}
    written = {"ingest_trades": "com.example.trades", "transform_daily": "com.example.trades.daily"}
    for task_id, name in written.items():
        did = str(repo.resolve(name))
        uris[task_id] = f"odf://{did.removeprefix('did:odf:')}"
        head = str(repo.dataset(name).head())
        links[task_id] = f"http://127.0.0.1:8080/{name}/blocks/{head}?id={did}"
    events = _run_events(first)
    assert set(events) == {"ingest_trades", "transform_daily"}
    for task_id in events:
        result = xcom(first, task_id)
        assert result["new_blocks"]
        assert events[task_id] == [
            {"uri": uris[task_id], "extra": {"head": result["new_head"], "prev_head": result["prev_head"]}}
        ]
        # the link, computed by the worker from the task's XCom when the task ended
        assert xcom(first, task_id, key=LINK_KEY) == links[task_id]
    assert xcom(first, "verify_daily", key=LINK_KEY) == links["transform_daily"]  # reads `head`
    # the transform's XCom: the offsets of each input its ExecuteTransform(s) read
    last = repo.dataset("com.example.trades").state().last_offset
    trades = str(repo.resolve("com.example.trades"))
    assert xcom(first, "transform_daily")["input_offsets"] == {trades: [{"start": 0, "end": last}]}
    assert xcom(first, "apply_manifests", key=LINK_KEY) == ""  # one task, several datasets

    second = dag.test()
    assert set(task_states(second).values()) == {"success"}
    for task_id in ("ingest_trades", "transform_daily"):
        result = xcom(second, task_id)
        assert result["up_to_date"] and result["new_blocks"] == []
        assert result.get("input_offsets", {}) == {}  # a transform that read nothing; an ingest has none
        assert xcom(second, task_id, key=LINK_KEY) == links[task_id]  # the head did not move
    assert _run_events(second) == {}

"""Running an example DAG with `dag.test()` and reading back what its tasks left in the metadata DB."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from tests.paths import REPO

EXAMPLES = REPO / "dags_examples"


def load_dag(file_name: str, dag_id: str) -> Any:
    """The DAG object of an example DAG file (imported as Airflow's DAG processor would)."""
    path = EXAMPLES / file_name
    if str(EXAMPLES) not in sys.path:  # Airflow puts the DAG folder on sys.path: examples import each other
        sys.path.append(str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from airflow.sdk import DAG

    [found] = [v for v in vars(module).values() if isinstance(v, DAG) and v.dag_id == dag_id]
    return found


def task_states(run: Any) -> dict[str, str]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}


def xcom(run: Any, task_id: str, key: str = "return_value") -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    query = XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id, key=key)
    with create_session() as session:
        row = session.execute(query).scalars().first()
    return None if row is None else XComModel.deserialize_value(row)


def asset_events(uri_prefix: str) -> list[dict[str, Any]]:
    """`{uri, extra, source_task_id}` of the asset events whose asset URI starts with `uri_prefix`."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent, AssetModel)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri.startswith(uri_prefix))
            .order_by(AssetEvent.id)
            .all()
        )
        return [{"uri": a.uri, "extra": e.extra, "source_task_id": e.source_task_id} for e, a in rows]


def check_trades_pipeline(run: Any, root: Path) -> None:
    """What example DAG 1 must leave, whatever the engine: every task succeeded, the transform pinned to
    the ingest's head, verification passed, and both datasets' asset events carry their heads."""
    from airflow_odf.odf.format import model
    from airflow_odf.odf.repo.repository import Repository

    assert task_states(run) == {
        "apply_manifests": "success",
        "ingest_trades": "success",
        "transform_daily": "success",
        "verify_daily": "success",
    }
    repo = Repository.open(root)
    trades, daily = repo.dataset("com.example.trades"), repo.dataset("com.example.trades.daily")
    ingested = xcom(run, "ingest_trades")
    assert ingested["dataset_id"] == str(trades.state().dataset_id)
    assert ingested["new_head"] == str(trades.head()) and ingested["records"] > 0
    # every slice passed the ingest's quality checks before it was committed (docs/checks.md)
    assert [(c["name"], c["success"]) for c in ingested["checks"]] == [
        ("trade_id.null_check", True),
        ("trade_id.unique_check", True),
        ("price.min", True),
        ("positive_quantity", True),
    ]
    transformed = xcom(run, "transform_daily")
    assert transformed["new_head"] == str(daily.head()) and transformed["records"] > 0
    execute = daily.block(daily.head()).event
    assert isinstance(execute, model.ExecuteTransform)
    assert str(execute.query_inputs[0].new_block_hash) == ingested["new_head"]
    report = xcom(run, "verify_daily")
    assert report["ok"] and report["reproducibility"] == "checked"
    applied = {r["dataset"]: r for r in xcom(run, "apply_manifests")}
    assert applied["com.example.trades"]["created"] and applied["com.example.trades.daily"]["created"]
    heads = {ingested["new_head"], transformed["new_head"]}
    events = {e["source_task_id"]: e for e in asset_events("odf://") if e["extra"].get("head") in heads}
    did = str(daily.state().dataset_id).removeprefix("did:odf:")
    assert events["transform_daily"]["uri"] == f"odf://{did}"
    assert events["transform_daily"]["extra"] == {
        "head": transformed["new_head"],
        "prev_head": transformed["prev_head"],
    }
    assert events["ingest_trades"]["extra"]["head"] == ingested["new_head"]

"""Running an example DAG with `dag.test()` and reading back what its tasks left in the metadata DB."""

from __future__ import annotations

import importlib.util
from typing import Any

from tests.paths import REPO

EXAMPLES = REPO / "dags_examples"


def load_dag(file_name: str, dag_id: str) -> Any:
    """The DAG object of an example DAG file (imported as Airflow's DAG processor would)."""
    path = EXAMPLES / file_name
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

"""Every example DAG can be enabled in one deployment with all the others: no two DAGs that start by
themselves (a schedule, an asset) write the same dataset, no DAG follows through a watcher a dataset
that a task of the examples writes (each commit would start it twice), and every DAG has the
production settings its docstring explains (`max_active_runs`, `retries` on the tasks that write).
Parsed as the DAG processor parses the folder: no repository, no Spark."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from airflow.sdk import Asset

from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.operators.base import OdfBaseOperator
from airflow_odf.operators.manifest import OdfApplyManifestOperator
from airflow_odf.operators.verify import OdfVerifyOperator
from tests.airflow.dag_runs import EXAMPLES


@pytest.fixture
def example_dags(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every DAG of dags_examples, the watcher's included (it needs a dataset id to be defined)."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("ODF_EXAMPLE_SENSORS_DID", str(DatasetId.generate()[0]))
    monkeypatch.syspath_prepend(str(EXAMPLES))  # as Airflow does: the examples import each other
    bag = DagBag(dag_folder=str(EXAMPLES))
    assert bag.import_errors == {}
    return bag.dags


def _writes(task: Any) -> bool:
    """An ODF task that commits into its dataset (not one that only reads it or applies manifests)."""
    return isinstance(task, OdfBaseOperator) and not isinstance(
        task, OdfApplyManifestOperator | OdfVerifyOperator
    )


def _starts_by_itself(dag: Any) -> bool:
    return dag.schedule is not None


def test_one_dag_that_starts_by_itself_per_dataset(example_dags: dict[str, Any]) -> None:
    writers: dict[tuple[str, str], set[str]] = defaultdict(set)
    for dag in example_dags.values():
        if _starts_by_itself(dag):
            for task in dag.tasks:
                if _writes(task):
                    writers[task.odf_conn_id, task.dataset].add(dag.dag_id)
    assert {dataset: dags for dataset, dags in writers.items() if len(dags) > 1} == {}
    assert set(example_dags) >= {"odf_asset_scheduled", "odf_trades_follower", "odf_asset_watcher"}


def test_no_watcher_follows_a_dataset_the_examples_write(example_dags: dict[str, Any]) -> None:
    written = {task.dataset for dag in example_dags.values() for task in dag.tasks if _writes(task)}
    watched = {
        dag.schedule.name
        for dag in example_dags.values()
        if isinstance(dag.schedule, Asset) and dag.schedule.watchers
    }
    assert watched == {"com.example.sensors"}
    assert watched & written == set()


def test_every_example_dag_has_production_settings(example_dags: dict[str, Any]) -> None:
    for dag in example_dags.values():
        assert dag.max_active_runs <= 3, dag.dag_id  # explicitly bounded (Airflow's default is 16)
        for task in dag.tasks:
            if _writes(task):
                assert task.retries >= 2, (dag.dag_id, task.task_id)

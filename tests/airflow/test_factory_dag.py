"""Example DAG 4 end to end with `dag.test()` on SQLite and the local Spark: the DAG generated from
`dags_examples/factory_manifests/` creates both datasets, ingests the root and transforms the derivative
pinned to the head its ingest returned through XCom."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from tests.airflow.dag_runs import load_dag, task_states, xcom

ROOT, DAILY = "com.example.weather.readings", "com.example.weather.daily"


@pytest.mark.usefixtures("airflow_db", "spark")
def test_factory_dag(odf_repo: Path) -> None:
    dag = load_dag("odf_factory.py", "odf_factory_weather")
    run = dag.test()
    assert task_states(run) == {
        "apply_manifests": "success",
        f"ingest_{ROOT}": "success",
        f"transform_{DAILY}": "success",
    }
    repo = Repository.open(odf_repo)
    readings, daily = repo.dataset(ROOT), repo.dataset(DAILY)

    applied = {r["dataset"]: r for r in xcom(run, "apply_manifests")}
    assert applied[ROOT]["created"] and applied[DAILY]["created"]

    ingested = xcom(run, f"ingest_{ROOT}")
    assert ingested["dataset_id"] == str(readings.state().dataset_id)
    assert ingested["new_head"] == str(readings.head()) and ingested["records"] == 7
    # one AddData per file (files_per_batch=1), after the SetDataSchema
    added = [b.event for _, b in readings.iter_blocks() if isinstance(b.event, model.AddData)]
    assert len(added) == 2 and len(ingested["new_blocks"]) == 3

    transformed = xcom(run, f"transform_{DAILY}")
    assert transformed["new_head"] == str(daily.head())
    assert transformed["records"] == 4  # two stations on two days
    execute = daily.block(daily.head()).event
    assert isinstance(execute, model.ExecuteTransform)
    [query_input] = execute.query_inputs
    assert str(query_input.dataset_id) == ingested["dataset_id"]
    assert str(query_input.new_block_hash) == ingested["new_head"]  # pinned through XCom

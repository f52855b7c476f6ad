"""Example DAG 1 end to end with `dag.test()` on SQLite and the local Spark: manifests applied, root
ingested, derivative transformed pinned to the ingest's head through XCom, verified; asset events."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.airflow.dag_runs import check_trades_pipeline, load_dag


@pytest.mark.usefixtures("airflow_db", "spark")
def test_trades_pipeline(odf_repo: Path) -> None:
    dag = load_dag("odf_trades_pipeline.py", "odf_trades_pipeline")
    run = dag.test()
    check_trades_pipeline(run, odf_repo)

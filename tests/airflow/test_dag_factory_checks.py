"""`build_dag` with quality checks beside the manifests (`checks/<dataset name>.yaml`): each goes to its
dataset's ingest or transform task; a checks file of no task's dataset, or one that does not read, is a
parse-time error naming the file. No repository, no Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_odf.dag_factory import DagFactoryError, build_dag
from tests.airflow.test_dag_factory import _derivative, _polling_root, _push_root, _write

CHECKS = (
    "columns:\n  id:\n    null_check: {equal_to: 0}\ntables:\n  rows:\n    check_statement: COUNT(*) > 0\n"
)


def test_checks_beside_the_manifests_go_to_their_tasks(tmp_path: Path) -> None:
    folder = tmp_path / "manifests"
    _polling_root(folder, "a.root")
    _polling_root(folder, "b.root")
    _derivative(folder, "c.derived", ["a.root"])
    root_checks = _write(folder / "checks", "a.root.yaml", CHECKS)
    derived_checks = _write(folder / "checks", "c.derived.yml", CHECKS)
    dag = build_dag(folder, dag_id="with_checks", transform_kwargs={"quarantine": True})
    tasks = {t.task_id: t for t in dag.tasks}
    assert tasks["ingest_a.root"].checks == str(root_checks)
    assert tasks["ingest_b.root"].checks is None
    assert tasks["transform_c.derived"].checks == str(derived_checks)
    assert tasks["transform_c.derived"].quarantine and not tasks["ingest_a.root"].quarantine
    # checks given to every task win over the files
    dag = build_dag(folder, dag_id="given", ingest_kwargs={"checks": {"tables": {"x": "COUNT(*) > 1"}}})
    assert {t.task_id: t for t in dag.tasks}["ingest_a.root"].checks == {"tables": {"x": "COUNT(*) > 1"}}


def test_a_checks_file_that_fits_no_task_or_does_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "manifests"
    _polling_root(folder, "a.root")
    _push_root(folder, "p.pushed")
    stray = _write(folder / "checks", "nobody.yaml", CHECKS)
    with pytest.raises(DagFactoryError, match=f"{stray}: no manifest in .* defines a dataset named 'nobody'"):
        build_dag(folder, dag_id="stray")
    stray.unlink()
    pushed = _write(folder / "checks", "p.pushed.yaml", CHECKS)
    with pytest.raises(DagFactoryError, match=r"p\.pushed has no polling source, so no task of this DAG"):
        build_dag(folder, dag_id="pushed")
    pushed.unlink()
    bad = _write(folder / "checks", "a.root.yaml", "columns:\n  id:\n    nul_check: {equal_to: 0}\n")
    with pytest.raises(DagFactoryError, match=f"{bad}: .*unknown column check 'nul_check'"):
        build_dag(folder, dag_id="bad")

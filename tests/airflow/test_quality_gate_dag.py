"""Example DAG `odf_quality_gate` with `dag.test()` (SQLite, the local Spark): a push whose checks pass
commits and reports them in its XCom; a push whose checks fail fails its task once, without retry,
commits nothing (the head stays), emits no asset event, keeps the rejected slice, and the notifier's
alert names each failed check with its failing rows. Plus the operators' `checks=` at parse time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.checks.quarantine import list_rejected
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.operators.ingest import OdfPushIngestOperator
from tests.airflow.dag_runs import asset_events, load_dag, task_states, xcom

DATASET = "com.example.readings"


def _tries(run: Any, task_id: str) -> tuple[int, int]:
    from airflow.utils.session import create_session

    with create_session() as session:
        [ti] = [t for t in run.get_task_instances(session=session) if t.task_id == task_id]
        return ti.try_number, ti.max_tries


@pytest.mark.usefixtures("airflow_db", "spark")
def test_a_failing_check_stops_the_slice_before_the_head_moves(
    odf_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alert_file = tmp_path / "alert.txt"
    monkeypatch.setenv("ODF_EXAMPLE_ALERT_FILE", str(alert_file))
    run = load_dag("odf_quality_gate.py", "odf_quality_gate").test()

    assert task_states(run) == {
        "apply_manifests": "success",
        "push_readings": "success",
        "push_negative": "failed",
    }
    assert _tries(run, "push_negative") == (1, 2)  # retries were allowed, none was made

    good = xcom(run, "push_readings")
    assert good["records"] == 2
    assert [(c["name"], c["success"], c["observed"]) for c in good["checks"]] == [
        ("meter_id.null_check", True, 0),
        ("kwh.min", True, 7.25),
        ("kwh.max", True, 12.5),
        ("not_empty", True, 1),
    ]
    assert good["checks"][1] == {
        "name": "kwh.min",
        "kind": "column",
        "column": "kwh",
        "check": "min",
        "success": True,
        "observed": 7.25,
        "expected": "geq_to 0",
        "failing_rows": [],
    }
    assert xcom(run, "push_negative") is None

    repo = Repository.open(odf_repo)
    dataset = repo.dataset(DATASET)
    assert str(dataset.head()) == good["new_head"] and dataset.state().num_records == 2
    events = [e for e in asset_events("odf://") if e["extra"].get("prev_head") == good["new_head"]]
    assert events == []  # the failed push emitted no event

    alert = alert_file.read_text()
    assert alert.count(f"ODF quality checks failed in dataset {DATASET}") == 1
    assert f"DAG odf_quality_gate, task push_negative, run {run.run_id}, try 1" in alert
    assert f"{DATASET}: 2 of 4 check(s) failed; nothing was committed" in alert
    assert "check 'kwh.min' (min of kwh) failed: observed -4.0, expected geq_to 0" in alert
    assert "check 'meter_id.null_check' (null_check of meter_id) failed: observed 1" in alert
    assert "failing rows of 'kwh.min':" in alert and '"meter_id": "M-003", "kwh": -4.0}' in alert

    [kept] = list_rejected(repo.work_dir, DATASET)
    assert kept.records == 3 and kept.head == good["new_head"]
    assert str(kept.path) in alert


def test_checks_that_do_not_read_fail_the_dag_at_parse_time() -> None:
    with pytest.raises(ValueError, match="unknown column check 'nul_check'"):
        OdfPushIngestOperator(
            task_id="t", dataset="d", files=["f"], checks={"columns": {"x": {"nul_check": {"equal_to": 0}}}}
        )
    with pytest.raises(ValueError, match="equal_to cannot be combined"):
        OdfPushIngestOperator(
            task_id="t",
            dataset="d",
            files=["f"],
            checks={"columns": {"x": {"min": {"equal_to": 0, "geq_to": 1}}}},
        )

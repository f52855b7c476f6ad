"""The real-deployment test's quality gate (tests/deployment): `odf_deployment_gate` pushes the CSV file
named in the run's conf into a root dataset through declared checks, with retries that a failed check
must not use; `odf_deployment_gate_follower` is scheduled on that dataset's asset (through its alias)
and records the head of the event that started it, so the test sees whether a push released data."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Asset, dag, task

from airflow_odf.operators.base import asset_alias
from airflow_odf.operators.ingest import OdfPushIngestOperator

DATASET = "com.example.gate.readings"
CHECKS = {
    "columns": {"meter_id": {"null_check": {"equal_to": 0}}, "kwh": {"min": {"geq_to": 0}}},
    "tables": {"not_empty": {"check_statement": "COUNT(*) > 0"}},
}


@dag(
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={"file": "", "event_time": "2024-02-01T00:00:00Z"},
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},  # not for failed checks
)
def odf_deployment_gate() -> None:
    OdfPushIngestOperator(
        task_id="push",
        dataset=DATASET,
        files="{{ params.file }}",
        event_time="{{ params.event_time }}",
        checks=CHECKS,
    )


@dag(schedule=asset_alias(DATASET), start_date=datetime(2024, 1, 1), catchup=False, max_active_runs=1)
def odf_deployment_gate_follower() -> None:
    @task
    def heads_seen(triggering_asset_events: Mapping[Any, Iterable[Any]] | None = None) -> list[str]:
        """The heads of the asset events that started this run (each event is listed under its asset and
        under the alias it came through: the assets' only)."""
        found = triggering_asset_events or {}
        return [e.extra["head"] for key in found if isinstance(key, Asset) for e in found[key]]

    heads_seen()


odf_deployment_gate()
odf_deployment_gate_follower()

"""Example DAG: quality checks stop bad data before it becomes the dataset's head (write–audit–publish).

`push_readings` pushes `meters-2024-02-01.csv` into `com.example.readings`; its checks (every reading
has a meter, no reading is negative, the slice is not empty) pass, the slice is committed, and the
task's XCom lists each check's result. Then `push_negative` pushes `meters-2024-02-03-negative.csv`,
which holds a negative reading and one without a meter: the engine evaluates the checks on the staged
slice, two fail, nothing is committed (the head stays where the first push left it), the task fails
without retrying although it has `retries=2`, no asset event is emitted (so nothing scheduled on the
dataset runs), the rejected slice is kept in the repository's scratch space (`quarantine=True`; see
`odf inspect rejected`), and `OdfSchemaViolationNotifier` — which alerts on failed checks too —
delivers one line per failed check with its failing rows.

The alert goes to `write_alert`: appended to the file `$ODF_EXAMPLE_ALERT_FILE`, or only logged when
that is unset. Started by hand; `max_active_runs=1`, since each run pushes the same files (a push is an
append). See docs/checks.md.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import dag

from airflow_odf.notifications.schema_violation import OdfSchemaViolationNotifier
from airflow_odf.operators.ingest import OdfPushIngestOperator
from airflow_odf.operators.manifest import OdfApplyManifestOperator

EXAMPLES = Path(__file__).resolve().parent
log = logging.getLogger(__name__)


def write_alert(message: str, context: Any) -> None:
    """Appends the alert to the file `$ODF_EXAMPLE_ALERT_FILE` (only logs it when that is unset)."""
    path = os.environ.get("ODF_EXAMPLE_ALERT_FILE")
    if not path:
        log.warning("quality checks alert (ODF_EXAMPLE_ALERT_FILE is not set):\n%s", message)
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(message + "\n")


# [START howto_operator_odf_checks]
READING_CHECKS = {
    "columns": {
        "meter_id": {"null_check": {"equal_to": 0}},
        "kwh": {"min": {"geq_to": 0}, "max": {"less_than": 10_000}},
    },
    "tables": {"not_empty": {"check_statement": "COUNT(*) > 0"}},
}


@dag(
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["odf", "example"],
    default_args={
        "on_failure_callback": OdfSchemaViolationNotifier(write_alert),
        "retries": 2,  # not used by push_negative: failed checks fail at once
        "retry_delay": timedelta(minutes=2),
    },
)
def odf_quality_gate() -> None:
    apply = OdfApplyManifestOperator(
        task_id="apply_manifests",
        manifests=str(EXAMPLES / "manifests" / "com.example.readings.yaml"),
        create_repository=True,
    )
    readings = OdfPushIngestOperator(
        task_id="push_readings",
        dataset="com.example.readings",
        files=[str(EXAMPLES / "data" / "meters-2024-02-01.csv")],
        event_time="2024-02-01T00:00:00Z",
        checks=READING_CHECKS,
    )
    negative = OdfPushIngestOperator(
        task_id="push_negative",
        dataset="com.example.readings",
        files=[str(EXAMPLES / "data" / "meters-2024-02-03-negative.csv")],
        event_time="2024-02-03T00:00:00Z",
        checks=READING_CHECKS,
        quarantine=True,
    )
    apply >> readings >> negative


gate = odf_quality_gate()
# [END howto_operator_odf_checks]

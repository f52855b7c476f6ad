"""Example DAG 3: a schema-evolution violation fails its task at once and sends an alert.

`push_readings` pushes `meters-2024-02-01.csv` (columns `meter_id, kwh`) into the push dataset
`com.example.meters`; its schema is inferred from the file and committed with the data. Then the
upstream system renamed `kwh` to `energy_kwh`: `push_renamed` pushes such a file, the ingest refuses
it (a removed column is denied under every schema policy), the task fails without retrying although it
has `retries=2` (`OdfSchemaViolationException` is an `AirflowFailException`), nothing is committed, and
`OdfSchemaViolationNotifier` — attached to every task through `default_args`, silent for other
failures — delivers the alert.

Here the alert goes to `write_alert`, a plain callable: it appends the text to the file named by the
environment variable `ODF_EXAMPLE_ALERT_FILE` (where tasks run), or only logs it when that is unset.
It is started by hand and writes only `com.example.meters`; `max_active_runs=1`, since each run pushes
the same two files (a push is an append: overlapping runs would each add the first file's rows).
In production pass an Airflow notifier instead, e.g. `OdfSchemaViolationNotifier(SmtpNotifier(
to="data-team@example.com", subject="ODF schema violation", html_content="<pre>{{ odf_alert }}</pre>"))`.
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
        log.warning("schema violation alert (ODF_EXAMPLE_ALERT_FILE is not set):\n%s", message)
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(message + "\n")


# [START howto_notifier_schema_violation]
@dag(
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["odf", "example"],
    default_args={
        "on_failure_callback": OdfSchemaViolationNotifier(write_alert),
        "retries": 2,  # not used by push_renamed: a schema violation fails at once
        "retry_delay": timedelta(minutes=2),
    },
)
def odf_schema_violation() -> None:
    apply = OdfApplyManifestOperator(
        task_id="apply_manifests",
        manifests=str(EXAMPLES / "manifests" / "com.example.meters.yaml"),
        create_repository=True,
    )
    readings = OdfPushIngestOperator(
        task_id="push_readings",
        dataset="com.example.meters",
        files=[str(EXAMPLES / "data" / "meters-2024-02-01.csv")],
        event_time="2024-02-01T00:00:00Z",
    )
    renamed = OdfPushIngestOperator(
        task_id="push_renamed",
        dataset="com.example.meters",
        files=[str(EXAMPLES / "data" / "meters-2024-02-02-renamed.csv")],
        event_time="2024-02-02T00:00:00Z",
    )
    apply >> readings >> renamed


violation = odf_schema_violation()
# [END howto_notifier_schema_violation]

"""Example DAG 3 end to end with `dag.test()`: a pushed file with a renamed column fails its task without
retry, the notifier writes the alert, the dataset's head stays where the first push left it. Plus the
notifier on its own: delivery through an Airflow notifier's templated fields, silence on other failures."""

from __future__ import annotations

import asyncio
import email
import json
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import BaseNotifier
from airflow.sdk.exceptions import AirflowException
from structlog.testing import capture_logs

from airflow_odf.exceptions import OdfSchemaViolationException
from airflow_odf.notifications.schema_violation import OdfSchemaViolationNotifier
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.evolution import SchemaChange
from tests.airflow.dag_runs import load_dag, task_states, xcom

DATASET = "com.example.meters"


def _task_instances(run: Any) -> dict[str, Any]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {
            ti.task_id: {"state": str(ti.state), "try_number": ti.try_number, "max_tries": ti.max_tries}
            for ti in run.get_task_instances(session=session)
        }


@pytest.mark.usefixtures("airflow_db", "spark")
def test_schema_violation_dag(
    odf_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    alert_file = tmp_path / "alert.txt"
    monkeypatch.setenv("ODF_EXAMPLE_ALERT_FILE", str(alert_file))
    dag = load_dag("odf_schema_violation.py", "odf_schema_violation")
    capfd.readouterr()
    run = dag.test()
    log = capfd.readouterr().out
    assert task_states(run) == {
        "apply_manifests": "success",
        "push_readings": "success",
        "push_renamed": "failed",
    }
    failed = _task_instances(run)["push_renamed"]
    assert failed["max_tries"] == 2 and failed["try_number"] == 1  # retries were allowed, none was made

    first = xcom(run, "push_readings")
    assert first["records"] == 2
    dataset = Repository.open(odf_repo).dataset(DATASET)
    assert str(dataset.head()) == first["new_head"]  # the failed push committed nothing
    assert xcom(run, "push_renamed") is None

    alert = alert_file.read_text()
    assert alert.count("ODF schema violation in dataset com.example.meters") == 1  # one alert, one failure
    assert f"DAG odf_schema_violation, task push_renamed, run {run.run_id}, try 1" in alert
    assert "  - kwh: Option<Float64> -> -, column-removed, denied" in alert
    assert "  - energy_kwh: - -> Option<Float64>, optional-column-added, allowed" in alert
    assert "nothing was committed" in alert

    # the task's log: the violation at ERROR in the main section, before the failure and before the
    # collapsed "Post Execute" group in which Airflow runs the notifier
    start = log.index("ODF schema violation in dataset com.example.meters")
    assert "[error" in log[:start].rsplit("\n", 1)[-1]  # the level of the line the violation starts
    failing = log[start:]
    assert failing.index("Task failed with exception") < failing.index("::group::Post Execute")
    assert failing.index("::group::Post Execute") < failing.index("sending the alert")


class _Collecting(BaseNotifier):
    """A real Airflow notifier with templated fields, keeping what it was asked to send."""

    template_fields = ("subject", "body")

    def __init__(self, subject: str, body: str) -> None:
        super().__init__()
        self.subject = subject
        self.body = body
        self.sent: list[tuple[str, str]] = []  # shared with the copies the ODF notifier renders

    def notify(self, context: Any) -> None:
        self.sent.append((self.subject, self.body))


def _violation() -> OdfSchemaViolationException:
    changes = [
        SchemaChange("kwh", "Float64", None, "column-removed", False),
        SchemaChange("note", None, "Option<String>", "optional-column-added", True),
    ]
    return OdfSchemaViolationException(DATASET, "com.example.meters: the output's schema ...", changes)


def test_notifier_renders_the_alert_into_an_airflow_notifier() -> None:
    target = _Collecting(
        subject="{{ odf_schema_violation.dataset }}: {{ odf_schema_violation.changes | length }} changes",
        body="{{ odf_alert }}",
    )
    notifier = OdfSchemaViolationNotifier(target)
    notifier({"exception": _violation(), "run_id": "manual__1"})
    notifier({"exception": _violation(), "run_id": "manual__2"})
    assert [s for s, _ in target.sent] == [f"{DATASET}: 2 changes"] * 2
    first, second = (b for _, b in target.sent)
    assert "run manual__1" in first and "run manual__2" in second  # each alert rendered afresh
    assert "  - kwh: Float64 -> -, column-removed, denied" in first
    assert "  - note: - -> Option<String>, optional-column-added, allowed" in first
    assert target.body == "{{ odf_alert }}"  # the user's notifier is left untouched


def test_notifier_ignores_other_failures_unless_forwarding() -> None:
    received: list[str] = []
    OdfSchemaViolationNotifier(lambda message, context: received.append(message))(
        {"exception": AirflowException("source unreachable"), "run_id": "r"}
    )
    assert received == []
    OdfSchemaViolationNotifier(lambda m, c: received.append(m), forward_other_failures=True)(
        {"exception": AirflowException("source unreachable"), "run_id": "r"}
    )
    [message] = received
    assert message.startswith("Task failed:") and "source unreachable" in message


def test_notifier_async() -> None:
    received: list[str] = []

    async def post(message: str, context: Any) -> None:
        received.append(message)

    notifier = OdfSchemaViolationNotifier(post)
    asyncio.run(notifier.async_notify({"exception": _violation(), "run_id": "r"}))
    sync_target = _Collecting(subject="s", body="{{ odf_alert }}")  # no async_notify: run in a thread
    asyncio.run(OdfSchemaViolationNotifier(sync_target).async_notify({"exception": _violation()}))
    assert received[0].startswith(f"ODF schema violation in dataset {DATASET}")
    assert sync_target.sent[0][1].startswith(f"ODF schema violation in dataset {DATASET}")


class _SmtpHandler(socketserver.StreamRequestHandler):
    """Just enough SMTP (RFC 5321) to accept one message: EHLO, MAIL, RCPT, DATA, QUIT."""

    def handle(self) -> None:
        self.wfile.write(b"220 127.0.0.1 test SMTP\r\n")
        while line := self.rfile.readline():
            verb = line.decode().strip().split(" ", 1)[0].upper()
            if verb == "EHLO":
                self.wfile.write(b"250-127.0.0.1\r\n250 8BITMIME\r\n")
            elif verb == "DATA":
                self.wfile.write(b"354 go on\r\n")
                body = []
                while (data := self.rfile.readline()) not in (b".\r\n", b""):
                    body.append(data.decode())
                self.server.messages.append("".join(body))  # type: ignore[attr-defined]
                self.wfile.write(b"250 queued\r\n")
            elif verb == "QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"250 ok\r\n")


@pytest.fixture
def smtp_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A local SMTP server behind the connection `odf_test_smtp`; yields the messages it received."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _SmtpHandler)
    server.messages = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    conn = {
        "conn_type": "smtp",
        "host": "127.0.0.1",
        "port": server.server_address[1],
        "extra": {"disable_ssl": True, "disable_tls": True, "retry_limit": 0},
    }
    monkeypatch.setenv("AIRFLOW_CONN_ODF_TEST_SMTP", json.dumps(conn))
    yield server.messages  # type: ignore[attr-defined]
    server.shutdown()
    server.server_close()


def test_notifier_delivers_through_the_smtp_notifier(smtp_server: list[str]) -> None:
    from airflow.providers.smtp.notifications.smtp import SmtpNotifier

    mail = SmtpNotifier(
        to="data-team@example.com",
        from_email="airflow@example.com",
        smtp_conn_id="odf_test_smtp",
        subject="Schema violation: {{ odf_schema_violation.dataset }}",
        html_content="<pre>{{ odf_alert }}</pre>",
    )
    OdfSchemaViolationNotifier(mail)({"exception": _violation(), "run_id": "manual__1"})
    [raw] = smtp_server
    message = email.message_from_string(raw)
    assert message["Subject"] == f"Schema violation: {DATASET}"
    assert message["To"] == "data-team@example.com"
    [html] = [p for p in message.walk() if p.get_content_type() == "text/html"]
    text = html.get_payload(decode=True).decode()
    assert text.startswith(f"<pre>ODF schema violation in dataset {DATASET}\n")
    assert "  - kwh: Float64 -> -, column-removed, denied" in text


def test_the_failing_task_logs_the_violation_at_error_where_it_fails() -> None:
    """Airflow runs failure callbacks (the notifier) inside the collapsed "Post Execute" group; the
    violation is logged at ERROR by the task itself, as the core's error turns into the task's failure."""
    from airflow_odf.odf.schema.evolution import SchemaEvolutionError
    from airflow_odf.operators.ingest import OdfPushIngestOperator

    changes = [
        SchemaChange("kwh", "Float64", None, "column-removed", False),
        SchemaChange("energy_kwh", None, "Option<Float64>", "optional-column-added", True),
    ]

    def push() -> None:
        raise SchemaEvolutionError(f"{DATASET}: the pushed data's schema breaks the rules", changes)

    operator = OdfPushIngestOperator(task_id="push_renamed", dataset=DATASET, files=["renamed.csv"])
    with capture_logs() as logs, pytest.raises(OdfSchemaViolationException):
        operator.call(push)
    [logged] = [e for e in logs if e["log_level"] == "error"]
    assert logged["event"].splitlines()[:2] == [
        f"ODF schema violation in dataset {DATASET}",
        "1 of 2 change(s) denied by the schema-evolution rules; nothing was committed (the dataset's head "
        "is unchanged) and the task will not retry.",
    ]
    assert "  - kwh: Float64 -> -, column-removed, denied" in logged["event"]


def test_notifier_rejects_a_target_it_cannot_call() -> None:
    with pytest.raises(TypeError, match="a notifier or a callable"):
        OdfSchemaViolationNotifier("mail@example.com")  # type: ignore[arg-type]

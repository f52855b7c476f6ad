"""The ODF sensors on a real repository: the head sensor in poke and deferrable mode (the deferral's
trigger run as the triggerer would, its event fed back), the source sensor against a real HTTP server.
Reschedule mode runs through `dag.test()` in test_polling_source_dag.py."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)
from structlog.testing import capture_logs

from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash, base58btc_encode
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.sensors.head import OdfHeadChangedSensor
from airflow_odf.sensors.source import OdfSourceChangedSensor
from airflow_odf.triggers.head import OdfHeadTrigger
from airflow_odf.triggers.source import OdfSourceChangedTrigger
from tests.airflow.test_triggers import DATASET, commit, did, first_event, rebuilt
from tests.unit.test_source_check import HttpSource, etag, ingested, root, start_http_source

CONTEXT: Any = {}  # poke mode and the deferral read nothing from the context


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Repository]:
    repository = Repository.init(tmp_path / "repo")
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_WATCH", json.dumps({"conn_type": "odf_repo", "host": repository.root.as_uri()})
    )
    yield repository


def head_sensor(**kwargs: Any) -> OdfHeadChangedSensor:
    kwargs.setdefault("poke_interval", 0.05)
    return OdfHeadChangedSensor(task_id="wait_head", dataset=DATASET, odf_conn_id="odf_watch", **kwargs)


def warnings(logs: list[dict[str, Any]], containing: str) -> list[str]:
    """The WARNING lines captured by `structlog.testing.capture_logs` that contain `containing`."""
    return [e["event"] for e in logs if e["log_level"] == "warning" and containing in e["event"]]


def later(seconds: float, fn: Any) -> threading.Thread:
    thread = threading.Timer(seconds, fn)
    thread.start()
    return thread


# ------------------------------------------------------------------------------------------------
# OdfHeadChangedSensor: poke
# ------------------------------------------------------------------------------------------------


def test_head_sensor_poke(repo: Repository) -> None:
    assert not head_sensor().poke(CONTEXT)  # no dataset yet
    first = commit(repo, 0)
    found = head_sensor().poke(CONTEXT)  # no known head: any head
    assert found.is_done
    assert found.xcom_value == {"dataset": DATASET, "dataset_id": did(repo), "head": first, "prev_head": None}

    assert not head_sensor(known_head=first).poke(CONTEXT)
    second = commit(repo, 1)
    moved = head_sensor(known_head=first).poke(CONTEXT)
    assert moved.is_done and (moved.xcom_value["prev_head"], moved.xcom_value["head"]) == (first, second)


def test_head_sensor_rendered_none_means_no_known_head(repo: Repository) -> None:
    head = commit(repo, 0)
    for rendered in ("None", "", "  "):
        assert head_sensor(known_head=rendered).poke(CONTEXT).xcom_value["head"] == head
    as_base58 = "z" + base58btc_encode(Multihash.parse(head).to_bytes())
    assert not head_sensor(known_head=as_base58).poke(CONTEXT)  # the same hash in another base
    with pytest.raises(AirflowFailException, match="known_head 'not-a-hash' is not a block hash"):
        head_sensor(known_head="not-a-hash").poke(CONTEXT)


def test_head_sensor_execute_in_poke_mode_waits_for_the_move(repo: Repository) -> None:
    known = commit(repo, 0)
    moved: list[str] = []
    mover = later(0.3, lambda: moved.append(commit(repo, 1)))
    result = head_sensor(known_head=known, timeout=20).execute(CONTEXT)
    mover.join()
    assert result == {"dataset": DATASET, "dataset_id": did(repo), "head": moved[0], "prev_head": known}


def test_head_sensor_poke_mode_timeout_and_soft_fail(repo: Repository) -> None:
    known = commit(repo, 0)
    with pytest.raises(AirflowSensorTimeout):
        head_sensor(known_head=known, timeout=0.2).execute(CONTEXT)
    with capture_logs() as logs, pytest.raises(AirflowSkipException):
        head_sensor(known_head=known, timeout=0.2, soft_fail=True).execute(CONTEXT)
    [skipped] = warnings(logs, "skipped")
    assert skipped.startswith(f"{DATASET}: skipped: Sensor has timed out")


def test_head_sensor_bad_repository_fails_without_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_WATCH", json.dumps({"conn_type": "odf_repo", "host": (tmp_path / "no").as_uri()})
    )
    with pytest.raises(AirflowFailException, match="not an ODF repository"):
        head_sensor().poke(CONTEXT)
    # soft_fail skips a timeout, never an error
    with pytest.raises(AirflowFailException, match=f"{DATASET}: .*not an ODF repository"):
        head_sensor(soft_fail=True, timeout=5).execute(CONTEXT)


def test_head_sensor_missing_connection_and_bad_known_head_fail_despite_soft_fail(repo: Repository) -> None:
    with pytest.raises(AirflowFailException, match="odf_missing_conn"):
        OdfHeadChangedSensor(
            task_id="x", dataset=DATASET, odf_conn_id="odf_missing_conn", soft_fail=True, timeout=5
        ).execute(CONTEXT)
    with pytest.raises(AirflowFailException, match="known_head 'f16not-a-hash' is not a block hash"):
        head_sensor(known_head="f16not-a-hash", soft_fail=True, timeout=5).execute(CONTEXT)


def test_never_fail_still_skips_on_an_error_and_logs_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_WATCH", json.dumps({"conn_type": "odf_repo", "host": (tmp_path / "no").as_uri()})
    )
    with capture_logs() as logs, pytest.raises(AirflowSkipException):
        head_sensor(never_fail=True, timeout=5).execute(CONTEXT)
    [skipped] = warnings(logs, "skipped")
    assert skipped.startswith(f"{DATASET}: skipped: ") and "not an ODF repository" in skipped


def test_sensor_arguments_are_checked_at_parse_time() -> None:
    with pytest.raises(ValueError, match="dataset"):
        OdfHeadChangedSensor(task_id="x", dataset="")
    with pytest.raises(ValueError, match="request_timeout"):
        OdfSourceChangedSensor(task_id="x", dataset="a.b", request_timeout=0)


# ------------------------------------------------------------------------------------------------
# OdfHeadChangedSensor: deferrable
# ------------------------------------------------------------------------------------------------


def test_head_sensor_defers_to_the_head_trigger(repo: Repository) -> None:
    known = commit(repo, 0)
    sensor = head_sensor(known_head=known, deferrable=True, timeout=600, poke_interval=7)
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(CONTEXT)
    trigger = deferred.value.trigger
    assert isinstance(trigger, OdfHeadTrigger) and deferred.value.method_name == "execute_complete"
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_odf.triggers.head.OdfHeadTrigger"
    assert {k: v for k, v in kwargs.items() if k != "end_time"} == {
        "dataset": DATASET,
        "odf_conn_id": "odf_watch",
        "poll_interval": 7.0,
        "known_head": known,
    }
    assert before + 600 <= kwargs["end_time"] <= time.time() + 600


def test_head_sensor_deferred_end_to_end(repo: Repository) -> None:
    """Defer, run the stored trigger as the triggerer would while the head moves, resume with its event."""
    known = commit(repo, 0)
    sensor = head_sensor(known_head=known, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(CONTEXT)
    trigger = rebuilt(deferred.value.trigger)
    moved: list[str] = []
    event = asyncio.run(first_event(trigger, during=lambda: moved.append(commit(repo, 1))))
    result = sensor.resume_execution("execute_complete", {"event": event}, CONTEXT)
    assert result == {"dataset": DATASET, "dataset_id": did(repo), "head": moved[0], "prev_head": known}


def test_head_sensor_execute_complete_on_every_event() -> None:
    sensor = head_sensor(deferrable=True)
    moved = {
        "status": "moved",
        "dataset": DATASET,
        "dataset_id": "did:odf:x",
        "head": "h2",
        "prev_head": "h1",
    }
    assert sensor.execute_complete(CONTEXT, moved) == {
        "dataset": DATASET,
        "dataset_id": "did:odf:x",
        "head": "h2",
        "prev_head": "h1",
    }
    with pytest.raises(AirflowSensorTimeout, match="deadline"):
        sensor.execute_complete(CONTEXT, {"status": "timeout", "message": "nothing yet at the deadline"})
    with pytest.raises(AirflowFailException, match=f"^{DATASET}: not an ODF repository$"):
        sensor.execute_complete(CONTEXT, {"status": "error", "message": f"{DATASET}: not an ODF repository"})
    with pytest.raises(AirflowFailException, match="bad event"):
        sensor.execute_complete(CONTEXT, None)


def test_head_sensor_soft_fail_skips_on_timeout_events_only() -> None:
    """`resume_execution` is what the task runner calls after a deferral; soft_fail applies there, to
    timeouts only: an error event fails the task with its message, and every skip says why."""
    sensor = head_sensor(deferrable=True, soft_fail=True)
    with capture_logs() as logs, pytest.raises(AirflowSkipException):
        sensor.resume_execution(
            "execute_complete", {"event": {"status": "timeout", "message": "late"}}, CONTEXT
        )
    assert warnings(logs, "skipped") == [f"{DATASET}: skipped: {DATASET}: late"]
    with pytest.raises(AirflowFailException, match=f"^{DATASET}: broken$"):
        sensor.resume_execution(
            "execute_complete", {"event": {"status": "error", "message": "broken"}}, CONTEXT
        )


def test_head_sensor_deferred_timeout_end_to_end(repo: Repository) -> None:
    known = commit(repo, 0)
    sensor = head_sensor(known_head=known, deferrable=True, timeout=0.3)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(CONTEXT)
    event = asyncio.run(first_event(rebuilt(deferred.value.trigger)))
    assert event["status"] == "timeout"
    with pytest.raises(AirflowSensorTimeout):
        sensor.resume_execution("execute_complete", {"event": event}, CONTEXT)


# ------------------------------------------------------------------------------------------------
# OdfSourceChangedSensor against a real HTTP server
# ------------------------------------------------------------------------------------------------

SOURCE = "com.example.source"


@pytest.fixture
def http(monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpSource]:
    yield from start_http_source(monkeypatch)


@pytest.fixture
def url_dataset(http: HttpSource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repository:
    """A root dataset whose Url source is `${{ env.ODF_TEST_PRICES_URL }}` on the local server."""
    dataset = root(tmp_path, model.FetchStepUrl(url="${{ env.ODF_TEST_PRICES_URL }}"), SOURCE)
    monkeypatch.setenv("ODF_TEST_PRICES_URL", http.url("/prices.csv"))
    repo = Repository.open(tmp_path / "repo")
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_WATCH", json.dumps({"conn_type": "odf_repo", "host": repo.root.as_uri()})
    )
    assert repo.dataset(SOURCE).head() == dataset.head()
    return repo


def source_sensor(**kwargs: Any) -> OdfSourceChangedSensor:
    kwargs.setdefault("poke_interval", 0.05)
    return OdfSourceChangedSensor(task_id="wait_source", dataset=SOURCE, odf_conn_id="odf_watch", **kwargs)


def test_source_sensor_poke(http: HttpSource, url_dataset: Repository) -> None:
    assert not source_sensor().poke(CONTEXT)  # 404: nothing published yet
    http.put("/prices.csv", b"date,price\n2024-01-01,1\n", ETag='"v1"')
    found = source_sensor().poke(CONTEXT)
    assert found.is_done
    assert found.xcom_value == {
        "dataset": SOURCE,
        "dataset_id": str(url_dataset.resolve(SOURCE)),
        "changed": True,
        "reason": found.xcom_value["reason"],
    }
    assert '"v1"' in found.xcom_value["reason"]

    ingested(url_dataset.dataset(SOURCE), etag('"v1"'))
    assert not source_sensor().poke(CONTEXT)
    assert http.requests[-1][1]["If-None-Match"] == '"v1"'

    http.put("/prices.csv", b"date,price\n2024-01-01,1\n2024-01-02,2\n", ETag='"v2"')
    assert source_sensor().poke(CONTEXT).xcom_value["changed"]


def test_source_sensor_unreachable_source_is_logged_and_asked_again(
    http: HttpSource, url_dataset: Repository
) -> None:
    http.put("/prices.csv", b"maintenance", status=503)
    with capture_logs() as logs:
        assert not source_sensor().poke(CONTEXT)  # "not yet", not a failure
    [warning] = warnings(logs, "503")
    assert warning.startswith(f"{SOURCE}: ") and "transient" in warning
    # in poke mode the sensor keeps asking through the outage and passes once the source is back
    back = later(0.3, lambda: http.put("/prices.csv", b"date,price\n2024-01-01,1\n", ETag='"v1"'))
    result = source_sensor(timeout=20, soft_fail=True).execute(CONTEXT)
    back.join()
    assert result["changed"] and '"v1"' in result["reason"]


def test_source_sensor_unknown_dataset_fails(url_dataset: Repository) -> None:
    with pytest.raises(AirflowFailException, match="no dataset named"):
        OdfSourceChangedSensor(task_id="x", dataset="com.example.absent", odf_conn_id="odf_watch").poke(
            CONTEXT
        )
    with pytest.raises(AirflowFailException, match=r"com\.example\.absent: .*no dataset named"):
        OdfSourceChangedSensor(
            task_id="x", dataset="com.example.absent", odf_conn_id="odf_watch", soft_fail=True, timeout=5
        ).execute(CONTEXT)


UNSET = f"{SOURCE}: fetch.url: environment variable ODF_TEST_PRICES_URL is not set"


def test_source_sensor_missing_variable_fails_with_the_core_message_in_poke_mode(
    url_dataset: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: with soft_fail the sensor ended *skipped*, saying only "Skipping task."."""
    monkeypatch.delenv("ODF_TEST_PRICES_URL")
    with pytest.raises(AirflowFailException, match=re.escape(UNSET)) as failed:
        source_sensor(soft_fail=True, timeout=5).execute(CONTEXT)
    assert not isinstance(failed.value, AirflowSkipException)


def test_source_sensor_missing_variable_fails_with_the_core_message_when_deferred(
    url_dataset: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The triggerer checks without the variable: its error event fails the task, soft_fail or not."""
    monkeypatch.delenv("ODF_TEST_PRICES_URL")
    sensor = source_sensor(deferrable=True, soft_fail=True, timeout=60)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(CONTEXT)
    event = asyncio.run(first_event(rebuilt(deferred.value.trigger)))
    assert event["status"] == "error" and event["message"].startswith(UNSET)
    with pytest.raises(AirflowFailException, match=re.escape(UNSET)):
        sensor.resume_execution("execute_complete", {"event": event}, CONTEXT)


def test_source_sensor_deferred_end_to_end(http: HttpSource, url_dataset: Repository) -> None:
    http.put("/prices.csv", b"date,price\n2024-01-01,1\n", ETag='"v1"')
    ingested(url_dataset.dataset(SOURCE), etag('"v1"'))
    sensor = source_sensor(deferrable=True, timeout=60)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(CONTEXT)
    assert isinstance(deferred.value.trigger, OdfSourceChangedTrigger)
    trigger = rebuilt(deferred.value.trigger)
    assert trigger.serialize()[1]["request_timeout"] == 30.0

    def publish() -> None:
        http.put("/prices.csv", b"date,price\n2024-01-01,1\n2024-01-02,2\n", ETag='"v2"')

    event = asyncio.run(first_event(trigger, during=publish, after=0.3))
    assert event["status"] == "changed"
    result = sensor.resume_execution("execute_complete", {"event": event}, CONTEXT)
    assert result["changed"] and '"v2"' in result["reason"]
    assert result["dataset_id"] == str(url_dataset.resolve(SOURCE))


def test_source_trigger_timeout_and_transient_errors(http: HttpSource, url_dataset: Repository) -> None:
    http.put("/prices.csv", b"date,price\n", ETag='"v1"')
    ingested(url_dataset.dataset(SOURCE), etag('"v1"'))
    waiting = OdfSourceChangedTrigger(
        dataset=SOURCE, odf_conn_id="odf_watch", poll_interval=0.05, end_time=time.time() + 0.3
    )
    assert asyncio.run(first_event(waiting))["status"] == "timeout"

    # a 503 is logged and asked again; the wait ends when the source has new data
    http.put("/prices.csv", b"maintenance", status=503)
    outage = OdfSourceChangedTrigger(dataset=SOURCE, odf_conn_id="odf_watch", poll_interval=0.05)

    def back() -> None:
        http.put("/prices.csv", b"date,price\n2024-01-01,1\n", ETag='"v2"')

    with capture_logs() as logs:
        event = asyncio.run(first_event(outage, during=back, after=0.3))
    assert event["status"] == "changed" and '"v2"' in event["reason"]
    assert warnings(logs, "503") and all(w.startswith(f"{SOURCE}: ") for w in warnings(logs, "503"))

    # an outage until the deadline: a timeout that names the last failure
    http.put("/prices.csv", b"maintenance", status=503)
    late = OdfSourceChangedTrigger(
        dataset=SOURCE, odf_conn_id="odf_watch", poll_interval=0.05, end_time=time.time() + 0.3
    )
    event = asyncio.run(first_event(late))
    assert event["status"] == "timeout" and "the last check failed" in event["message"]
    assert "503" in event["message"]

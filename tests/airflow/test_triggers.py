"""The head triggers against a real repository behind an `odf_repo` connection: serialization as the
triggerer stores it, and every way a wait ends (moved, error, timeout) — heads moved by real commits
while the trigger polls."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository, RepositoryError
from airflow_odf.triggers.head import OdfHeadEventTrigger, OdfHeadTrigger

DATASET = "com.example.watched"
POLL = 0.05
WAIT = 10.0


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Repository]:
    """An empty repository behind the connection `odf_watch` (created before the triggers read it)."""
    repository = Repository.init(tmp_path / "repo")
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_WATCH", json.dumps({"conn_type": "odf_repo", "host": repository.root.as_uri()})
    )
    yield repository


def commit(repo: Repository, version: int) -> str:
    """Creates the dataset (version 0) or moves its head by one block; returns the new head."""
    snapshot = model.DatasetSnapshot(
        name=DATASET,
        kind=model.DatasetKind.ROOT,
        metadata=[model.SetInfo(description=f"version {version}")],
    )
    repo.add(snapshot)
    return str(repo.dataset(DATASET).head())


def did(repo: Repository) -> str:
    return str(repo.resolve(DATASET))


def rebuilt(trigger: Any) -> Any:
    """The trigger as the triggerer gets it: kwargs through JSON and Airflow's serde, class by path."""
    from airflow.sdk._shared.module_loading import import_string
    from airflow.sdk.serde import deserialize, serialize

    classpath, kwargs = trigger.serialize()
    stored = json.loads(json.dumps(serialize(kwargs)))  # JSON-only: this raises on anything else
    return import_string(classpath)(**deserialize(stored))


async def first_event(trigger: Any, *, during: Any = None, after: float = 0.2) -> dict[str, Any]:
    """The first event of `trigger.run()`; `during` (blocking) runs `after` s into the wait."""
    events: AsyncIterator[Any] = trigger.run()
    waiting = asyncio.ensure_future(events.__anext__())
    if during is not None:
        await asyncio.sleep(after)
        assert not waiting.done(), f"fired before the change: {waiting.result()}"
        await asyncio.to_thread(during)
    event = await asyncio.wait_for(waiting, WAIT)
    await events.aclose()
    return event.payload


# ------------------------------------------------------------------------------------------------
# OdfHeadTrigger
# ------------------------------------------------------------------------------------------------


def test_head_trigger_serialize_round_trip() -> None:
    trigger = OdfHeadTrigger(
        dataset=DATASET, known_head="f1620abc", odf_conn_id="odf_watch", poll_interval=5, end_time=1.7e9
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_odf.triggers.head.OdfHeadTrigger"
    assert kwargs == {
        "dataset": DATASET,
        "odf_conn_id": "odf_watch",
        "poll_interval": 5.0,
        "end_time": 1.7e9,
        "known_head": "f1620abc",
    }
    assert rebuilt(trigger).serialize() == (classpath, kwargs)
    assert rebuilt(OdfHeadTrigger(dataset=DATASET)).serialize()[1]["end_time"] is None


def test_head_trigger_fires_when_the_head_moves(repo: Repository) -> None:
    known = commit(repo, 0)
    trigger = rebuilt(
        OdfHeadTrigger(dataset=DATASET, known_head=known, odf_conn_id="odf_watch", poll_interval=POLL)
    )
    moved_to: list[str] = []
    payload = asyncio.run(first_event(trigger, during=lambda: moved_to.append(commit(repo, 1))))
    assert payload == {
        "status": "moved",
        "dataset": DATASET,
        "dataset_id": did(repo),
        "head": moved_to[0],
        "prev_head": known,
    }


def test_head_trigger_without_known_head_waits_for_the_dataset(repo: Repository) -> None:
    trigger = OdfHeadTrigger(dataset=DATASET, odf_conn_id="odf_watch", poll_interval=POLL)
    created: list[str] = []
    payload = asyncio.run(first_event(trigger, during=lambda: created.append(commit(repo, 0))))
    assert payload["status"] == "moved" and payload["head"] == created[0] and payload["prev_head"] is None
    assert payload["dataset_id"] == did(repo)


def test_head_trigger_already_moved_fires_at_once_even_past_the_deadline(repo: Repository) -> None:
    old = commit(repo, 0)
    new = commit(repo, 1)
    trigger = OdfHeadTrigger(
        dataset=DATASET, known_head=old, odf_conn_id="odf_watch", end_time=time.time() - 60
    )
    payload = asyncio.run(first_event(trigger))
    assert payload["status"] == "moved" and (payload["prev_head"], payload["head"]) == (old, new)


def test_head_trigger_times_out_at_the_absolute_deadline(repo: Repository) -> None:
    known = commit(repo, 0)
    started = time.monotonic()
    trigger = OdfHeadTrigger(
        dataset=DATASET,
        known_head=known,
        odf_conn_id="odf_watch",
        poll_interval=30,
        end_time=time.time() + 0.5,
    )
    payload = asyncio.run(first_event(trigger))
    elapsed = time.monotonic() - started
    assert payload["status"] == "timeout" and payload["dataset"] == DATASET
    assert "deadline" in payload["message"]
    assert 0.4 < elapsed < 5  # the sleep is cut to the deadline, not a whole poll interval


def test_head_trigger_reports_errors_as_an_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_WATCH",
        json.dumps({"conn_type": "odf_repo", "host": (tmp_path / "nothing").as_uri()}),
    )
    payload = asyncio.run(first_event(OdfHeadTrigger(dataset=DATASET, odf_conn_id="odf_watch")))
    assert payload["status"] == "error" and payload["dataset"] == DATASET
    assert payload["message"].startswith(f"{DATASET}: ") and "not an ODF repository" in payload["message"]


def test_head_trigger_unknown_connection_is_an_error_event() -> None:
    payload = asyncio.run(first_event(OdfHeadTrigger(dataset=DATASET, odf_conn_id="odf_missing_conn")))
    assert payload["status"] == "error" and "odf_missing_conn" in payload["message"]


def test_check_failure_reuses_the_operators_classification(tmp_path: Path) -> None:
    """Transient: what a retry of the operators would cure (unreachable source or remote, network);
    permanent: everything else, with the core's message."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    from airflow_odf.odf.ingest.fetch.templating import TemplateError
    from airflow_odf.odf.ingest.fetch.types import SourceNotFoundError, SourceUnreachableError
    from airflow_odf.odf.repo.repository import DatasetNotFoundError
    from airflow_odf.odf.storage.http import HttpStoreError
    from airflow_odf.triggers.base import CheckFailure, check_failure

    unset = TemplateError("fetch.url: environment variable X is not set")
    assert check_failure("d", unset) == CheckFailure("d: fetch.url: environment variable X is not set", False)
    assert check_failure("d", SourceUnreachableError("HTTP 503", status=503)) == CheckFailure(
        "d: HTTP 503", True
    )
    assert not check_failure("d", SourceNotFoundError("gone")).transient
    assert check_failure("d", HttpStoreError("HTTP 502", url="http://x")).transient
    assert not check_failure("d", DatasetNotFoundError("no dataset named 'd'")).transient
    with pytest.raises(RepositoryError) as broken:
        Repository.open(tmp_path)
    assert not check_failure("d", broken.value).transient
    assert not check_failure("d", AirflowNotFoundException("The conn_id `c` isn't defined")).transient
    assert check_failure("d", ConnectionRefusedError("refused")) == CheckFailure(
        "d: ConnectionRefusedError: refused", True
    )
    assert check_failure("d", TimeoutError("timed out")).transient


# ------------------------------------------------------------------------------------------------
# OdfHeadEventTrigger (AssetWatcher)
# ------------------------------------------------------------------------------------------------


class AssetStateStore:
    """Stands in for Airflow's per-asset state store of one watched asset (`aget` / `aset`)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_event_trigger_serialize_round_trip_and_identity() -> None:
    from airflow.triggers.base import BaseEventTrigger

    trigger = OdfHeadEventTrigger(dataset=DATASET, odf_conn_id="odf_watch", poll_interval=30)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_odf.triggers.head.OdfHeadEventTrigger"
    assert kwargs == {
        "dataset": DATASET,
        "odf_conn_id": "odf_watch",
        "poll_interval": 30.0,
        "known_head": None,
    }
    again = rebuilt(trigger)
    assert again.serialize() == (classpath, kwargs)
    assert BaseEventTrigger.hash(*again.serialize()) == BaseEventTrigger.hash(classpath, kwargs)


def test_event_trigger_usable_as_asset_watcher() -> None:
    from airflow.sdk import Asset, AssetWatcher

    from airflow_odf.assets import dataset_uri
    from airflow_odf.odf.format.multiformats import DatasetId

    watcher = AssetWatcher(name="odf_watcher", trigger=OdfHeadEventTrigger(dataset=DATASET))
    asset = Asset(name=DATASET, uri=dataset_uri(DatasetId.generate()[0]), watchers=[watcher])
    assert asset.watchers[0].trigger.dataset == DATASET


def test_event_trigger_fires_on_every_move(repo: Repository) -> None:
    start = commit(repo, 0)
    trigger = rebuilt(OdfHeadEventTrigger(dataset=DATASET, odf_conn_id="odf_watch", poll_interval=POLL))

    async def watch() -> list[dict[str, Any]]:
        events = trigger.run()
        got = []
        for version in (1, 2):
            waiting = asyncio.ensure_future(events.__anext__())
            await asyncio.sleep(0.2)
            assert not waiting.done()  # nothing for the head it started from
            await asyncio.to_thread(commit, repo, version)
            got.append((await asyncio.wait_for(waiting, WAIT)).payload)
        await events.aclose()
        return got

    first, second = asyncio.run(watch())
    heads = [str(h) for h, _ in repo.dataset(DATASET).iter_blocks()]
    assert first == {
        "status": "moved",
        "dataset": DATASET,
        "dataset_id": did(repo),
        "head": heads[1],
        "prev_head": start,
    }
    assert (second["prev_head"], second["head"]) == (heads[1], heads[0])


def test_event_trigger_resumes_from_its_watermark(repo: Repository) -> None:
    """A restarted watcher reports the move it missed while down, once, from the stored head."""
    commit(repo, 0)
    store = AssetStateStore()
    trigger = OdfHeadEventTrigger(dataset=DATASET, odf_conn_id="odf_watch", poll_interval=POLL)
    trigger.asset_state_store = store
    moved: list[str] = []

    async def one_event_then_stop() -> dict[str, Any]:
        events = trigger.run()
        waiting = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0.2)
        moved.append(await asyncio.to_thread(commit, repo, 1))
        event = await asyncio.wait_for(waiting, WAIT)
        assert store.values == {}  # kept only once the event was taken: at least once, never lost
        following = asyncio.ensure_future(events.__anext__())  # as the triggerer asks at once
        await asyncio.sleep(0.2)
        following.cancel()  # the triggerer stops
        return event.payload

    first = asyncio.run(one_event_then_stop())
    assert first["head"] == moved[0] and store.values == {"odf_head": moved[0]}

    missed = commit(repo, 2)  # the triggerer is down
    restarted = OdfHeadEventTrigger(**trigger.serialize()[1])
    restarted.asset_state_store = store
    again = asyncio.run(first_event(restarted))
    assert (again["prev_head"], again["head"]) == (moved[0], missed)


def test_event_trigger_known_head_and_creation(repo: Repository) -> None:
    trigger = OdfHeadEventTrigger(dataset=DATASET, odf_conn_id="odf_watch", poll_interval=POLL)
    created: list[str] = []
    payload = asyncio.run(first_event(trigger, during=lambda: created.append(commit(repo, 0))))
    assert payload["prev_head"] is None and payload["head"] == created[0]

    newer = commit(repo, 1)
    behind = OdfHeadEventTrigger(dataset=DATASET, odf_conn_id="odf_watch", known_head=created[0])
    payload = asyncio.run(first_event(behind))
    assert (payload["prev_head"], payload["head"]) == (created[0], newer)


def test_event_trigger_error_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No error event: it would become an asset event and start the DAGs. The triggerer logs it."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_WATCH",
        json.dumps({"conn_type": "odf_repo", "host": (tmp_path / "nothing").as_uri()}),
    )
    trigger = OdfHeadEventTrigger(dataset=DATASET, odf_conn_id="odf_watch")
    with pytest.raises(RepositoryError, match="not an ODF repository"):
        asyncio.run(first_event(trigger))


def test_event_trigger_logs_a_transient_failure_and_keeps_watching(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A network error while reading the head (simulated: the local store cannot have one) is logged at
    WARNING and the head read again; the move after it is reported once, from the head seen before."""
    from structlog.testing import capture_logs

    from airflow_odf.triggers import head

    start = commit(repo, 0)
    failures = iter([ConnectionResetError("connection reset by peer")])

    def flaky(conn_id: str, dataset: str) -> head.HeadReading:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return read_head(conn_id, dataset)

    read_head = head.read_head
    monkeypatch.setattr(head, "read_head", flaky)
    trigger = OdfHeadEventTrigger(
        dataset=DATASET, odf_conn_id="odf_watch", poll_interval=POLL, known_head=start
    )
    with capture_logs() as logs:
        payload = asyncio.run(first_event(trigger, during=lambda: commit(repo, 1), after=0.3))
    assert payload["prev_head"] == start and payload["head"] == str(repo.dataset(DATASET).head())
    [warning] = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert warning.startswith(f"{DATASET}: ConnectionResetError: connection reset by peer")

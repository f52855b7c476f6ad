"""Waiting for a dataset's head to move: `OdfHeadTrigger` (a deferred `OdfHeadChangedSensor`) and
`OdfHeadEventTrigger` (an `AssetWatcher`, so a DAG runs on every update of a dataset).

Both read `refs/head` through the repository of an `odf_repo` connection (local, S3, or a remote
served over HTTP); a dataset that does not exist yet simply has no head. The head "moved" when it
differs from the known one (with no known head: when there is any head at all).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.repo.repository import DatasetNotFoundError
from airflow_odf.odf.storage.url import open_store
from airflow_odf.triggers.base import OdfPollingTrigger, check_failure

#: Where `OdfHeadEventTrigger` keeps the last head it reported (Airflow 3.3 asset state store).
WATERMARK_KEY = "odf_head"


@dataclass(frozen=True)
class HeadReading:
    """A dataset's id and head, both None while the dataset does not exist."""

    dataset_id: str | None
    head: str | None


def read_head(odf_conn_id: str, dataset: str) -> HeadReading:
    """The current head of `dataset` in the repository of `odf_conn_id` (blocking I/O).

    An HTTP(S) connection is a remote served by the Simple Transfer Protocol (e.g. `odf serve`): its
    `<url>/<dataset>/refs/head` is read, and the dataset id is not known (None)."""
    hook = OdfRepoHook(odf_conn_id)
    if urlsplit(hook.repository_url()).scheme in ("http", "https"):
        remote = Dataset(open_store(hook.dataset_url(dataset), credentials=hook.store_credentials()))
        head = remote.head()
        return HeadReading(None, None if head is None else str(head))
    repo = hook.open_repository()
    try:
        did = repo.resolve(dataset)
    except DatasetNotFoundError:
        return HeadReading(None, None)
    head = repo.dataset_by_id(did).head()
    return HeadReading(str(did), None if head is None else str(head))


def head_moved(head: str | None, known_head: str | None) -> bool:
    """True when there is a head and it is not the known one (no known head: any head counts)."""
    return head is not None and head != known_head


def moved_payload(dataset: str, reading: HeadReading, prev_head: str | None) -> dict[str, Any]:
    """What a move reports, as event payload and as the sensors' XCom."""
    return {
        "status": "moved",
        "dataset": dataset,
        "dataset_id": reading.dataset_id,
        "head": reading.head,
        "prev_head": prev_head,
    }


class OdfHeadTrigger(OdfPollingTrigger):
    """Fires once, when the head of `dataset` differs from `known_head` (None: when any head exists).

    Events: `{"status": "moved", "dataset", "dataset_id", "head", "prev_head"}`,
    `{"status": "error", "dataset", "message"}` (a permanent failure), `{"status": "timeout", "dataset",
    "message"}`; transient failures are logged and the head read again (`OdfPollingTrigger`).
    """

    def __init__(self, *, known_head: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.known_head = known_head

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.OdfHeadTrigger", {**self.common_kwargs(), "known_head": self.known_head})

    def check(self) -> dict[str, Any] | None:
        reading = read_head(self.odf_conn_id, self.dataset)
        if not head_moved(reading.head, self.known_head):
            return None
        return moved_payload(self.dataset, reading, self.known_head)


class OdfHeadEventTrigger(BaseEventTrigger):
    """For `AssetWatcher`: fires every time the head of `dataset` moves, and keeps watching.

    The first head it compares with is the last one it reported (kept in the asset state store, so a
    triggerer restart neither repeats nor loses a move), else `known_head`, else the head it finds
    when it starts. The head is kept once the triggerer took the event: at least once, a move is
    never lost, and is reported twice only if the triggerer dies in between. Each event's payload is
    `{"status": "moved", "dataset", "dataset_id", "head", "prev_head"}`; Airflow stores it on the
    asset event as `extra["payload"]`. A read that fails transiently (network, HTTP 5xx) is logged at
    WARNING and tried again at the next poll; a permanent failure (a missing connection, an unreadable
    repository) raises with its message (an error event would start the DAGs): the triggerer logs it.

    :param dataset: the dataset's name (or `did:odf:` reference) in the repository of `odf_conn_id`.
    :param poll_interval: seconds between two reads of the head.
    :param known_head: the head already processed when the watcher is first started.
    """

    def __init__(
        self,
        *,
        dataset: str,
        odf_conn_id: str = OdfRepoHook.default_conn_name,
        poll_interval: float = 60.0,
        known_head: str | None = None,
    ) -> None:
        super().__init__()
        self.dataset = dataset
        self.odf_conn_id = odf_conn_id
        self.poll_interval = float(poll_interval)
        self.known_head = known_head

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{__name__}.OdfHeadEventTrigger",
            {
                "dataset": self.dataset,
                "odf_conn_id": self.odf_conn_id,
                "poll_interval": self.poll_interval,
                "known_head": self.known_head,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last = await self._load_watermark() or self.known_head
        watching = last is not None
        while True:
            reading = await self._read()
            if reading is not None and not watching:
                last, watching = reading.head, True
                self.log.info("%s: watching from head %s", self.dataset, last)
            elif reading is not None and head_moved(reading.head, last):
                yield TriggerEvent(moved_payload(self.dataset, reading, last))
                last = reading.head
                await self._save_watermark(last)
            await asyncio.sleep(self.poll_interval)

    async def _read(self) -> HeadReading | None:
        """The head now, or None after a transient failure (logged at WARNING); a permanent one raises."""
        try:
            return await asyncio.to_thread(read_head, self.odf_conn_id, self.dataset)
        except Exception as e:
            failure = check_failure(self.dataset, e)
            if not failure.transient:
                raise
            self.log.warning("%s (transient: reading again in %s s)", failure.message, self.poll_interval)
            return None

    async def _load_watermark(self) -> str | None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return None
        try:
            value = await store.aget(WATERMARK_KEY)
        except ValueError:  # several assets share this watcher: no single place to keep it
            self.log.info("%s: watched by several assets; the last head is kept in memory", self.dataset)
            return None
        return value if isinstance(value, str) and value else None

    async def _save_watermark(self, head: str | None) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is not None and head:
            with contextlib.suppress(ValueError):
                await store.aset(WATERMARK_KEY, head)

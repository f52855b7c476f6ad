"""Commits in flight and collections in progress, told to each other through the dataset's own store.

A commit references objects that may exist already (re-used data after a reset, a pull of blocks seen
before): it skips storing them, so their age says nothing about their use, and `odf gc` could delete
one between the commit's object step and its head move. An object store has no locks and no
transactions, so the two tell each other instead, each writing before it reads what the other writes:

- a commit *declares* the keys it is about to reference (`info/commits/<token>`) before it looks at
  or stores any of them, then lists the collections' marks;
- a collection *marks* the dataset (`info/gc/<token>`) before it reads the declarations and the head,
  and deletes only what neither references.

On a strongly consistent store (a local disk, S3) at least one of the two sees the other: either the
collection sees the declaration and keeps those keys, or the commit sees the mark, waits until that
collection is done deleting, and stores again whatever of its keys it deleted — before its head moves.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from typing import Any

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.storage.store import ObjectStore

INTENTS_PREFIX = "info/commits"
GC_MARKS_PREFIX = "info/gc"
#: A declaration this old (and older than `--min-age`) is of a commit that died: gc removes it.
INTENT_LEASE_SECONDS = 3600.0
#: A collection rewrites its mark at least this often while it deletes; an older mark is of a dead one.
GC_MARK_LEASE_SECONDS = 120.0
_MAX_WAIT_STEP = 0.5


def holder_record(**extra: Any) -> bytes:
    """Who wrote a declaration, mark or lock, and when (seconds since the epoch, this host's clock)."""
    record = {"host": socket.gethostname(), "pid": os.getpid(), "written": time.time(), **extra}
    return json.dumps(record, sort_keys=True).encode()


def read_record(raw: bytes) -> dict[str, Any] | None:
    """A record `holder_record` wrote; None when the bytes are not one."""
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("written"), (int, float)):
        return None
    return record


def record_age(raw: bytes | None, now: float) -> float:
    """How old a record is; infinite when it is gone or not a record (nothing to wait for)."""
    record = None if raw is None else read_record(raw)
    return float("inf") if record is None else now - float(record["written"])


class Intent:
    """A commit's declaration, and the collections' marks it saw once the declaration was stored."""

    def __init__(self, store: ObjectStore, marks: list[str]) -> None:
        self.store = store
        self.marks = marks

    def settle(self, keys: Collection[str], restore: Callable[[list[str]], None]) -> None:
        """Before the head moves: waits until every collection that may have missed the declaration is
        done, then has `restore` store again those of `keys` one of them deleted. Nothing to do when no
        collection was marked (the usual case: no request beyond the listing made at declaration)."""
        if not self.marks:
            return
        delay = 0.01
        while any(
            record_age(self.store.get_or_none(m), time.time()) < GC_MARK_LEASE_SECONDS for m in self.marks
        ):
            time.sleep(delay)
            delay = min(delay * 2, _MAX_WAIT_STEP)
        self.marks = []  # those collections are done: nothing stored from now on can be deleted by them
        missing = [key for key in keys if not self.store.exists(key)]
        if missing:
            restore(missing)


@contextlib.contextmanager
def declaring(store: ObjectStore, keys: Collection[str]) -> Iterator[Intent]:
    """Declares that a commit is about to reference `keys` for as long as the block runs."""
    key = f"{INTENTS_PREFIX}/{uuid.uuid4().hex}"
    store.put(key, holder_record(keys=sorted(keys)))
    try:
        yield Intent(store, list(store.list(GC_MARKS_PREFIX)))  # listed after the declaration is stored
    finally:
        with contextlib.suppress(OSError, OdfError):
            store.delete(key)


class Marked:
    """A collection's mark on a dataset; `refresh` keeps it alive through a long deletion."""

    def __init__(self, store: ObjectStore, key: str) -> None:
        self.store = store
        self.key = key
        self.written = 0.0

    def refresh(self) -> None:
        if time.time() - self.written >= GC_MARK_LEASE_SECONDS / 4:
            self.store.put(self.key, holder_record())
            self.written = time.time()


@contextlib.contextmanager
def collecting(store: ObjectStore) -> Iterator[Marked]:
    """Marks the dataset as being collected for as long as the block runs."""
    mark = Marked(store, f"{GC_MARKS_PREFIX}/{uuid.uuid4().hex}")
    mark.refresh()
    try:
        yield mark
    finally:
        with contextlib.suppress(OSError, OdfError):
            store.delete(mark.key)


def declared_keys(store: ObjectStore, min_age_seconds: float) -> tuple[set[str], int]:
    """`(keys, commits)`: what the commits in flight declared, and how many there are. Declarations
    older than both `min_age_seconds` and `INTENT_LEASE_SECONDS` are of dead commits: removed, not
    counted. An unreadable one stops the collection (OdfError naming it): what it keeps is unknown."""
    keys: set[str] = set()
    commits = 0
    now = time.time()
    for key in list(store.list(INTENTS_PREFIX)):
        raw = store.get_or_none(key)
        if raw is None:  # its commit ended meanwhile
            continue
        record = read_record(raw)
        declared = None if record is None else record.get("keys")
        if not isinstance(declared, list) or not all(isinstance(k, str) for k in declared):
            raise OdfError(
                f"{key} is not a commit's declaration, so what it keeps is unknown; "
                "remove it if no commit of the dataset is running"
            )
        if record_age(raw, now) >= max(min_age_seconds, INTENT_LEASE_SECONDS):
            store.delete(key)
            continue
        keys.update(declared)
        commits += 1
    return keys, commits

"""One operation at a time does engine work on a dataset; overlapping runs wait for it instead of doing
the same work only to lose the race for the head (issue 36: three overlapping runs each ran the whole
engine work, and two of them then committed nothing).

An operation (a pull, a push, a transform) that is about to start engine work planned from a state
(`EngineClaim.before_engine_work`) first claims the dataset: a file `claims/<dataset>` in the
repository's scratch space, created exclusively and kept until the operation ends, across its
iterations and batches. An operation finding another one's live claim waits for it to end, reading
nothing but the claim; once it holds the claim it re-reads the head — the cheap re-check before the
expensive part — and when the head moved (the other operation committed), `HeadMoved` makes it plan
again from the new head, which usually finds the work done ("up to date") without running the engine.
An operation that needs no engine work (up to date from the start) never claims anything.

A claim is live while its holder touches it (every `HEARTBEAT_SECONDS`); one untouched for
`STALE_SECONDS` (its holder was killed) is taken over — at once when it names a process of this machine
that no longer exists (a worker killed and its task retried). Claims are an optimisation, never a lock the
chain relies on: the compare-and-swap of `refs/head` alone decides which commit lands, so a claim
missed (writers on machines that share no scratch space, a repository in S3 written from several
workers) costs only the duplicated work it would have saved.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.storage.store import ConflictError
from airflow_odf.utils.background import BackgroundWork

HEARTBEAT_SECONDS = 2.0
STALE_SECONDS = 30.0  # 15 heartbeats missed: the holder is gone (a busy machine delays a touch by seconds)
POLL_SECONDS = 0.2  # how often a waiting operation looks at the claim: one stat


class HeadMoved(ConflictError):
    """Another writer moved the head past the one this operation planned from, found before its engine
    work started: plan again from the new head (`reconcile` does, without counting a lost race)."""


def claims_dir(work_dir: Path) -> Path:
    return work_dir / "claims"


class EngineClaim:
    """The claim of one operation on its dataset, taken at its first engine work and released when the
    `with` block (the operation) ends, committed or not."""

    def __init__(self, work_dir: Path, dataset: Dataset, what: str, log: Callable[[str], None]) -> None:
        self.dataset = dataset
        self.what = what
        self.log = log
        self.path: Path | None = None
        self._work_dir = work_dir
        self._token = f"{uuid.uuid4().hex} {socket.gethostname()} {os.getpid()}"
        self._heartbeat: _Heartbeat | None = None

    def before_engine_work(self, state: ChainState) -> None:
        """Claims the dataset (waiting while another operation holds it), then HeadMoved when its head
        is no longer `state`'s — another writer committed since this operation planned."""
        if self._heartbeat is None:
            self.path = claims_dir(self._work_dir) / str(state.dataset_id).removeprefix("did:odf:")
            waited = False
            while not _claim(self.path, self._token):
                if not waited:
                    self.log(f"{self.what}: another run is doing engine work on it; waiting for it to end")
                    waited = True
                time.sleep(POLL_SECONDS)
            self._heartbeat = _Heartbeat(self.path).__enter__()
        found = self.dataset.head()
        if found != state.head:
            raise HeadMoved(f"{self.what}: another writer moved the head to {found} before the engine work")

    def __enter__(self) -> EngineClaim:
        return self

    def __exit__(
        self, _type: type[BaseException] | None, _value: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if self._heartbeat is not None:
            self._heartbeat.__exit__(None, None, None)
            self._heartbeat = None
            assert self.path is not None
            _release(self.path, self._token)


def _claim(path: Path, token: str) -> bool:
    """Creates the claim file holding `token`; False while another live operation holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):  # once more after taking over a stale claim
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            if not _take_over_if_stale(path):
                return False
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token)
        return True
    return False


def _take_over_if_stale(path: Path) -> bool:
    """Removes a claim whose holder stopped touching it or is a process of this machine that is gone
    (renamed first: of two operations finding it stale, one removes it); True when it is gone."""
    try:
        if time.time() - path.stat().st_mtime < STALE_SECONDS and not _holder_gone(path):
            return False
        aside = path.with_name(f"{path.name}.stale-{uuid.uuid4().hex}")
        os.rename(path, aside)
        aside.unlink(missing_ok=True)
    except FileNotFoundError:
        pass  # released meanwhile
    return True


def _holder_gone(path: Path) -> bool:
    """Does the claim name a process of this machine that no longer runs?"""
    try:
        _, host, pid = path.read_text(encoding="utf-8").split(" ")
        if host != socket.gethostname():
            return False
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError):  # being written, another format, or a process not ours to signal
        return False
    return False


def _release(path: Path, token: str) -> None:
    """Removes the claim if it is still this operation's (one taken over as stale is not)."""
    with contextlib.suppress(OSError):
        if path.read_text(encoding="utf-8") == token:
            path.unlink()


class _Heartbeat(BackgroundWork):
    """Touches the claim while the operation runs, so waiting ones know its holder is alive."""

    def __init__(self, path: Path) -> None:
        super().__init__("odf-claim-heartbeat", join=False)
        self._path = path

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            with contextlib.suppress(OSError):
                os.utime(self._path)

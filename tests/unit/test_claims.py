"""Claims (`chain.claims`): operations sharing a scratch space do engine work on a dataset one at a
time; the others wait for it to end and plan again when it committed, or take over from a holder that
died. No Spark: the other writer's commit is a real one (SetInfo)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_odf.odf.chain import claims
from airflow_odf.odf.chain.claims import EngineClaim, HeadMoved, claims_dir
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.reconcile import MAX_ATTEMPTS, Reconciliation, reconciling_from
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.format import model as m
from airflow_odf.odf.repo.repository import Repository


@pytest.fixture
def dataset(tmp_path: Path) -> Dataset:
    repo = Repository.init(tmp_path / "repo")
    repo.add(m.DatasetSnapshot(name="d", kind=m.DatasetKind.ROOT, metadata=[]))
    return repo.dataset("d")


def _other_writer(dataset: Dataset, text: str = "the other writer") -> None:
    Dataset(dataset.store).commit([m.SetInfo(description=text)])


def _claim(dataset: Dataset, work: Path, logs: list[str] | None = None) -> EngineClaim:
    return EngineClaim(work, Dataset(dataset.store), "d", (logs if logs is not None else []).append)


def test_a_moved_head_is_found_before_the_engine_work(dataset: Dataset, tmp_path: Path) -> None:
    state = dataset.state()
    _other_writer(dataset)
    with _claim(dataset, tmp_path / "work") as claim:
        with pytest.raises(HeadMoved, match=f"moved the head to {dataset.head()} before the engine work"):
            claim.before_engine_work(state)
        claim.before_engine_work(dataset.state())  # planned again from the new head: goes on
        assert claim.path is not None and claim.path.exists()
    assert list(claims_dir(tmp_path / "work").iterdir()) == []  # released when the operation ends


def _holder_and_waiter(dataset: Dataset, work: Path, commit: bool) -> tuple[list[str], list[str]]:
    """One operation holds the claim while a second one asks for it; the holder commits (or not) and
    ends. What the second one then did, and what it logged."""
    state, asked, logs, outcome = dataset.state(), threading.Event(), [], []

    def second() -> None:
        with _claim(dataset, work, logs) as claim:
            asked.set()
            try:
                claim.before_engine_work(state)
                outcome.append("ran the engine work")
            except HeadMoved:
                outcome.append("planned again")

    with _claim(dataset, work) as holder:
        holder.before_engine_work(state)
        waiter = threading.Thread(target=second)
        waiter.start()
        asked.wait(30)
        while not logs:  # the waiter found the claim
            time.sleep(0.01)
        if commit:
            _other_writer(dataset)
        assert outcome == []  # still waiting while the holder runs
    waiter.join(30)
    return outcome, logs


def test_an_operation_waits_for_the_holder_and_plans_again_from_its_commit(
    dataset: Dataset, tmp_path: Path
) -> None:
    outcome, logs = _holder_and_waiter(dataset, tmp_path / "work", commit=True)
    assert outcome == ["planned again"]
    assert logs == ["d: another run is doing engine work on it; waiting for it to end"]
    assert list(claims_dir(tmp_path / "work").iterdir()) == []


def test_a_holder_that_committed_nothing_lets_the_waiter_do_the_work(
    dataset: Dataset, tmp_path: Path
) -> None:
    outcome, _ = _holder_and_waiter(dataset, tmp_path / "work", commit=False)
    assert outcome == ["ran the engine work"]


def test_a_claim_its_holder_stopped_touching_is_taken_over(
    dataset: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder killed (SIGKILL) leaves its claim; untouched for STALE_SECONDS, it is taken over."""
    state, work = dataset.state(), tmp_path / "work"
    monkeypatch.setattr(claims, "STALE_SECONDS", 2.0)
    left = claims_dir(work) / str(state.dataset_id).removeprefix("did:odf:")
    left.parent.mkdir(parents=True)
    left.write_text("a dead holder")
    old = time.time() - 3.0
    os.utime(left, (old, old))
    with _claim(dataset, work) as claim:
        claim.before_engine_work(state)
        assert left.read_text() != "a dead holder"
    assert not left.exists()


def test_waiting_for_other_writers_is_not_a_lost_race_and_has_no_limit(dataset: Dataset) -> None:
    """Each time the head moved before the engine work the operation plans again, however often: each
    means another writer made progress (a backfill it trails batch after batch)."""
    record, calls = Reconciliation(), []

    def attempt(state: ChainState) -> str:
        calls.append(state.head)
        if len(calls) <= MAX_ATTEMPTS + 2:
            _other_writer(dataset, f"batch {len(calls)}")
            raise HeadMoved("d: another writer moved the head")
        return "done"

    assert reconciling_from(dataset, dataset.state(), attempt, what="d", record=record) == "done"
    assert len(calls) == MAX_ATTEMPTS + 3 and len(set(calls)) == len(calls)  # each from a new head
    assert record.heads_found == [str(h) for h in calls[1:]]


def test_a_claim_of_a_process_that_is_gone_is_taken_over_at_once(dataset: Dataset, tmp_path: Path) -> None:
    """A worker killed while it held the claim, its task retried on the same machine: no wait."""
    state, work = dataset.state(), tmp_path / "work"
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    left = claims_dir(work) / str(state.dataset_id).removeprefix("did:odf:")
    left.parent.mkdir(parents=True)
    left.write_text(f"0123abcd {socket.gethostname()} {gone.stdout.strip()}")  # touched just now
    with _claim(dataset, work) as claim:
        claim.before_engine_work(state)
        assert str(os.getpid()) in left.read_text()

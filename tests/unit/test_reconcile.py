"""Writers that lose the compare-and-swap re-plan from the new head instead of failing (no Spark).

The race is made deterministic: a hook on `Dataset.commit` lets "another writer" commit just before
this one (between its plan and its commit), or holds racing threads at a barrier until each has
planned from the same head. Ingest and transform races, which need the engine, are in
tests/integration/test_overlapping_writers.py.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.chain import reconcile
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.chain.reconcile import MAX_ATTEMPTS, Reconciliation, reconciling
from airflow_odf.odf.format import model as m
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.repo.schema_migration import apply_schema, migrate_schema
from airflow_odf.odf.storage.store import ConflictError
from airflow_odf.odf.transform.execute import TransformOptions, run_transform
from airflow_odf.odf.transform.plan import plan_transform
from tests.unit.test_schema_migration import CONVERTED, _legacy_dataset
from tests.unit.test_transform_plan import add_data, derivative, execute, root

COMMIT = Dataset.commit  # the real commit, for "the other writer"


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return Repository.init(tmp_path / "repo")


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The jittered pauses between attempts, recorded instead of slept."""
    pauses: list[float] = []
    monkeypatch.setattr(reconcile.time, "sleep", pauses.append)
    return pauses


@pytest.fixture
def another_writer_first(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[Any]]:
    """`another_writer_first(*actions)`: before each of the next commits, the next action runs (another
    writer commits); returns the list of the heads those actions left."""

    def arm(*actions: Callable[[], Multihash | None]) -> list[Any]:
        pending = list(actions)
        heads: list[Any] = []

        def commit(self: Dataset, *args: Any, **kwargs: Any) -> Any:
            if pending:
                heads.append(str(pending.pop(0)()))
            return COMMIT(self, *args, **kwargs)

        monkeypatch.setattr(Dataset, "commit", commit)
        return heads

    return arm


def _other(dataset: Dataset, *events: Any) -> Callable[[], Multihash | None]:
    """Another writer: its own Dataset object on the same store, committing `events`."""
    return lambda: COMMIT(Dataset(dataset.store), list(events)).new_head


def _events(dataset: Dataset) -> list[Any]:
    return [b.event for _, b in reversed(list(dataset.iter_blocks()))]


# --------------------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------------------


def test_an_attempt_that_loses_is_tried_again_and_the_heads_found_are_recorded(
    no_pauses: list[float],
) -> None:
    heads = iter(["h1", "h2"])
    calls: list[int] = []
    lines: list[str] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConflictError("head is X, expected Y")
        return "done"

    record = Reconciliation()
    found = reconciling(attempt, what="ds", head=lambda: next(heads), record=record, log=lines.append)  # type: ignore[arg-type,return-value]
    assert found == "done" and len(calls) == 3
    assert record.as_dict() == {"lost_races": 2, "heads_found": ["h1", "h2"]}
    assert lines == [
        "ds: another writer moved the head to h1 first; planning again from it (attempt 2 of 5)",
        "ds: another writer moved the head to h2 first; planning again from it (attempt 3 of 5)",
    ]
    assert len(no_pauses) == 2 and 0 <= no_pauses[0] <= 0.1 and 0 <= no_pauses[1] <= 0.2


def test_the_attempts_are_bounded_and_the_last_conflict_is_named() -> None:
    record = Reconciliation()

    def attempt() -> None:
        raise ConflictError("refs/head changed concurrently: expected a, found b")

    with pytest.raises(ConflictError) as err:
        reconciling(attempt, what="ds", head=lambda: None, record=record)
    assert str(err.value) == (
        f"ds: lost the race for the head to other writers {MAX_ATTEMPTS} times; "
        "last: refs/head changed concurrently: expected a, found b"
    )
    assert record.lost_races == MAX_ATTEMPTS


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def attempt() -> None:
        calls.append(1)
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        reconciling(attempt, what="ds", head=lambda: None, record=Reconciliation())
    assert calls == [1]


# --------------------------------------------------------------------------------------------------
# schema changes
# --------------------------------------------------------------------------------------------------


def test_a_migration_that_another_writer_made_first_ends_with_nothing_to_append(
    repo: Repository, tmp_path: Path, another_writer_first: Callable[..., list[Any]]
) -> None:
    dataset = _legacy_dataset(repo, tmp_path)
    heads = another_writer_first(_other(dataset, m.SetDataSchema(schema=CONVERTED)))

    result = migrate_schema(dataset)

    assert not result.changed and result.message == "legacy: the schema is already in ODF form"
    assert result.reconciliation.as_dict() == {"lost_races": 1, "heads_found": heads}
    assert heads == [str(dataset.head())]
    assert sum(isinstance(e, m.SetDataSchema) and e.schema is not None for e in _events(dataset)) == 1
    assert verify_integrity(dataset) == []


def test_a_schema_change_is_decided_again_on_top_of_the_other_writers_block(
    repo: Repository, tmp_path: Path, another_writer_first: Callable[..., list[Any]]
) -> None:
    dataset = _legacy_dataset(repo, tmp_path)
    migrate_schema(dataset)
    described = dataclasses.replace(
        CONVERTED,
        fields=[
            dataclasses.replace(f, extra={"opendatafabric.org/description": "the city"})
            if f.name == "city"
            else f
            for f in CONVERTED.fields
        ],
    )
    heads = another_writer_first(_other(dataset, m.SetInfo(description="cities")))

    result = apply_schema(dataset, described)

    assert result.changed and result.reconciliation.heads_found == heads
    assert result.commit is not None and result.commit.old_head == Multihash.parse(heads[0])
    assert _events(dataset)[-2:] == [m.SetInfo(description="cities"), m.SetDataSchema(schema=described)]
    assert verify_integrity(dataset) == []


def test_three_threads_changing_one_schema_all_commit_once(repo: Repository, tmp_path: Path) -> None:
    """Each thread plans from the same head (a barrier holds them until all have), then they commit:
    one wins each round, the others plan again from its head."""
    dataset = _legacy_dataset(repo, tmp_path)
    migrate_schema(dataset)
    barrier = threading.Barrier(3, timeout=30)
    first_commit = threading.local()

    def commit(self: Dataset, *args: Any, **kwargs: Any) -> Any:
        if not getattr(first_commit, "done", False):
            first_commit.done = True
            barrier.wait()
        return COMMIT(self, *args, **kwargs)

    def schema(text: str) -> m.DataSchema:
        fields = [
            dataclasses.replace(f, extra={"opendatafabric.org/description": text}) if f.name == "city" else f
            for f in CONVERTED.fields
        ]
        return dataclasses.replace(CONVERTED, fields=fields)

    results: dict[str, Any] = {}

    def change(text: str) -> None:
        results[text] = apply_schema(Dataset(dataset.store), schema(text), "legacy")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Dataset, "commit", commit)
        threads = [threading.Thread(target=change, args=(t,)) for t in ("one", "two", "three")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)

    assert sorted(results) == ["one", "three", "two"]
    assert all(r.changed for r in results.values())
    assert sorted(r.reconciliation.lost_races for r in results.values())[0] == 0
    assert sum(r.reconciliation.lost_races for r in results.values()) >= 2  # two lost the first round
    committed = [e for e in _events(dataset)[-3:] if isinstance(e, m.SetDataSchema)]
    assert sorted(c.schema.fields[4].extra["opendatafabric.org/description"] for c in committed) == [
        "one",
        "three",
        "two",
    ]
    assert verify_integrity(dataset) == []


# --------------------------------------------------------------------------------------------------
# datasets created from manifests by overlapping runs
# --------------------------------------------------------------------------------------------------


def test_threads_creating_one_dataset_end_with_one_dataset(repo: Repository) -> None:
    snapshot = m.DatasetSnapshot(
        name="made.twice",
        kind=m.DatasetKind.ROOT,
        metadata=[m.SetInfo(description="made by overlapping runs")],
    )
    barrier = threading.Barrier(3, timeout=30)
    results: list[Any] = []
    records = [Reconciliation() for _ in range(3)]

    def create(record: Reconciliation) -> None:
        def checked(s: m.DatasetSnapshot) -> m.DatasetSnapshot:
            if not record.lost_races:  # the first attempts all start together
                barrier.wait()
            return s

        results.append(Repository.open(repo.root).add_reconciling(snapshot, record, check=checked))

    threads = [threading.Thread(target=create, args=(r,)) for r in records]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert len(results) == 3
    assert [r.created for r in results].count(True) == 1
    assert len({r.dataset_id for r in results}) == 1  # all report the one named dataset
    dataset = repo.dataset("made.twice")
    assert str(dataset.state().dataset_id) == str(results[0].dataset_id)
    assert [type(e) for e in _events(dataset)] == [m.Seed, m.SetInfo]
    assert all(r.commit.new_blocks == [] for r in results if not r.created)


# --------------------------------------------------------------------------------------------------
# transforms: a pin another run already processed
# --------------------------------------------------------------------------------------------------


class _NoEngine:
    """A runner that must not be called: the transform has nothing to run."""

    def run(self, request_json: str, work_dir: Path) -> str:
        raise AssertionError("the engine was asked to run")


def test_a_transform_pinned_to_what_another_run_processed_is_up_to_date(
    repo: Repository, tmp_path: Path
) -> None:
    """Run A's transform processed up to A's ingest head; run B's transform, pinned to its own (older)
    ingest head, finds nothing new instead of failing."""
    a = root(repo, "root.a")
    older = add_data(a, 2)
    add_data(a, 2)
    deriv = derivative(repo, [("root.a", "a")])
    head = execute(deriv, plan_transform(repo, deriv).batches[0])  # run A's transform
    lines: list[str] = []
    options = TransformOptions(work_dir=tmp_path / "work", pinned_heads={"a": str(older)}, log=lines.append)

    result = run_transform(repo, "deriv", _NoEngine(), options)  # type: ignore[arg-type]

    assert result.up_to_date and result.new_head == str(head) and result.new_blocks == []
    assert any(f"is pinned to {older}, which was already processed" in line for line in lines)
    assert deriv.head() == head

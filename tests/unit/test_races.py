"""Races between renames, deletes, commits and `odf gc` (issue 34): deterministic tests that stop inside
each window and run the competing operation there, and bounded concurrent loops (threads, 200 rounds)
that check every round: one name per dataset or none, no dangling name, no lost record, the chain
intact. The same loops run on S3 in tests/sharing/test_s3_races.py."""

from __future__ import annotations

import collections
import json
import random
import threading
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.chain import in_flight, integrity
from airflow_odf.odf.chain.dataset import Dataset, StagedObject
from airflow_odf.odf.chain.integrity import collect_garbage, verify_integrity
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.repo.repository import (
    ALIAS_KEY,
    NAME_LOCK_KEY,
    NAME_LOCK_LEASE_SECONDS,
    Repository,
)
from airflow_odf.odf.storage.store import ConflictError
from tests.unit.test_dataset import SCHEMA, add_data

ROUNDS = 200


def create(repo: Repository, name: str) -> DatasetId:
    """A root dataset with a schema: what ingests append to."""
    snapshot = model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=[SCHEMA])
    return repo.add(snapshot).dataset_id


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return Repository.init(tmp_path / "repo")


def intercept(
    monkeypatch: pytest.MonkeyPatch, cls: type, method: str, when: Callable[..., bool]
) -> list[Any]:
    """Runs the callbacks appended to the returned list (once each, first in first out) just before
    `cls.method` is called with arguments for which `when` holds: the window another operation runs in."""
    pending: list[Callable[[], Any]] = []
    original = getattr(cls, method)

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if pending and when(*args, **kwargs):
            pending.pop(0)()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, method, wrapper)
    return pending


def names(repo: Repository) -> dict[DatasetId, list[str]]:
    """Every dataset's names; fails on an alias file that names no dataset with a head (dangling)."""
    out: dict[DatasetId, list[str]] = collections.defaultdict(list)
    for entry in repo.scan():
        assert entry.dataset_id is not None, entry.error
        assert repo.dataset_by_id(entry.dataset_id).head() is not None, f"{entry.name} dangles"
        out[entry.dataset_id].append(entry.name)
    return dict(out)


def assert_one_name(repo: Repository, did: DatasetId, name: str | None) -> None:
    """`did` is named `name` alone (None: it has no name), its folder records it, and no lock is left."""
    folder = repo.dataset_by_id(did).store
    assert names(repo).get(did, []) == ([] if name is None else [name])
    assert folder.get_or_none(ALIAS_KEY) == (None if name is None else name.encode())
    assert folder.get_or_none(NAME_LOCK_KEY) is None


# ----- rename and delete, stopped inside each window -----


def refused(operation: Callable[..., Any], *args: Any) -> None:
    """The operation run inside another's window fails as a conflict (exit 3)."""
    with pytest.raises(ConflictError, match="being changed by another operation"):
        operation(*args)


def test_a_rename_inside_another_renames_window_fails_whole(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: both used to take their new name and keep it. The second one now meets the
    first one's lock and changes nothing."""
    did = create(repo, "a")
    store_type = type(repo.store)
    window = intercept(monkeypatch, store_type, "compare_and_swap", lambda key, old, new: key == "aliases/b")
    errors: list[OdfError] = []

    def second() -> None:
        with pytest.raises(ConflictError, match="being changed by another operation") as e:
            repo.rename("a", "c")
        errors.append(e.value)

    window.append(second)
    assert repo.rename("a", "b") == did
    assert errors and not window
    assert_one_name(repo, did, "b")


def test_a_delete_inside_a_renames_window_fails_and_the_rename_completes(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    did = create(repo, "a")
    window = intercept(
        monkeypatch, type(repo.store), "compare_and_swap", lambda key, old, new: key == "aliases/a"
    )
    window.append(partial(refused, repo.delete, ["a"]))
    repo.rename("a", "b")
    assert not window
    assert_one_name(repo, did, "b")


def test_a_rename_inside_a_deletes_window_fails_and_the_delete_completes(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    did = create(repo, "a")
    window = intercept(
        monkeypatch, type(repo.store), "compare_and_swap", lambda key, old, new: key == "aliases/a"
    )
    window.append(partial(refused, repo.rename, "a", "b"))
    assert repo.delete(["a"]) == [("a", did)]
    assert not window
    assert_one_name(repo, did, None)
    assert main(["gc", "--min-age", "0", "--repo", str(repo.root)]) == 0
    assert not (repo.root / "datasets" / str(did).removeprefix("did:odf:")).exists()


@pytest.mark.parametrize("first", ["delete", "rename"])
def test_an_operation_that_resolved_the_old_name_before_another_finished_changes_nothing(
    repo: Repository, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """The window between resolving a name and locking it: the other operation ran whole in it."""
    did = create(repo, "a")
    window = intercept(monkeypatch, Repository, "_lock_names", lambda did, operation: True)
    if first == "delete":
        window.append(lambda: repo.delete(["a"]))
        with pytest.raises(ConflictError, match="'a' was renamed or deleted meanwhile; nothing was renamed"):
            repo.rename("a", "b")
        assert_one_name(repo, did, None)
    else:
        window.append(lambda: repo.rename("a", "b"))
        with pytest.raises(ConflictError, match="'a' was renamed or deleted meanwhile; nothing was deleted"):
            repo.delete(["a"])
        assert_one_name(repo, did, "b")


def test_a_renaming_process_that_died_leaves_a_lock_the_next_rename_takes_over(
    repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    """A crash after the new name was taken: both names and a lock. While the lock is young a rename
    is refused (exit 3, one line naming the holder); once it has expired, running it again completes it."""
    did = create(repo, "a")
    folder = repo.dataset_by_id(did).store
    folder.put(NAME_LOCK_KEY, in_flight.holder_record(operation="rename a to b", token="dead"))
    repo.store.put("aliases/b", str(did).encode())
    assert main(["rename", "a", "b", "--repo", str(repo.root)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(rename a to b, pid " in err and "try again" in err
    record = json.loads(folder.get(NAME_LOCK_KEY))
    folder.put(
        NAME_LOCK_KEY, json.dumps({**record, "written": time.time() - NAME_LOCK_LEASE_SECONDS - 1}).encode()
    )
    assert main(["rename", "a", "b", "--repo", str(repo.root)]) == 0
    assert_one_name(repo, did, "b")


# ----- gc and commits that re-use old objects, stopped inside each window -----


def reset_leaving_garbage(dataset: Dataset, folder: Path) -> StagedObject:
    """Ingests a slice, then resets before it: its data object is garbage, as old as gc wants (the
    tests run gc with --min-age 0). Returns a fresh staged copy of the same content: what ingesting
    the same data again stages."""
    base = dataset.head()
    assert base is not None
    staged, event = slice_of(dataset, folder, b"the same rows " * 50)
    dataset.commit([event], objects=[staged])
    dataset.reset(base)
    return slice_of(dataset, folder, b"the same rows " * 50)[0]


def slice_of(dataset: Dataset, folder: Path, content: bytes) -> tuple[StagedObject, model.AddData]:
    """A staged data file of `content` and the AddData that appends it (records: its length / 10)."""
    folder.mkdir(parents=True, exist_ok=True)
    physical = Multihash.sha3_256(content)
    path = folder / f"{physical}-{time.monotonic_ns()}"
    path.write_bytes(content)
    return StagedObject(f"data/{physical}", path), add_data(
        dataset.state(), physical, len(content), len(content) // 10
    )


def test_gc_inside_a_commits_window_keeps_the_old_object_it_re_uses(
    repo: Repository, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """gc runs whole between the commit's object step (the old object exists: skipped) and its head
    move: it reads the commit's declaration and keeps the object."""
    dataset = repo.dataset_by_id(create(repo, "a"))
    staged = reset_leaving_garbage(dataset, tmp_path / "staging")
    _, event = slice_of(dataset, tmp_path / "staging", b"the same rows " * 50)
    removed: list[list[str]] = []
    window = intercept(monkeypatch, type(dataset.store), "put", lambda key, data: key.startswith("blocks/"))
    window.append(lambda: removed.append(collect_garbage(dataset, 0)))
    dataset.commit([event], objects=[staged])
    assert len(removed) == 1 and staged.key not in removed[0]  # (the reset's orphan block went)
    assert dataset.store.exists(staged.key)
    assert verify_integrity(dataset) == []
    assert collect_garbage(dataset, 0) == []


def gc_inside_a_commits_window(repo: Repository, monkeypatch: pytest.MonkeyPatch, staging: Path) -> DatasetId:
    """The issue's case: gc read the declarations before the commit declared, so it deletes the old
    object the commit skipped; the commit saw gc's mark, waits until gc is done, stores the object
    again, then moves its head. Returns the dataset's DID (named `a`)."""
    did = create(repo, "a")
    dataset = repo.dataset_by_id(did)
    staged = reset_leaving_garbage(dataset, staging)
    _, event = slice_of(dataset, staging, b"the same rows " * 50)
    gc_read, commit_stored = threading.Event(), threading.Event()
    real_declared, real_settle = integrity.declared_keys, in_flight.Intent.settle

    def declared_then_wait(*args: Any) -> Any:
        out = real_declared(*args)
        gc_read.set()
        assert commit_stored.wait(30)
        return out

    def stored_then_settle(self: in_flight.Intent, *args: Any) -> None:
        assert self.marks, "the commit saw gc's mark"
        commit_stored.set()
        real_settle(self, *args)

    monkeypatch.setattr(integrity, "declared_keys", declared_then_wait)
    monkeypatch.setattr(in_flight.Intent, "settle", stored_then_settle)
    removed: list[list[str]] = []
    gc = threading.Thread(target=lambda: removed.append(collect_garbage(dataset, 0)))
    gc.start()
    assert gc_read.wait(30)
    result = dataset.commit([event], objects=[staged])
    gc.join(30)
    assert staged.key in removed[0]  # gc did delete it inside the window ...
    assert dataset.store.exists(staged.key)  # ... and the commit stored it again before its head moved
    assert dataset.head() == result.new_head
    assert verify_integrity(dataset) == []
    return did


def test_a_commit_inside_gcs_window_stores_again_what_gc_deleted(
    repo: Repository, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gc_inside_a_commits_window(repo, monkeypatch, tmp_path / "staging")


def test_gc_keeps_what_a_pull_in_flight_re_uses(
    repo: Repository, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A pull after a reset brings the same blocks and data again: they exist at the destination
    (garbage), so the pull transfers nothing; gc inside that window keeps them."""
    from airflow_odf.odf.sharing.sync import sync

    source = repo.dataset_by_id(create(repo, "a"))
    staged, event = slice_of(source, tmp_path / "staging", b"pulled rows " * 40)
    source.commit([event], objects=[staged])
    destination = Dataset(repo.store.child("copy"))
    sync(source, destination)
    destination.reset(
        next(h for h, b in destination.iter_blocks() if isinstance(b.event, model.SetDataSchema))
    )
    window = intercept(
        monkeypatch, type(destination.store), "compare_and_swap", lambda key, old, new: key == "refs/head"
    )
    window.append(lambda: collect_garbage(destination, 0))
    result = sync(source, destination)
    assert result.objects_transferred == 0 and not window
    assert verify_integrity(destination) == []


# ----- concurrent loops -----


messages: list[str] = []  # the errors of the last round, for the assertions' messages


def run_at_once(operations: dict[str, Callable[[], Any]]) -> dict[str, str]:
    """Runs the operations in threads released together; each one's outcome: "ok", or the name of the
    OdfError it raised (anything else fails the test)."""
    barrier = threading.Barrier(len(operations))
    outcomes: dict[str, str] = {}
    failures: list[BaseException] = []
    messages.clear()

    def run(name: str, operation: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            operation()
            outcomes[name] = "ok"
        except OdfError as e:
            outcomes[name] = type(e).__name__
            messages.append(f"{name}: {e}")
        except BaseException as e:  # reported by the test
            failures.append(e)

    threads = [threading.Thread(target=run, args=item) for item in operations.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, "".join(traceback.format_exception(failures[0]))
    return outcomes


def collect_all(repo: Repository) -> None:
    """What `odf gc --min-age 0` does to datasets and unnamed folders (nothing old enough is spared)."""
    for entry in repo.scan():
        if entry.dataset_id is not None:
            collect_garbage(repo.dataset_by_id(entry.dataset_id), 0)
    if repo.is_local:
        for path in repo.unnamed_datasets(0):
            repo.remove_dataset_dir(path)


def names_loop(repo: Repository, rounds: int) -> collections.Counter[str]:
    """Each round: a new dataset, then two renames of it, a delete of it and gc at once. Afterwards it
    has one name — the winning rename's, or its old one — or none when the delete won, and every other
    dataset (bystanders that gc scans every round) still has exactly its own. The round's dataset is
    deleted afterwards, so every round runs on a repository of the same size (left in place, the rounds'
    datasets made each round scan and check all the earlier ones: quadratic)."""
    tally: collections.Counter[str] = collections.Counter()
    bystanders = {create(repo, f"bystander-{n}"): [f"bystander-{n}"] for n in range(3)}
    for i in range(rounds):
        name = f"ds{i}"
        did = create(repo, name)
        outcomes = run_at_once(
            {
                "rename-b": partial(repo.rename, name, f"{name}-b"),
                "rename-c": partial(repo.rename, name, f"{name}-c"),
                "delete": partial(repo.delete, [name]),
                "gc": partial(collect_all, repo),
            }
        )
        assert outcomes["gc"] == "ok", outcomes
        renamed = [op for op in ("rename-b", "rename-c") if outcomes[op] == "ok"]
        expected = None if outcomes["delete"] == "ok" else f"{name}-{renamed[-1][-1]}" if renamed else name
        if outcomes["delete"] == "ok":
            assert_one_name(repo, did, None)
        else:
            found = names(repo).get(did, [])
            assert len(found) == 1 and (len(renamed) <= 1 or found == [expected]), (messages, found)
            assert_one_name(repo, did, found[0])
        assert {d: n for d, n in names(repo).items() if d != did} == bystanders
        tally[" ".join(f"{op}={outcomes[op]}" for op in ("rename-b", "rename-c", "delete"))] += 1
        if outcomes["delete"] != "ok":
            repo.delete(names(repo)[did])
    assert names(repo) == bystanders
    return tally


def test_renames_deletes_and_gc_at_once_leave_one_name_per_dataset(repo: Repository) -> None:
    tally = names_loop(repo, ROUNDS)
    assert sum(tally.values()) == ROUNDS
    print(dict(tally))


def data_loop(repo: Repository, rounds: int, folder: Path) -> collections.Counter[str]:
    """Each round, at once: an ingest of a slice whose content often repeats an older, compacted one
    (so its object exists, as garbage), a compaction (all records onto the schema block, in one new
    slice), gc, and a rename of the dataset. After each round no record is lost and the chain and
    every object it references are intact."""
    did = create(repo, "data-0")
    dataset = repo.dataset_by_id(did)
    schema_block = dataset.head()
    rng = random.Random(34)
    records = conflicts = 0
    counting = threading.Lock()
    tally: collections.Counter[str] = collections.Counter()

    def retried(commit: Callable[[], int]) -> None:
        """Commits on the current head, again on the new head after losing to the other writer."""
        nonlocal records, conflicts
        for _ in range(50):
            try:
                added = commit()
            except ConflictError:
                with counting:
                    conflicts += 1
                continue
            with counting:
                records += added
            return
        raise AssertionError("a commit never got through")

    def ingest(content: bytes) -> int:
        state = dataset.state()
        staged, event = slice_of(dataset, folder, content)
        dataset.commit([event], objects=[staged], expected_head=state.head)
        return len(content) // 10

    def compact(n: int) -> int:
        state = dataset.state()
        if state.last_offset is None:
            return 0
        path = folder / f"compacted-{n}"
        path.write_bytes(f"compacted {n} ".encode() * (state.last_offset + 1))
        physical = Multihash.sha3_256(path.read_bytes())
        event = add_data(dataset.state_at(schema_block), physical, path.stat().st_size, state.last_offset + 1)
        dataset.commit(
            [event],
            objects=[StagedObject(f"data/{physical}", path)],
            expected_head=state.head,
            onto=schema_block,
        )
        return 0

    for i in range(rounds):
        current = names(repo)[did][0]
        content = f"slice {rng.randrange(6)} ".encode() * 10
        outcomes = run_at_once(
            {
                "ingest": partial(retried, partial(ingest, content)),
                "compact": partial(retried, partial(compact, i)),
                "gc": partial(collect_all, repo),
                "rename": partial(repo.rename, current, f"data-{i + 1}"),
            }
        )
        assert outcomes["ingest"] == outcomes["compact"] == outcomes["gc"] == "ok", outcomes
        state = dataset.state()
        assert state.last_offset is not None and state.last_offset + 1 == records, "a record was lost"
        assert verify_integrity(dataset) == []
        assert len(names(repo)[did]) == 1
        assert outcomes["rename"] == "ok", messages
        tally[f"rename={outcomes['rename']}"] += 1
    tally["commits lost to another and retried"] = conflicts
    (name,) = names(repo)[did]
    assert main(["verify", name, "--full", "--integrity", "--repo", repo.location]) == 0
    return tally


def test_ingest_compact_gc_and_rename_at_once_lose_nothing(repo: Repository, tmp_path: Path) -> None:
    tally = data_loop(repo, ROUNDS, tmp_path / "staging")
    assert tally["rename=ok"] == ROUNDS  # (the only name operation here)
    print(dict(tally))

"""The races of tests/unit/test_races.py on a repository in S3 (moto on 127.0.0.1, conditional writes
as S3 evaluates them): renames and deletes of one dataset at once leave one name or none, and gc never
deletes what a commit in progress re-uses."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.chain import in_flight, integrity
from airflow_odf.odf.chain.integrity import collect_garbage, verify_integrity
from airflow_odf.odf.repo.repository import Repository
from tests.unit.test_races import (
    assert_one_name,
    create,
    data_loop,
    names_loop,
    reset_leaving_garbage,
    slice_of,
)

#: Fewer rounds than on a local disk (tests/unit/test_races.py runs 200): each operation is tens of
#: HTTP requests to moto, and a delete's check of the readers reads every dataset (the windows are the
#: same).
NAME_ROUNDS, DATA_ROUNDS = 10, 30


@pytest.fixture
def repo(moto_endpoint: str, s3_bucket: str) -> Repository:
    return Repository.init(f"s3+{moto_endpoint}/{s3_bucket}/odf")


def test_renames_deletes_and_gc_at_once_leave_one_name_per_dataset(repo: Repository) -> None:
    tally = names_loop(repo, NAME_ROUNDS)
    assert sum(tally.values()) == NAME_ROUNDS
    print(dict(tally))


def test_ingest_compact_gc_and_rename_at_once_lose_nothing(repo: Repository, tmp_path: Path) -> None:
    tally = data_loop(repo, DATA_ROUNDS, tmp_path / "staging")
    assert tally["rename=ok"] == DATA_ROUNDS
    print(dict(tally))


def test_a_commit_inside_gcs_window_stores_again_what_gc_deleted(
    repo: Repository, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """gc (which lists by the bucket's LastModified) read the declarations before the commit declared
    and deletes the old object the commit re-uses; the commit stores it again before its head moves."""
    did = create(repo, "a")
    dataset = repo.dataset_by_id(did)
    staged = reset_leaving_garbage(dataset, tmp_path / "staging")
    _, event = slice_of(dataset, tmp_path / "staging", b"the same rows " * 50)
    gc_read, commit_stored = threading.Event(), threading.Event()
    real_declared, real_settle = integrity.declared_keys, in_flight.Intent.settle

    def declared_then_wait(*args: Any) -> Any:
        out = real_declared(*args)
        gc_read.set()
        assert commit_stored.wait(30)
        return out

    def stored_then_settle(self: in_flight.Intent, *args: Any) -> None:
        commit_stored.set()
        real_settle(self, *args)

    monkeypatch.setattr(integrity, "declared_keys", declared_then_wait)
    monkeypatch.setattr(in_flight.Intent, "settle", stored_then_settle)
    removed: list[list[str]] = []
    gc = threading.Thread(target=lambda: removed.append(collect_garbage(dataset, 0)))
    gc.start()
    assert gc_read.wait(30)
    dataset.commit([event], objects=[staged])
    gc.join(30)
    assert staged.key in removed[0] and dataset.store.exists(staged.key)
    assert verify_integrity(dataset) == []
    assert_one_name(repo, did, "a")

"""The races of tests/unit/test_races.py on a repository in S3 (moto on 127.0.0.1, conditional writes
as S3 evaluates them): renames and deletes of one dataset at once leave one name or none, and gc never
deletes what a commit in progress re-uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_odf.odf.repo.repository import Repository
from tests.unit.test_races import assert_one_name, data_loop, gc_inside_a_commits_window, names_loop

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
    """The same window in a bucket, where gc lists by the objects' LastModified."""
    did = gc_inside_a_commits_window(repo, monkeypatch, tmp_path / "staging")
    assert_one_name(repo, did, "a")

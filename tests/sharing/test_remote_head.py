"""Waiting on a published dataset: `OdfHeadTrigger` / `OdfHeadChangedSensor` read the head of a dataset
served over HTTP by `odf serve` (an `odf_repo` connection with an http:// URL and a bearer token)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_odf.odf.sharing.serve import RepositoryServer
from airflow_odf.triggers.head import OdfHeadTrigger, read_head
from tests.sharing.test_push_pull import NAME, make_repo
from tests.unit.test_sync import grow


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RepositoryServer, Path]]:
    repo = make_repo(tmp_path / "pub", tmp_path)
    server = RepositoryServer(repo, token="t0ken")
    server.start_in_thread()
    conn = {"conn_type": "odf_repo", "host": server.url, "extra": {"token": "t0ken", "retries": 0}}
    monkeypatch.setenv("AIRFLOW_CONN_ODF_PUBLISHER", json.dumps(conn))
    try:
        yield server, tmp_path
    finally:
        server.shutdown()
        server.server_close()


def test_the_head_of_a_served_dataset_is_watched(served: tuple[RepositoryServer, Path]) -> None:
    server, tmp_path = served
    repo = server.repo
    head = str(repo.dataset(NAME).head())
    assert read_head("odf_publisher", NAME).head == head
    assert read_head("odf_publisher", "no.such.dataset").head is None
    trigger = OdfHeadTrigger(odf_conn_id="odf_publisher", dataset=NAME, known_head=head)
    assert trigger.check() is None
    grow(repo.dataset(NAME), tmp_path / "more", 1, "p")
    moved = trigger.check()
    assert moved is not None and moved["status"] == "moved"
    assert moved["head"] == str(repo.dataset(NAME).head()) and moved["prev_head"] == head

"""`odf serve` against hostile files and clients: symbolic links out of the repository are not served,
idle connections are closed, bursts of connections queue, and a damaged dataset does not break the
listing of the others."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.sharing.serve import RepositoryServer
from tests.sharing.test_push_pull import NAME, folder, make_repo

SECRET = b"root:x:0:0:the secret outside the repository\n"


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return make_repo(tmp_path / "served", tmp_path)


def serving(repo: Repository, **options: float) -> RepositoryServer:
    server = RepositoryServer(repo, **options)  # type: ignore[arg-type]
    server.start_in_thread()
    return server


@pytest.fixture
def server(repo: Repository) -> Iterator[RepositoryServer]:
    running = serving(repo)
    yield running
    running.shutdown()
    running.server_close()


def get(server: RepositoryServer, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"{server.url}{path}", timeout=20) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read()


def test_symbolic_links_out_of_the_repository_are_not_served(
    repo: Repository, server: RepositoryServer, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_bytes(SECRET)
    dataset = folder(repo)
    data = sorted((dataset / "data").iterdir())[0]
    block = sorted((dataset / "blocks").iterdir())[0]
    (outside / data.name).write_bytes(SECRET)
    head = dataset / "refs" / "head"
    head.unlink()
    head.symlink_to(outside / "passwd")
    block.unlink()
    block.symlink_to(outside / "passwd")
    (dataset / "data").rename(tmp_path / "moved-data")
    (dataset / "data").symlink_to(outside, target_is_directory=True)  # a folder linked out
    for path in (f"/{NAME}/refs/head", f"/{NAME}/blocks/{block.name}", f"/{NAME}/data/{data.name}"):
        status, body = get(server, path)
        assert (status, body) == (404, b"not found\n"), path
    status, body = get(server, "/")
    assert status == 200 and SECRET not in body and b"root" not in body
    assert json.loads(body)[0]["error"] == "damaged head (refs/head)"


def test_links_inside_the_repository_folders_are_followed(repo: Repository, tmp_path: Path) -> None:
    """A folder link that stays inside the repository is fine (only the final file may not be a link)."""
    dataset = folder(repo)
    inside = repo.root / "elsewhere-data"
    (dataset / "data").rename(inside)
    (dataset / "data").symlink_to(inside, target_is_directory=True)
    running = serving(repo)
    try:
        name = sorted(inside.iterdir())[0].name
        assert get(running, f"/{NAME}/data/{name}") == (200, (inside / name).read_bytes())
    finally:
        running.shutdown()
        running.server_close()


def test_a_fifo_is_not_served(repo: Repository, server: RepositoryServer) -> None:
    head = folder(repo) / "refs" / "head"
    head.unlink()
    os.mkfifo(head)
    assert get(server, f"/{NAME}/refs/head") == (404, b"not found\n")


def test_a_damaged_dataset_is_listed_as_broken_with_the_others(repo: Repository) -> None:
    added = repo.add(model.DatasetSnapshot(name="com.example.fine", kind=model.DatasetKind.ROOT, metadata=[]))
    head = folder(repo) / "refs" / "head"
    head.write_bytes(b"\xff garbage, not a hash")
    running = serving(repo)
    try:
        status, body = get(running, "/")
    finally:
        running.shutdown()
        running.server_close()
    assert status == 200
    assert json.loads(body) == [
        {"name": "com.example.fine", "id": str(added.dataset_id), "head": str(added.commit.new_head)},
        {
            "name": NAME,
            "id": str(repo.resolve(NAME, damaged=True)),
            "head": None,
            "error": "damaged head (refs/head)",
        },
    ]


def test_idle_connections_are_closed(repo: Repository) -> None:
    running = serving(repo, timeout=0.5)
    try:
        with socket.create_connection(running.server_address[:2], timeout=20) as idle:
            started = time.monotonic()
            assert idle.recv(1) == b""  # closed by the server, not by our 20 s timeout
            assert time.monotonic() - started < 15
    finally:
        running.shutdown()
        running.server_close()


def test_a_burst_of_connections_is_queued_not_dropped(repo: Repository) -> None:
    """Not accepting yet (as when every thread is busy): connections wait in the listen backlog."""
    waiting = RepositoryServer(repo)
    sockets = []
    try:
        for _ in range(64):
            sockets.append(socket.create_connection(waiting.server_address[:2], timeout=0.5))
    finally:
        for s in sockets:
            s.close()
        waiting.server_close()
    assert len(sockets) == 64

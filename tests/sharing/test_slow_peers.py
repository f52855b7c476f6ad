"""A real threaded HTTP server that serves a dataset honestly except for one block, which it trickles:
it declares 10 MiB and sends a byte at a time. Every object read over HTTP — blocks included — ends
within its deadline, and a transfer below the minimum rate is dropped once it has lasted a window;
either way the pull fails in one line naming the object's URL and the limit, and writes nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.sharing.push_pull import pull_dataset
from airflow_odf.odf.storage.http import HttpObjectStore, HttpStoreError
from tests.sharing.test_hostile_peers import within_time_limit
from tests.sharing.test_push_pull import NAME, folder, make_repo
from tests.unit.test_dataset import files

DECLARED = 10 * 1024 * 1024


class TricklingServer(ThreadingHTTPServer):
    """Serves `root` (HTTP/1.1, kept-alive connections); GETs ending in `slow` get `DECLARED` bytes
    announced and then one byte every `every` seconds until the client goes away."""

    daemon_threads = True

    def __init__(self, root: Path, slow: str, every: float) -> None:
        self.root, self.slow, self.every = root, slow, every
        self.stop = threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up on a trickle is what these tests do: not worth a traceback."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: TricklingServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.endswith(self.server.slow):
            self.send_response(200)
            self.send_header("Content-Length", str(DECLARED))
            self.end_headers()
            try:
                while not self.server.stop.wait(self.server.every):
                    self.wfile.write(b"x")
            except OSError:
                pass
            self.close_connection = True
            return
        path = self.server.root / self.path.lstrip("/")
        data = path.read_bytes() if path.is_file() else None
        self.send_response(200 if data is not None else 404)
        self.send_header("Content-Length", str(len(data or b"")))
        self.end_headers()
        self.wfile.write(data or b"")


@pytest.fixture
def trickling(tmp_path: Path) -> Iterator[Any]:
    servers: list[TricklingServer] = []

    def start(root: Path, slow: str, every: float) -> TricklingServer:
        server = TricklingServer(root, slow, every)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop.set()
        server.shutdown()
        server.server_close()


def _pull_of_a_trickled_block(tmp_path: Path, trickling: Any, every: float) -> tuple[str, Any, Repository]:
    """Pulls a dataset whose second-newest block trickles; (the block's URL, the outcome, the local repo)."""
    source = make_repo(tmp_path / "a", tmp_path)
    dataset = source.dataset(NAME)
    blocks = [h for h, _ in dataset.iter_blocks()]
    victim = f"blocks/{blocks[1]}"  # not the head: any block of the chain walk
    server = trickling(folder(source).parent, victim, every)
    url = f"{server.url}/{folder(source).name}"
    local = Repository.init(tmp_path / "b")
    outcome = within_time_limit(lambda: pull_dataset(local, url, name=NAME))
    return f"{url}/{victim}", outcome, local


def _nothing_pulled(local: Repository) -> None:
    assert local.list() == []
    datasets = [d for d in (local.root / "datasets").glob("*") if d.is_dir()]
    assert all(not (d / "refs" / "head").exists() and files(d, "blocks") == {} for d in datasets)


def test_a_trickled_block_meets_the_object_deadline(
    tmp_path: Path, trickling: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ODF_HTTP_OBJECT_DEADLINE", "2")
    monkeypatch.setenv("ODF_HTTP_MIN_RATE", "0")  # the deadline alone
    shown, outcome, local = _pull_of_a_trickled_block(tmp_path, trickling, every=0.5)
    assert isinstance(outcome, HttpStoreError), outcome
    assert str(outcome) == f"GET {shown} did not complete within 2 s (ODF_HTTP_OBJECT_DEADLINE); gave up"
    _nothing_pulled(local)


def test_a_block_below_the_minimum_rate_is_dropped_before_the_deadline(
    tmp_path: Path, trickling: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two bytes a second against a minimum of 100 over 1 s: dropped after about a second, while the
    object's deadline (60 s) is far away."""
    monkeypatch.setenv("ODF_HTTP_OBJECT_DEADLINE", "60")
    monkeypatch.setenv("ODF_HTTP_MIN_RATE", "100")
    monkeypatch.setenv("ODF_HTTP_MIN_RATE_WINDOW", "1")
    started = time.monotonic()
    shown, outcome, local = _pull_of_a_trickled_block(tmp_path, trickling, every=0.5)
    assert isinstance(outcome, HttpStoreError), outcome
    assert str(outcome) == (
        f"GET {shown} brought less than 100 bytes/s over 1 s (ODF_HTTP_MIN_RATE, "
        "ODF_HTTP_MIN_RATE_WINDOW); dropped"
    )
    assert time.monotonic() - started < 30  # structural: far below the 60 s deadline, not a timing claim
    _nothing_pulled(local)


def test_a_steady_transfer_above_the_rate_is_not_dropped(
    tmp_path: Path, trickling: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rate is measured over what arrives (not per megabyte read): a body of 3 KB sent in bytes of
    100 every 0.05 s (2,000 bytes/s, above a minimum of 500 over a 0.5 s window) completes."""
    body = bytes(3000)
    (tmp_path / "ds").mkdir()

    class Steady(_Handler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for i in range(0, len(body), 100):
                self.wfile.write(body[i : i + 100])
                time.sleep(0.05)

    server = TricklingServer(tmp_path, "-", 1.0)
    server.RequestHandlerClass = Steady
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = HttpObjectStore(f"{server.url}/ds", min_rate=500, min_rate_window=0.5, retries=0)
        assert within_time_limit(lambda: store.get("blocks/f1620aa")) == body
    finally:
        server.shutdown()
        server.server_close()


def test_the_rate_settings_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODF_HTTP_MIN_RATE", "-1")
    with pytest.raises(OdfError, match=r"ODF_HTTP_MIN_RATE='-1': expected a number of bytes per second"):
        HttpObjectStore("http://127.0.0.1:9/ds")
    monkeypatch.setenv("ODF_HTTP_MIN_RATE", "0")
    monkeypatch.setenv("ODF_HTTP_MIN_RATE_WINDOW", "0")
    with pytest.raises(OdfError, match=r"ODF_HTTP_MIN_RATE_WINDOW='0': expected a positive number"):
        HttpObjectStore("http://127.0.0.1:9/ds")

"""The HTTP client against peers that misbehave on purpose: redirects out of http(s), loops, bodies that
never end or lie about their size, servers that drip bytes. Each costs bounded time and memory and ends
in one clear OdfError; nothing is written. `HostilePeer` is a raw TCP server on 127.0.0.1 whose answer
to each request is a function of the request (also used by the fuzz tests)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.identity.attestation import attestation_key
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.sharing.push_pull import pull_dataset
from airflow_odf.odf.sharing.sync import SignatureRefusedError, TamperedObjectError
from airflow_odf.odf.storage.http import MAX_REDIRECTS, HttpObjectStore, HttpStoreError
from airflow_odf.odf.storage.store import ObjectTooLargeError
from tests.sharing.test_push_pull import NAME, folder, make_repo
from tests.unit.test_dataset import files
from tests.unit.test_signed_heads import folder as signed_folder
from tests.unit.test_signed_heads import signed_repo

REPO = Path(__file__).resolve().parents[2]
#: Bytes per write of an endless body, and the pause between writes: about 6 MB/s, so that a client
#: that does not stop reading still fails its test (by the time limit) rather than exhaust memory.
ENDLESS_CHUNK = 64 * 1024
ENDLESS_PAUSE = 0.01
#: Every call in these tests must end well within this (a regression fails instead of hanging).
TIME_LIMIT = 30.0


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]


Behaviour = Callable[[Request, socket.socket, threading.Event], None]


@dataclass
class HostilePeer:
    """A TCP server on 127.0.0.1 answering every request with `behaviour(request, connection, stop)`;
    one request per connection; `requests` records what was asked."""

    behaviour: Behaviour
    requests: list[Request] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            lines = head.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
            request = Request(method, path, headers)
            self.requests.append(request)
            self.behaviour(request, conn, self._stop)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


@pytest.fixture
def hostile() -> Iterator[Callable[[Behaviour], HostilePeer]]:
    peers: list[HostilePeer] = []

    def start(behaviour: Behaviour) -> HostilePeer:
        peers.append(HostilePeer(behaviour))
        return peers[-1]

    yield start
    for peer in peers:
        peer.close()


# ----- misbehaviours -----


def answer(status: str, headers: dict[str, str], body: bytes = b"") -> Behaviour:
    def behave(request: Request, conn: socket.socket, stop: threading.Event) -> None:
        lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items()), "Connection: close"]
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + (b"" if request.method == "HEAD" else body))

    return behave


def redirect(location: str, status: str = "302 Found") -> Behaviour:
    return answer(status, {"Location": location, "Content-Length": "0"})


def endless(status: str = "200 OK", headers: dict[str, str] | None = None) -> Behaviour:
    """Headers, then zeros until the client goes away."""

    def behave(request: Request, conn: socket.socket, stop: threading.Event) -> None:
        lines = [
            f"HTTP/1.1 {status}",
            *(f"{k}: {v}" for k, v in (headers or {}).items()),
            "Connection: close",
        ]
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        while not stop.is_set():
            conn.sendall(bytes(ENDLESS_CHUNK))
            time.sleep(ENDLESS_PAUSE)

    return behave


def drip(prefix: bytes, byte: bytes = b"0", every: float = 0.2) -> Behaviour:
    """`prefix` at once, then one byte every `every` seconds, forever (within each read timeout)."""

    def behave(request: Request, conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(prefix)
        while not stop.wait(every):
            conn.sendall(byte)

    return behave


def routes(table: dict[str, Behaviour], fallback: Behaviour) -> Behaviour:
    """By path suffix: a real dataset served honestly except where a route misbehaves."""

    def behave(request: Request, conn: socket.socket, stop: threading.Event) -> None:
        for suffix, behaviour in table.items():
            if request.path.endswith(suffix):
                behaviour(request, conn, stop)
                return
        fallback(request, conn, stop)

    return behave


def files_of(root: Path) -> Behaviour:
    """Serves `root/<path>` honestly (404 when missing)."""

    def behave(request: Request, conn: socket.socket, stop: threading.Event) -> None:
        path = root / request.path.lstrip("/")
        if path.is_file():
            data = path.read_bytes()
            answer("200 OK", {"Content-Length": str(len(data))}, data)(request, conn, stop)
        else:
            answer("404 Not Found", {"Content-Length": "0"})(request, conn, stop)

    return behave


def within_time_limit(call: Callable[[], Any]) -> BaseException | Any:
    """Runs `call` in a thread: its result or exception; fails the test when it runs past TIME_LIMIT."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as e:  # handed to the test
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(TIME_LIMIT)
    assert not thread.is_alive(), f"still running after {TIME_LIMIT} s"
    return outcome[0]


def store_of(peer: HostilePeer, **options: Any) -> HttpObjectStore:
    options.setdefault("retries", 1)
    options.setdefault("backoff", 0.001)
    options.setdefault("timeout", 5)
    return HttpObjectStore(f"{peer.url}/ds", **options)


# ----- point 5: redirects -----


@pytest.mark.parametrize(
    "target", ["file:///etc/passwd", "ftp://127.0.0.1/x", "data:,root", "https://", "http://h:0/x"]
)
def test_redirects_leave_http_never(hostile: Callable[[Behaviour], HostilePeer], target: str) -> None:
    peer = hostile(redirect(target))
    outcome = within_time_limit(lambda: store_of(peer).get("refs/head"))
    assert isinstance(outcome, HttpStoreError), outcome
    assert "redirects to something else than an http(s) URL; not followed" in str(outcome)
    assert "root" not in str(outcome) and "passwd" not in str(outcome)
    assert len(peer.requests) == 1  # final: not retried


def test_a_redirect_to_dev_zero_costs_no_memory(hostile: Callable[[Behaviour], HostilePeer]) -> None:
    """In a child process capped at 1 GiB of address space: the redirect is refused at once."""
    peer = hostile(redirect("file:///dev/zero"))
    script = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from airflow_odf.odf.storage.http import HttpObjectStore
        HttpObjectStore({peer.url + "/ds"!r}, retries=0).get("refs/head")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "HttpStoreError" in done.stderr and "not followed" in done.stderr
    assert "MemoryError" not in done.stderr


def test_redirect_loops_stop_after_a_few_hops(hostile: Callable[[Behaviour], HostilePeer]) -> None:
    peer = hostile(redirect("/ds/refs/head"))
    outcome = within_time_limit(lambda: store_of(peer, retries=2).get("refs/head"))
    assert isinstance(outcome, HttpStoreError), outcome
    assert f"more than {MAX_REDIRECTS} redirects; gave up" in str(outcome)
    assert len(peer.requests) == MAX_REDIRECTS + 1  # final: not retried


def test_redirects_are_followed_over_http_without_the_token(
    hostile: Callable[[Behaviour], HostilePeer],
) -> None:
    target = hostile(answer("200 OK", {"Content-Length": "4"}, b"abcd"))
    origin = hostile(redirect(f"{target.url}/elsewhere/head", "307 Temporary Redirect"))
    assert store_of(origin, bearer_token="tok-secret-1234").get("refs/head") == b"abcd"
    assert origin.requests[0].headers.get("Authorization") == "Bearer tok-secret-1234"
    assert "Authorization" not in target.requests[0].headers
    assert target.requests[0].path == "/elsewhere/head"


# ----- point 6: sizes and deadlines -----


def test_an_endless_ref_is_cut_at_its_limit(hostile: Callable[[Behaviour], HostilePeer]) -> None:
    peer = hostile(endless())
    outcome = within_time_limit(lambda: store_of(peer).get("refs/head"))
    assert isinstance(outcome, ObjectTooLargeError), outcome
    assert str(outcome) == (
        f"refs/head at {peer.url}/ds is larger than 1024 bytes (the server sent more; more than a ref or "
        "name holds); refused"
    )


def test_a_huge_declared_length_is_refused_before_reading(
    hostile: Callable[[Behaviour], HostilePeer],
) -> None:
    peer = hostile(endless(headers={"Content-Length": str(2**40)}))
    outcome = within_time_limit(lambda: store_of(peer).get("refs/head"))
    assert isinstance(outcome, ObjectTooLargeError), outcome
    assert "the server declares 1099511627776 bytes" in str(outcome)


def test_blocks_are_capped_by_the_block_limit(
    hostile: Callable[[Behaviour], HostilePeer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ODF_MAX_BLOCK_BYTES", "4096")
    peer = hostile(endless())
    outcome = within_time_limit(lambda: store_of(peer).get("blocks/f1620ab"))
    assert isinstance(outcome, ObjectTooLargeError), outcome
    assert "blocks/f1620ab" in str(outcome) and "larger than 4096 bytes" in str(outcome)
    assert "ODF_MAX_BLOCK_BYTES" in str(outcome)


@pytest.mark.parametrize("headers", [{}, {"Content-Length": str(2**40)}], ids=["endless", "huge-length"])
def test_a_download_stops_at_the_expected_size(
    hostile: Callable[[Behaviour], HostilePeer], tmp_path: Path, headers: dict[str, str]
) -> None:
    peer = hostile(endless(headers=headers))
    target = tmp_path / "dl" / "obj"
    outcome = within_time_limit(lambda: store_of(peer).get_file("data/f1620ab", target, max_bytes=4096))
    assert isinstance(outcome, ObjectTooLargeError), outcome
    assert "data/f1620ab" in str(outcome) and "larger than 4096 bytes" in str(outcome)
    assert list((tmp_path / "dl").iterdir()) == []  # no partial or temp file


def test_an_endless_error_body_is_not_read(hostile: Callable[[Behaviour], HostilePeer]) -> None:
    peer = hostile(endless("503 Service Unavailable"))
    outcome = within_time_limit(lambda: store_of(peer, retries=1).get("refs/head"))
    assert isinstance(outcome, HttpStoreError), outcome
    assert "failed after 2 attempts: HTTP 503 Service Unavailable" in str(outcome)


@pytest.mark.parametrize(
    "prefix",
    [b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", b"HTTP/1.1 200 OK\r\nX-Slow: "],
    ids=["body", "headers"],
)
def test_a_drip_feeding_peer_meets_the_deadline(
    hostile: Callable[[Behaviour], HostilePeer],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    prefix: bytes,
) -> None:
    monkeypatch.setenv("ODF_HTTP_OBJECT_DEADLINE", "1.5")
    peer = hostile(drip(prefix))
    store = store_of(peer, retries=3)
    outcome = within_time_limit(lambda: store.get_file("data/f1620ab", tmp_path / "obj"))
    assert isinstance(outcome, HttpStoreError), outcome
    assert str(outcome) == (
        f"GET {peer.url}/ds/data/f1620ab did not complete within 1.5 s (ODF_HTTP_OBJECT_DEADLINE); gave up"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_size_of_an_endless_body_without_length_meets_the_deadline(
    hostile: Callable[[Behaviour], HostilePeer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without Content-Length the size is counted from the body; a fast endless one kept the count
    going past the deadline (the shut-down socket still read what the server kept sending)."""
    monkeypatch.setenv("ODF_HTTP_OBJECT_DEADLINE", "1.5")
    peer = hostile(endless())
    outcome = within_time_limit(lambda: store_of(peer, retries=1).size("data/f1620ab"))
    assert isinstance(outcome, HttpStoreError), outcome
    assert str(outcome) == (
        f"GET {peer.url}/ds/data/f1620ab did not complete within 1.5 s (ODF_HTTP_OBJECT_DEADLINE); gave up"
    )


def test_the_deadline_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODF_HTTP_OBJECT_DEADLINE", "soon")
    with pytest.raises(OdfError, match=r"ODF_HTTP_OBJECT_DEADLINE='soon': expected a positive number"):
        HttpObjectStore("http://127.0.0.1:9/ds")


def test_a_pull_stops_reading_an_object_beyond_its_declared_size(
    hostile: Callable[[Behaviour], HostilePeer], tmp_path: Path
) -> None:
    """The peer serves a real dataset, but one data file never ends: the pull refuses it as tampered
    after reading one byte past the size its block declares; nothing lands in the local repository."""
    source = make_repo(tmp_path / "a", tmp_path)
    event = next(source.dataset(NAME).iter_blocks())[1].event
    victim = f"data/{event.new_data.physical_hash}"
    peer = hostile(
        routes({victim: endless(headers={"Content-Length": str(2**40)})}, files_of(folder(source).parent))
    )
    local = Repository.init(tmp_path / "b")
    url = f"{peer.url}/{folder(source).name}"
    outcome = within_time_limit(lambda: pull_dataset(local, url, name=NAME))
    assert isinstance(outcome, TamperedObjectError), outcome
    assert f"{victim} has more than the {event.new_data.size} bytes block" in str(outcome)
    assert local.list() == []
    datasets = [d for d in (local.root / "datasets").iterdir() if d.is_dir()]
    assert all(not (d / "refs" / "head").exists() and files(d, "blocks") == {} for d in datasets)
    assert not any((d / victim).exists() for d in datasets)
    assert not list(local.root.rglob(".sync-*")) and not list(local.root.rglob(".tmp-*"))


def test_an_endless_attestation_is_cut_at_its_limit_and_the_pull_refused(
    hostile: Callable[[Behaviour], HostilePeer], tmp_path: Path
) -> None:
    """A real signed dataset whose head's attestation never ends: read no further than an attestation
    can be long, the head is refused (malformed) before anything is written."""
    origin, did = signed_repo(tmp_path / "a", tmp_path)
    head = origin.dataset(NAME).head()
    served = signed_folder(origin, did)
    peer = hostile(routes({attestation_key(head): endless()}, files_of(served.parent)))
    local = Repository.init(tmp_path / "b")
    outcome = within_time_limit(lambda: pull_dataset(local, f"{peer.url}/{served.name}", name=NAME))
    assert isinstance(outcome, SignatureRefusedError), outcome
    assert f"(malformed: attestations/{head} at" in str(outcome) and "larger than 4096 bytes" in str(outcome)
    assert local.list() == [] and not [p for p in (local.root / "datasets").rglob("*") if p.is_file()]

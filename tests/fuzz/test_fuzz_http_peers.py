"""Hostile HTTP peers, generated: any status, lying or huge Content-Length, short, endless or dripping
bodies, redirects anywhere (file://, other schemes, loops, garbage), garbage refs and raw garbage instead
of HTTP. Every read of the HTTP store ends within the deadline with a bounded result or one clear
OdfError (one line, no secret, no traceback), and leaves no file behind."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.limits import MAX_REF_BYTES
from airflow_odf.odf.storage.http import HttpObjectStore
from tests.fuzz.conftest import Outcomes
from tests.sharing.test_hostile_peers import ENDLESS_CHUNK, HostilePeer, Request, within_time_limit

MAX_BLOCK = 2048
EXPECTED_FILE = 1000
TOKEN = "fuzz-bearer-token-6d1e"


@dataclass(frozen=True)
class Misbehaviour:
    """One answer a hostile peer gives: raw bytes, or a status line, headers and a body that may never
    end or may drip."""

    raw: bytes | None
    status: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    endless: bool
    drip: bool

    def act(self, request: Request, conn: socket.socket, stop: threading.Event) -> None:
        if self.raw is not None:
            conn.sendall(self.raw)
            return
        head = "".join(f"{k}: {v}\r\n" for k, v in self.headers)
        conn.sendall(f"HTTP/1.1 {self.status}\r\n{head}Connection: close\r\n\r\n".encode("latin-1"))
        if request.method == "HEAD":
            return
        if self.drip:
            for byte in self.body:
                if stop.wait(0.05):
                    return
                conn.sendall(bytes([byte]))
        else:
            conn.sendall(self.body)
        while self.endless and not stop.is_set():
            conn.sendall(bytes(ENDLESS_CHUNK))
            stop.wait(0.005)


_LOCATIONS = st.sampled_from(
    [
        "file:///etc/passwd",
        "file:///dev/zero",
        "ftp://127.0.0.1/x",
        "gopher://127.0.0.1:70/",
        "javascript:alert(1)",
        "/ds/refs/head",
        "refs/head",
        "//127.0.0.1:1/x",
        "http://127.0.0.1:1/closed",
        "http://[::1",
        "http://h:99999/",
        "",
        "\u00e9\u0000",
    ]
)
_LENGTHS = st.one_of(
    st.sampled_from(["0", "1", "1023", "1025", str(2**40), str(2**70), "-1", "12abc", " 7 ", ""]),
    st.integers(0, 5000).map(str),
)
_STATUSES = st.one_of(
    st.sampled_from(["200 OK", "206 Partial", "301 Moved", "302 Found", "307 Temp", "308 Perm"]),
    st.sampled_from(["404 Not Found", "410 Gone", "429 Slow Down", "500 Oops", "503 Busy", "403 No"]),
    st.sampled_from(["999 What", "200", "abc", "2000 OK", "302 " + "x" * 500]),
)
_HEADERS = st.lists(
    st.one_of(
        st.tuples(st.just("Content-Length"), _LENGTHS),
        st.tuples(st.just("Location"), _LOCATIONS),
        st.tuples(st.just("Transfer-Encoding"), st.sampled_from(["chunked", "gzip", "identity"])),
        st.tuples(st.just("Retry-After"), st.sampled_from(["0", "1", "999999", "soon"])),
    ),
    max_size=4,
).map(tuple)
MISBEHAVIOURS = st.builds(
    Misbehaviour,
    raw=st.one_of(st.none(), st.none(), st.binary(max_size=200)),
    status=_STATUSES,
    headers=_HEADERS,
    body=st.one_of(st.binary(max_size=3000), st.just(b"f1620" + b"a" * 64)),
    endless=st.booleans(),
    drip=st.booleans(),
)
OPERATIONS = st.sampled_from(["head", "get ref", "get block", "get file", "size"])


@pytest.fixture(scope="module")
def peer() -> Iterator[tuple[HostilePeer, list[Misbehaviour]]]:
    current: list[Misbehaviour] = []
    server = HostilePeer(lambda request, conn, stop: current[-1].act(request, conn, stop))
    yield server, current
    server.close()


@given(misbehaviour=MISBEHAVIOURS, operation=OPERATIONS)
def test_a_hostile_peer_costs_bounded_time_and_memory(
    misbehaviour: Misbehaviour,
    operation: str,
    peer: tuple[HostilePeer, list[Misbehaviour]],
    outcomes: Outcomes,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch_module: pytest.MonkeyPatch,
) -> None:
    server, current = peer
    current.append(misbehaviour)
    store = HttpObjectStore(
        f"{server.url}/ds",
        bearer_token=TOKEN,
        retries=1,
        timeout=2,
        object_deadline=1.5,
        sleep=lambda _seconds: None,
    )
    target_dir = tmp_path_factory.mktemp("dl")
    target = target_dir / "obj"

    def run() -> object:
        if operation == "head":
            return Dataset(store).head()
        if operation == "get ref":
            return store.get("refs/head")
        if operation == "get block":
            return store.get("blocks/f1620ab")
        if operation == "get file":
            return store.get_file("data/f1620ab", target, max_bytes=EXPECTED_FILE)
        return store.size("data/f1620ab")

    outcome = within_time_limit(run)
    if isinstance(outcome, BaseException):
        assert isinstance(outcome, OdfError), repr(outcome)
        message = str(outcome)
        assert message and "\n" not in message and "Traceback" not in message
        assert TOKEN not in message and "root:" not in message
        assert len(message) < 1000
        outcomes.record(f"http peer: {operation}", f"refused ({type(outcome).__name__})")
    else:
        if operation == "get ref":
            assert isinstance(outcome, bytes) and len(outcome) <= MAX_REF_BYTES
        if operation == "get block":
            assert isinstance(outcome, bytes) and len(outcome) <= MAX_BLOCK
        if operation == "get file":
            assert target.stat().st_size <= EXPECTED_FILE
        outcomes.record(f"http peer: {operation}", "accepted")
    assert [p.name for p in target_dir.iterdir()] in ([], ["obj"])  # never a temp file left


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    """The block limit small enough that generated bodies cross it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ODF_MAX_BLOCK_BYTES", str(MAX_BLOCK))
        yield patch

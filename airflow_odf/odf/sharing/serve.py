"""`odf serve`: a read-only HTTP server of a local repository, by the Simple Transfer Protocol.

Each dataset is served under its name (or its `did:odf:` id): `/<name>/refs/head`,
`/<name>/blocks/<hash>`, `/<name>/data/<hash>`, `/<name>/checkpoints/<hash>`,
`/<name>/attestations/<hash>` (a head's signature); `/` lists the datasets as JSON. Nothing else of the
repository is reachable (never a key: those live outside it): only those five kinds of keys, with hashes that
parse, are answered, and only from regular files inside the repository: a symbolic link as the file
itself is never followed (O_NOFOLLOW), and one among its folders only when it stays inside the
repository. Files are sent with `sendfile`, so a pull over loopback is bounded by the client.

Clients are untrusted too: a connection that sends nothing for `timeout` seconds (idle between
requests, or stalled mid-request) is closed, the listen backlog is `backlog` (bursts of connections
queue instead of being dropped), and a dataset whose name or head is damaged is listed as broken
without breaking the listing of the others.

Given an `api` (`odf serve --query`), the server also answers kamu's query API at `/query` and `/verify`
(`airflow_odf.odf.query.endpoint`): the bearer token applies there too, and a POST body needs a
Content-Length within the API's bound.
"""

from __future__ import annotations

import hmac
import json
import os
import socket
import stat
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO, Protocol
from urllib.parse import unquote, urlsplit

from airflow_odf.odf.chain.dataset import HEAD_REF
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.limits import MAX_REF_BYTES
from airflow_odf.odf.repo.repository import Repository

DEFAULT_TIMEOUT = 30.0
DEFAULT_BACKLOG = 1024
_OBJECT_KINDS = ("blocks", "data", "checkpoints", "attestations")


class ServeError(OdfError):
    """The repository cannot be served (e.g. it is not on the local disk)."""


def _key(parts: list[str]) -> str | None:
    """The store key a request may read, or None for anything outside the protocol."""
    if parts == ["refs", "head"]:
        return HEAD_REF
    if len(parts) == 2 and parts[0] in _OBJECT_KINDS:
        try:
            return f"{parts[0]}/{Multihash.parse(parts[1])}"
        except OdfError:
            return None
    return None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def open_inside(root: str, path: Path) -> BinaryIO | None:
    """`path` opened for reading when it is a regular file inside `root` (a resolved path): its folders
    may be links that stay inside, the file itself may not be a link at all; None otherwise. Opened
    non-blocking so that a FIFO planted in the repository cannot hang the server."""
    parent = os.path.realpath(path.parent)
    if not _inside(parent, root):
        return None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(os.path.join(parent, path.name), flags)
    except OSError:  # missing, a symbolic link (ELOOP), unreadable
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


class _Handler(BaseHTTPRequestHandler):
    server: RepositoryServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.timeout = self.server.idle_timeout  # applied to every socket read and write
        super().setup()
        # headers and body leave in separate writes: with Nagle's algorithm the body would wait for the
        # client's delayed ACK (40 ms per request on a kept-alive connection)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:
        if self.server.log_requests:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        if not self._api_answered():
            self._answer(send_body=True)

    def do_POST(self) -> None:
        if not self._api_answered():
            self.close_connection = True  # its body is left unread
            self._plain(HTTPStatus.METHOD_NOT_ALLOWED, "only the query API takes POST", True)

    def _api_answered(self) -> bool:
        """Answers a request to the API's paths (`odf serve --query`); False for every other path."""
        api = self.server.api
        target = urlsplit(self.path)
        if api is None or not api.handles(target.path):
            return False
        problem = None
        if not self._authorized():
            status, answer = HTTPStatus.UNAUTHORIZED, {"message": "a bearer token is required"}
        elif self.command != "POST":
            status, answer = api.answer(self.command, target.path, target.query, None)
        elif (problem := self._body_problem(api.max_body_bytes)) is not None:
            status, answer = problem
        else:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            status, answer = api.answer(self.command, target.path, target.query, body)
        if self.command == "POST" and (problem is not None or status == HTTPStatus.UNAUTHORIZED):
            self.close_connection = True  # its body is left unread
        reply = json.dumps(answer, ensure_ascii=False).encode()
        self._bytes(reply, "application/json", True, HTTPStatus(status))
        return True

    def _body_problem(self, limit: int) -> tuple[HTTPStatus, dict[str, str]] | None:
        """Why a POST body cannot be read (no length, chunked, too large), or None."""
        length = self.headers.get("Content-Length", "")
        if "Transfer-Encoding" in self.headers or not length.isdigit():
            return HTTPStatus.LENGTH_REQUIRED, {"message": "a body with a Content-Length is required"}
        if int(length) > limit:
            return HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"message": f"the body is larger than {limit} bytes"}
        return None

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        if not self._authorized():
            self._plain(HTTPStatus.UNAUTHORIZED, "a bearer token is required", send_body)
            return
        parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
        if not parts:
            self._listing(send_body)
            return
        key = _key(parts[1:])
        path = self._object_path(parts[0], key) if key is not None else None
        f = open_inside(self.server.root, path) if path is not None else None
        if f is None:
            self._plain(HTTPStatus.NOT_FOUND, "not found", send_body)
            return
        with f:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(os.fstat(f.fileno()).st_size))
            self.end_headers()
            if send_body:
                self.connection.sendfile(f)

    def _listing(self, send_body: bool) -> None:
        try:
            entries = self.server.repo.scan()
        except OdfError as e:
            self.log_error("listing the repository failed: %s", e)
            self._plain(HTTPStatus.INTERNAL_SERVER_ERROR, "the repository cannot be listed", send_body)
            return
        listing: list[dict[str, Any]] = []
        for entry in entries:
            item: dict[str, Any] = {"name": entry.name, "id": None, "head": None}
            if entry.dataset_id is None:
                item["error"] = "damaged name (alias file)"
            else:
                item["id"] = str(entry.dataset_id)
                try:
                    item["head"] = self._head(entry.dataset_id)
                except OdfError as e:
                    self.log_error("dataset %s: %s", entry.name, e)
                    item["error"] = "damaged head (refs/head)"
            listing.append(item)
        self._bytes(json.dumps(listing, indent=2).encode(), "application/json", send_body)

    def _head(self, did: DatasetId) -> str | None:
        """The dataset's head, read like a served object (no link out, at most MAX_REF_BYTES)."""
        path = self.server.repo.dataset_by_id(did).store.local_path(HEAD_REF)
        f = open_inside(self.server.root, path) if path is not None else None
        if f is None:
            if path is not None and not os.path.lexists(path):
                return None  # a dataset being created has no head yet
            raise OdfError(f"{HEAD_REF} of {did} is not a regular file inside the repository")
        with f:
            raw = f.read(MAX_REF_BYTES + 1)
        if len(raw) > MAX_REF_BYTES:
            raise OdfError(f"{HEAD_REF} of {did} is larger than {MAX_REF_BYTES} bytes")
        try:
            return str(Multihash.parse(raw.decode().strip()))
        except UnicodeDecodeError:
            raise OdfError(f"{HEAD_REF} of {did} is not text") from None

    def _object_path(self, ref: str, key: str | None) -> Path | None:
        try:
            dataset = self.server.repo.dataset(ref, damaged=True)  # its files, as they are
            return None if key is None else dataset.store.local_path(key)
        except OdfError:
            return None

    def _authorized(self) -> bool:
        token = self.server.token
        if token is None:
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())

    def _plain(self, status: HTTPStatus, text: str, send_body: bool) -> None:
        self._bytes(f"{text}\n".encode(), "text/plain; charset=utf-8", send_body, status)

    def _bytes(
        self, body: bytes, content_type: str, send_body: bool, status: HTTPStatus = HTTPStatus.OK
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)


class QueryApi(Protocol):
    """What answers kamu's query API beside the repository (`airflow_odf.odf.query.endpoint`)."""

    max_body_bytes: int

    def handles(self, path: str) -> bool: ...

    def answer(self, method: str, path: str, query: str, body: bytes | None) -> tuple[int, Any]: ...


class RepositoryServer(ThreadingHTTPServer):
    """Serves one local repository read-only; `token` requires `Authorization: Bearer <token>`.

    `timeout`: seconds a connection may stay silent (idle between requests, or stalled in one) or
    refuse to take what is sent, before it is closed; `backlog`: connections the kernel queues while
    all are being accepted."""

    daemon_threads = True

    def __init__(
        self,
        repo: Repository,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str | None = None,
        log_requests: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        backlog: int = DEFAULT_BACKLOG,
        api: QueryApi | None = None,
    ) -> None:
        if not repo.is_local:
            raise ServeError(f"{repo.location}: odf serve serves a repository on the local disk")
        if timeout <= 0 or backlog <= 0:
            raise ServeError(f"serve: timeout ({timeout}) and backlog ({backlog}) must be positive")
        self.repo = repo
        self.root = os.path.realpath(repo.root)
        self.token = token
        self.log_requests = log_requests
        self.idle_timeout = timeout
        self.request_queue_size = backlog
        self.api = api
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line (a client that went away, a timed-out send), never a traceback in the log."""
        if self.log_requests:
            error = sys.exc_info()[1]
            print(f"odf serve: {client_address[0]}: {type(error).__name__}: {error}", file=sys.stderr)

    def start_in_thread(self) -> threading.Thread:
        """For tests and embedding: serve until `shutdown()`."""
        thread = threading.Thread(target=self.serve_forever, name="odf-serve", daemon=True)
        thread.start()
        return thread

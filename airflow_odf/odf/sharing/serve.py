"""`odf serve`: a read-only HTTP server of a local repository, by the Simple Transfer Protocol.

Each dataset is served under its name (or its `did:odf:` id): `/<name>/refs/head`,
`/<name>/blocks/<hash>`, `/<name>/data/<hash>`, `/<name>/checkpoints/<hash>`; `/` lists the datasets
as JSON. Nothing else of the repository is reachable: only those four kinds of keys, with hashes that
parse, are answered. Files are sent with `sendfile`, so a pull over loopback is bounded by the client.
"""

from __future__ import annotations

import hmac
import json
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from airflow_odf.odf.chain.dataset import HEAD_REF
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.repo.repository import Repository

_OBJECT_KINDS = ("blocks", "data", "checkpoints")


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


class _Handler(BaseHTTPRequestHandler):
    server: RepositoryServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # headers and body leave in separate writes: with Nagle's algorithm the body would wait for the
        # client's delayed ACK (40 ms per request on a kept-alive connection)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:
        if self.server.log_requests:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        if not self._authorized():
            self._plain(HTTPStatus.UNAUTHORIZED, "a bearer token is required", send_body)
            return
        parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
        if not parts:
            listing = [
                {"name": name, "id": str(did), "head": _head_text(self.server.repo, str(did))}
                for name, did in self.server.repo.list()
            ]
            self._bytes(json.dumps(listing, indent=2).encode(), "application/json", send_body)
            return
        key = _key(parts[1:])
        path = self._object_path(parts[0], key) if key is not None else None
        if path is None:
            self._plain(HTTPStatus.NOT_FOUND, "not found", send_body)
            return
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below, after sendfile
        except (FileNotFoundError, IsADirectoryError):
            self._plain(HTTPStatus.NOT_FOUND, "not found", send_body)
            return
        with f:
            size = path.stat().st_size
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            if send_body:
                self.connection.sendfile(f)

    def _object_path(self, ref: str, key: str | None) -> Path | None:
        try:
            dataset = self.server.repo.dataset(ref)
        except OdfError:
            return None
        return None if key is None else dataset.store.local_path(key)

    def _authorized(self) -> bool:
        token = self.server.token
        if token is None:
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())

    def _plain(self, status: HTTPStatus, text: str, send_body: bool) -> None:
        body = f"{text}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _bytes(self, body: bytes, content_type: str, send_body: bool) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)


def _head_text(repo: Repository, ref: str) -> str | None:
    head = repo.dataset(ref).head()
    return None if head is None else str(head)


class RepositoryServer(ThreadingHTTPServer):
    """Serves one repository read-only; `token` requires `Authorization: Bearer <token>`."""

    daemon_threads = True

    def __init__(
        self,
        repo: Repository,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str | None = None,
        log_requests: bool = False,
    ) -> None:
        self.repo = repo
        self.token = token
        self.log_requests = log_requests
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start_in_thread(self) -> threading.Thread:
        """For tests and embedding: serve until `shutdown()`."""
        thread = threading.Thread(target=self.serve_forever, name="odf-serve", daemon=True)
        thread.start()
        return thread

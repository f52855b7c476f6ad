"""A fault-injecting HTTP proxy in front of the S3 test server (moto): it forwards every request as it
came and fails chosen ones — by method, key pattern and header, a given number of times — with an S3
error response (500 InternalError, 503 SlowDown, 403 AccessDenied), a dropped connection before the
server saw the request, or a dropped connection after the server applied it (the response lost)."""

from __future__ import annotations

import contextlib
import http.client
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

#: The S3 errors a fault may answer with: code -> HTTP status.
S3_ERRORS = {"InternalError": 500, "SlowDown": 503, "AccessDenied": 403}
#: Drop the connection without forwarding / after forwarding (the server applied the request).
DROP, DROP_AFTER = "drop", "drop-after"
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection"})


@dataclass
class Fault:
    """Fails the next `times` requests whose method is `method`, whose path (`/bucket/key`, no query)
    matches the regular expression `key`, and that carry `header` when given (e.g. `x-amz-copy-source`
    for CopyObject / UploadPartCopy, `If-Match` for a conditional write)."""

    method: str
    key: str
    action: str = "InternalError"
    times: int = 1
    header: str | None = None
    hits: list[str] = field(default_factory=list)

    def matches(self, method: str, path: str, headers: Any) -> bool:
        return (
            len(self.hits) < self.times
            and method == self.method
            and re.search(self.key, path) is not None
            and (self.header is None or self.header in headers)
        )


@dataclass
class FaultyS3:
    """The running proxy: `url` is its endpoint; `faults` are consulted in order, one per request."""

    url: str
    faults: list[Fault] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path with query)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, fault: Fault) -> Fault:
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()
            self.requests.clear()

    def take(self, method: str, path: str, headers: Any) -> Fault | None:
        with self.lock:
            self.requests.append((method, path))
            bare = urlsplit(path).path
            for fault in self.faults:
                if fault.matches(method, bare, headers):
                    fault.hits.append(bare)
                    return fault
            return None


class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect
    state: FaultyS3
    upstream: tuple[str, int]

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b""):
                pass  # trailers
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(2)

    def _error(self, code: str) -> None:
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>injected by the test proxy</Message></Error>"
        ).encode()
        self.send_response(S3_ERRORS[code])
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(*self.upstream, timeout=120)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            if body or "Content-Length" in self.headers or "Transfer-Encoding" in self.headers:
                headers["Content-Length"] = str(len(body))
            connection.request(self.command, self.path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            return response.status, response.reason, response.getheaders(), data
        finally:
            connection.close()

    def _handle(self) -> None:
        body = self._body()
        fault = self.state.take(self.command, self.path, self.headers)
        if fault is not None and fault.action == DROP:
            self._drop()
            return
        if fault is not None and fault.action in S3_ERRORS:
            self._error(fault.action)
            return
        status, reason, headers, data = self._forward(body)
        if fault is not None:  # DROP_AFTER: applied upstream, the answer lost
            self._drop()
            return
        self.send_response(status, reason)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        length = dict((k.lower(), v) for k, v in headers).get("content-length", str(len(data)))
        self.send_header("Content-Length", length if self.command == "HEAD" else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


@contextlib.contextmanager
def faulty_s3(upstream_url: str) -> Iterator[FaultyS3]:
    """A proxy on a free port of 127.0.0.1 in front of `upstream_url`, for the duration of the block."""
    upstream = urlsplit(upstream_url)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    server.daemon_threads = True
    state = FaultyS3(url=f"http://127.0.0.1:{server.server_port}")
    server.RequestHandlerClass = type(
        "Proxy", (_Proxy,), {"state": state, "upstream": (upstream.hostname, upstream.port)}
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

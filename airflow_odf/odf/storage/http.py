"""Read-only object store over plain HTTP(S) GET: the Simple Transfer Protocol's pull side.

Any static web server (or kamu's `/refs`, `/blocks`, `/data`, `/checkpoints` routes) serves a dataset
as `<base url>/<key>`. Only the standard library is used. Transient failures (connection errors,
timeouts, 5xx, 429) are retried with exponential back-off, honouring a capped `Retry-After`; a 404 is
final at once. An optional bearer token is sent only to the configured host (never forwarded on a
redirect) and never appears in messages or `repr`.

The server is an untrusted peer, so every answer costs bounded memory and time: redirects are followed
only to http(s) URLs, at most `MAX_REDIRECTS` hops; a ref is read up to `limits.MAX_REF_BYTES`, any
other object held in memory up to `limits.max_block_bytes()`, a downloaded file up to the size its
block declares (`get_file(max_bytes=...)`), each refused as soon as the server declares or sends more;
each object — a ref, a block, a data file — has an overall deadline (`ODF_HTTP_OBJECT_DEADLINE`, retries
included) besides the per-read timeout, and a transfer that brings less than `ODF_HTTP_MIN_RATE` bytes/s
over `ODF_HTTP_MIN_RATE_WINDOW` seconds is dropped (curl's low-speed limit), so a server that drips bytes
cannot hold a pull forever, nor for long.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import math
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote, urljoin, urlsplit

from airflow_odf.odf import limits
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.storage.redact import redact_url
from airflow_odf.odf.storage.store import (
    ObjectNotFoundError,
    ObjectStore,
    check_key,
    object_too_large,
    read_limit,
    writing_atomically,
)

USER_AGENT = "airflow-provider-odf"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 4
DEFAULT_BACKOFF = 0.2
DEFAULT_MAX_DELAY = 10.0
MAX_REDIRECTS = 5
OBJECT_DEADLINE_ENV = "ODF_HTTP_OBJECT_DEADLINE"
DEFAULT_OBJECT_DEADLINE = 600.0
MIN_RATE_ENV = "ODF_HTTP_MIN_RATE"
MIN_RATE_WINDOW_ENV = "ODF_HTTP_MIN_RATE_WINDOW"
#: Bytes per second below which a transfer is dropped once it has lasted a window: a link slower than
#: 1 KiB/s for 30 s moves no dataset; 0 turns the check off.
DEFAULT_MIN_RATE = 1024.0
DEFAULT_MIN_RATE_WINDOW = 30.0
#: A download expected to be big gets one more second per MiB on top of the deadline, so that a slow
#: but steady link still finishes a large data file.
DEADLINE_SECONDS_PER_BYTE = 1 / (1024 * 1024)
_CHUNK = 1024 * 1024
#: The body of an error or redirect answer is read (to reuse the connection) only up to this size.
_DRAIN_LIMIT = 64 * 1024
_SHOWN_TEXT_LIMIT = 120
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_NOT_FOUND_STATUSES = frozenset({404, 410})
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_T = TypeVar("_T")
_Consume = Callable[[http.client.HTTPResponse, "_Deadline"], _T]


class ReadOnlyStoreError(OdfError):
    """The store cannot be written (or listed): a plain HTTP repository only answers GET."""


class HttpStoreError(OdfError):
    """An HTTP request failed for good (after retries where the failure was transient)."""

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class _TransientError(Exception):
    """An answer worth retrying (5xx, 429): what to report, and the server's `Retry-After`."""

    def __init__(self, status: int, failure: str, retry_after: float | None) -> None:
        super().__init__(failure)
        self.status = status
        self.failure = failure
        self.retry_after = retry_after


def _setting(name: str, default: float, what: str, *, zero: bool = False) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not ((value > 0 or (zero and value == 0)) and math.isfinite(value)):
        raise OdfError(f"{name}={raw!r}: expected {what}")
    return value


def default_object_deadline() -> float:
    """Seconds one object may take, retries included (`ODF_HTTP_OBJECT_DEADLINE`, default 600)."""
    return _setting(OBJECT_DEADLINE_ENV, DEFAULT_OBJECT_DEADLINE, "a positive number of seconds")


def default_min_rate() -> float:
    """Bytes/s a transfer must bring over each window (`ODF_HTTP_MIN_RATE`, default 1024; 0: off)."""
    return _setting(MIN_RATE_ENV, DEFAULT_MIN_RATE, "a number of bytes per second (0: no minimum)", zero=True)


def default_min_rate_window() -> float:
    """Seconds the minimum rate is measured over (`ODF_HTTP_MIN_RATE_WINDOW`, default 30)."""
    return _setting(MIN_RATE_WINDOW_ENV, DEFAULT_MIN_RATE_WINDOW, "a positive number of seconds")


class _Deadline:
    """The end of one object's transfer, and its minimum rate. When the deadline passes, or a request has
    brought less than `min_rate` bytes/s over the last `window` seconds, the connection in use is shut
    down: that ends a read blocked on a server that drips its headers or body (each byte within the
    read timeout). A watchdog thread looks once a tick; `slow` tells the rate's drop from the deadline's."""

    def __init__(
        self, seconds: float, min_rate: float = 0.0, window: float = DEFAULT_MIN_RATE_WINDOW
    ) -> None:
        self.seconds = seconds
        self.min_rate = min_rate
        self.window = window
        self.expired = False
        self.slow = False
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._received = 0
        self._marks: collections.deque[tuple[float, int]] = collections.deque([(time.monotonic(), 0)])
        self._done = threading.Event()
        self._tick = min(1.0, window / 4)
        self._watchdog = threading.Thread(target=self._watch_over, name="odf-http-deadline", daemon=True)
        self._watchdog.start()

    def watch(self, conn: http.client.HTTPConnection) -> None:
        """`conn` carries the next request; the rate is measured afresh from now (a back-off sleep or a
        redirect is no slow transfer)."""
        with self._lock:
            self._conn = conn
            self._marks = collections.deque([(time.monotonic(), self._received)])

    def progress(self, count: int) -> None:
        """`count` more bytes of a body arrived."""
        self._received += count

    def _watch_over(self) -> None:
        while not self._done.wait(min(self._tick, self.remaining())):
            now = time.monotonic()
            if now >= self._end:
                self._expire()
                return
            if self.min_rate > 0 and self._too_slow(now):
                self.slow = True
                self._expire()
                return

    def _too_slow(self, now: float) -> bool:
        """Less than `min_rate * window` bytes since the mark one window ago (none before a window)."""
        with self._lock:
            marks = self._marks
            marks.append((now, self._received))
            while len(marks) > 1 and marks[1][0] <= now - self.window:
                marks.popleft()
            since, received = marks[0]
            return now - since >= self.window and self._received - received < self.min_rate * self.window

    def check(self) -> None:
        """Raises once expired (a connection opened while the timer fired was not shut down)."""
        if self.expired:
            raise TimeoutError("the object's deadline passed")

    def remaining(self) -> float:
        return max(0.0, self._end - time.monotonic())

    def cancel(self) -> None:
        self._done.set()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sock = self._conn.sock if self._conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class HttpObjectStore(ObjectStore):
    """`GET <base_url>/<key>`; every write (and listing) raises ReadOnlyStoreError.

    `object_deadline`: seconds one object may take, retries included (None: `ODF_HTTP_OBJECT_DEADLINE`
    or 600); `min_rate`: bytes/s a request must bring over each `min_rate_window` seconds, else it is
    dropped (None: `ODF_HTTP_MIN_RATE` or 1024, 0: off; `ODF_HTTP_MIN_RATE_WINDOW` or 30); `timeout`
    bounds each connect and read."""

    def __init__(
        self,
        base_url: str,
        *,
        bearer_token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        max_delay: float = DEFAULT_MAX_DELAY,
        object_deadline: float | None = None,
        min_rate: float | None = None,
        min_rate_window: float | None = None,
        headers: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise HttpStoreError(f"not an http(s) URL: {redact_url(base_url)}", url=redact_url(base_url))
        if retries < 0 or timeout <= 0 or (object_deadline is not None and object_deadline <= 0):
            raise ValueError("retries must be >= 0, timeout and object_deadline > 0")
        if (min_rate is not None and min_rate < 0) or (min_rate_window is not None and min_rate_window <= 0):
            raise ValueError("min_rate must be >= 0, min_rate_window > 0")
        self.base_url = base_url.rstrip("/")
        self._token = bearer_token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_delay = max_delay
        self.object_deadline = default_object_deadline() if object_deadline is None else object_deadline
        self.min_rate = default_min_rate() if min_rate is None else min_rate
        self.min_rate_window = default_min_rate_window() if min_rate_window is None else min_rate_window
        self._headers = {"User-Agent": USER_AGENT, **(headers or {})}
        self._sleep = sleep
        self._local = threading.local()

    @property
    def url(self) -> str:
        return redact_url(self.base_url)

    def __repr__(self) -> str:
        auth = ", bearer token" if self._token else ""
        return f"HttpObjectStore({self.url!r}{auth})"

    # ----- plumbing -----

    def _url(self, key: str) -> str:
        return f"{self.base_url}/{quote(check_key(key), safe='/')}"

    def _new_connection(self, url: str) -> http.client.HTTPConnection:
        parts = urlsplit(url)
        if parts.scheme == "https":
            return http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=self.timeout, context=ssl.create_default_context()
            )
        return http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=self.timeout)

    def _connection(self) -> http.client.HTTPConnection:
        """This thread's connection to the server, kept open between requests: a pull makes one
        request per block, and a new connection (a TLS handshake over HTTPS) for each would dominate."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._new_connection(self.base_url)
            self._local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def _send(self, method: str, url: str, deadline: _Deadline) -> http.client.HTTPResponse:
        """One request on the kept connection; a connection the server closed while idle is reopened
        once without counting as a failed attempt."""
        headers = dict(self._headers)
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        for reopened in (False, True):
            conn = self._connection()
            deadline.watch(conn)
            reused = conn.sock is not None
            try:
                conn.request(method, _target(url), headers=headers)
                deadline.check()
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop_connection()
                if reopened or not reused:
                    raise
            except BaseException:
                self._drop_connection()
                raise
        raise AssertionError("unreachable")

    def _request(self, method: str, key: str, consume: _Consume[_T], *, expected_bytes: int = 0) -> _T:
        """Sends the request and runs `consume` on the response, retrying transient failures (the
        body is read inside the retry, so a connection dropped mid-body is retried too), all within
        the object's deadline."""
        shown = redact_url(self._url(key))
        deadline = _Deadline(
            self.object_deadline + expected_bytes * DEADLINE_SECONDS_PER_BYTE,
            self.min_rate,
            self.min_rate_window,
        )
        try:
            return self._with_retries(method, key, consume, deadline)
        except (TimeoutError, OSError, http.client.HTTPException):
            if not deadline.expired:
                raise
        finally:
            deadline.cancel()
        if deadline.slow:
            raise HttpStoreError(
                f"{method} {shown} brought less than {deadline.min_rate:g} bytes/s over "
                f"{deadline.window:g} s ({MIN_RATE_ENV}, {MIN_RATE_WINDOW_ENV}); dropped",
                url=shown,
            )
        raise HttpStoreError(
            f"{method} {shown} did not complete within {deadline.seconds:g} s ({OBJECT_DEADLINE_ENV}); "
            "gave up",
            url=shown,
        )

    def _with_retries(self, method: str, key: str, consume: _Consume[_T], deadline: _Deadline) -> _T:
        url = self._url(key)
        shown = redact_url(url)
        attempts = self.retries + 1
        status: int | None = None
        failure = "no attempt made"
        for attempt in range(attempts):
            deadline.check()
            retry_after: float | None = None
            try:
                return self._attempt(method, key, url, consume, deadline)
            except _TransientError as e:
                status, failure, retry_after = e.status, e.failure, e.retry_after
            except (TimeoutError, OSError, http.client.HTTPException) as e:
                deadline.check()
                status, failure = None, _describe(e)
            if attempt + 1 < attempts:
                delay = self.backoff * 2**attempt if retry_after is None else retry_after
                self._sleep(max(0.0, min(delay, self.max_delay, deadline.remaining())))
        raise HttpStoreError(
            f"{method} {shown} failed after {attempts} attempt{'s' if attempts > 1 else ''}: {failure}",
            url=shown,
            status=status,
        )

    def _attempt(self, method: str, key: str, url: str, consume: _Consume[_T], deadline: _Deadline) -> _T:
        """One request, following at most MAX_REDIRECTS http(s) redirects, each on a new connection
        without the token (e.g. to a pre-signed URL on another host)."""
        shown = redact_url(url)
        response = self._send(method, url, deadline)
        hop: http.client.HTTPConnection | None = None
        try:
            for hops in range(MAX_REDIRECTS + 1):
                if response.status not in _REDIRECT_STATUSES:
                    return self._answer(method, key, shown, response, consume, deadline, kept=hop is None)
                if hops == MAX_REDIRECTS:
                    break
                url = _redirect_target(method, shown, url, response.getheader("Location"))
                self._discard(response, kept=hop is None)
                if hop is not None:
                    hop.close()
                hop = self._new_connection(url)
                deadline.watch(hop)
                hop.request(method, _target(url), headers=self._headers)
                deadline.check()
                response = hop.getresponse()
        finally:
            if hop is not None:
                hop.close()
        raise HttpStoreError(f"{method} {shown}: more than {MAX_REDIRECTS} redirects; gave up", url=shown)

    def _answer(
        self,
        method: str,
        key: str,
        shown: str,
        response: http.client.HTTPResponse,
        consume: _Consume[_T],
        deadline: _Deadline,
        *,
        kept: bool,
    ) -> _T:
        status = response.status
        if 200 <= status < 300:
            try:
                return consume(response, deadline)
            except BaseException:
                if kept:
                    self._drop_connection()  # the body was not read to its end
                raise
        self._discard(response, kept=kept)
        if status in _NOT_FOUND_STATUSES:
            raise ObjectNotFoundError(f"{key} not found at {shown} (HTTP {status})")
        failure = f"HTTP {status} {_printable(response.reason or '')}".rstrip()
        if status in _RETRY_STATUSES:
            raise _TransientError(status, failure, _retry_after(response.getheader("Retry-After")))
        raise HttpStoreError(f"{method} {shown} failed: {failure}", url=shown, status=status)

    def _discard(self, response: http.client.HTTPResponse, *, kept: bool) -> None:
        """Reads a short answer body so that the connection can be used again; a long (or endless) one
        is left unread and the connection dropped."""
        response.read(_DRAIN_LIMIT)
        if not response.isclosed():
            response.close()
            if kept:
                self._drop_connection()

    def _read_only(self, action: str) -> ReadOnlyStoreError:
        return ReadOnlyStoreError(
            f"{self.url} is a read-only HTTP repository: cannot {action}; push to s3:// or file:// instead"
        )

    # ----- reading -----

    def get(self, key: str) -> bytes:
        """The whole object in memory, at most `read_limit(key)` bytes (a ref, a block, an
        attestation); anything else a peer serves is read up to `limits.max_block_bytes()`."""
        limit, why = read_limit(key) or (limits.max_block_bytes(), f"the limit {limits.MAX_BLOCK_BYTES_ENV}")
        where = self.url

        def read(response: http.client.HTTPResponse, deadline: _Deadline) -> bytes:
            return b"".join(_chunks(response, deadline, key, where, limit, why))

        return self._request("GET", key, read)

    def get_file(self, key: str, target: Path, *, max_bytes: int | None = None) -> None:
        """Streams in chunks into a temp file next to `target`; a retry starts the file over. With
        `max_bytes` (the size the block declares) the download stops at the first byte beyond it, and
        the object's deadline grows with it."""
        where = self.url

        def download(response: http.client.HTTPResponse, deadline: _Deadline) -> None:
            with writing_atomically(target) as f:
                for chunk in _chunks(
                    response, deadline, key, where, max_bytes, "its block declares that size"
                ):
                    f.write(chunk)

        self._request("GET", key, download, expected_bytes=max_bytes or 0)

    def _head(self, key: str) -> int | None:
        """Content-Length by HEAD; servers without HEAD (405/501) are asked with GET instead."""
        try:
            return self._request("HEAD", key, lambda response, _deadline: _content_length(response))
        except HttpStoreError as e:
            if e.status not in (405, 501):
                raise
        return self._request("GET", key, _count_body)

    def size(self, key: str) -> int:
        length = self._head(key)
        if length is None:  # HEAD without Content-Length (e.g. chunked): count the body
            length = self._request("GET", key, _count_body)
        return length

    # ----- not possible over plain GET -----

    def list(self, prefix: str) -> Iterator[str]:
        raise ReadOnlyStoreError(
            f"{self.url} is an HTTP repository: listing keys under {prefix!r} is not possible over the "
            "simple transfer protocol (objects are found by walking the chain from refs/head)"
        )

    def put(self, key: str, data: bytes) -> None:
        raise self._read_only(f"write {key}")

    def put_file(self, key: str, source: Path, *, move: bool = False) -> None:
        raise self._read_only(f"write {key}")

    def delete(self, key: str) -> None:
        raise self._read_only(f"delete {key}")

    def compare_and_swap(self, key: str, expected: bytes | None, new: bytes | None) -> None:
        raise self._read_only(f"move {key}")


def _target(url: str) -> str:
    """The request target (path and query) of an absolute URL."""
    return urlsplit(url)._replace(scheme="", netloc="").geturl() or "/"


def _redirect_target(method: str, shown: str, url: str, location: str | None) -> str:
    """The absolute URL a redirect leads to; anything but an http(s) URL with a host is refused."""
    try:
        target = urljoin(url, location or "")
        parts = urlsplit(target)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        ok = False
    if not ok:
        raise HttpStoreError(
            f"{method} {shown} redirects to something else than an http(s) URL; not followed", url=shown
        )
    return target


def _printable(text: str) -> str:
    """Server-chosen text for a message: printable characters only, cut short."""
    clean = "".join(c if c.isprintable() else "?" for c in text[: _SHOWN_TEXT_LIMIT + 1])
    return clean if len(clean) <= _SHOWN_TEXT_LIMIT else f"{clean[:_SHOWN_TEXT_LIMIT]}…"


def _describe(error: BaseException) -> str:
    """One line on a failed attempt (the exception's text may quote what the server sent)."""
    text = str(error)
    return f"{type(error).__name__}: {_printable(redact_url(text))}" if text else type(error).__name__


def _content_length(response: http.client.HTTPResponse) -> int | None:
    value = response.headers.get("Content-Length")
    return int(value) if value is not None and value.strip().isdigit() else None


def _chunks(
    response: http.client.HTTPResponse, deadline: _Deadline, key: str, where: str, limit: int | None, why: str
) -> Iterator[bytes]:
    """The body in chunks; refused when the server declares or sends more than `limit` bytes, and
    retried (IncompleteRead) when it sends less than it declared. A body cut by the deadline is never
    taken for a complete one (without Content-Length, its end is the connection's)."""
    declared = _content_length(response)
    if limit is not None and declared is not None and declared > limit:
        raise object_too_large(key, where, limit, f"the server declares {declared} bytes; {why}")
    received = 0
    # read1: what has arrived, at once (read waits for a whole chunk, so a slow but steady body would
    # show no progress to the rate's watchdog for a long while)
    while chunk := response.read1(_CHUNK if limit is None else min(_CHUNK, limit + 1 - received)):
        deadline.check()  # a shut-down socket may still read a fast server's data (Linux keeps it)
        deadline.progress(len(chunk))
        received += len(chunk)
        if limit is not None and received > limit:
            raise object_too_large(key, where, limit, f"the server sent more; {why}")
        yield chunk
    deadline.check()
    if declared is not None and received != declared:
        raise http.client.IncompleteRead(b"", declared - received)


def _count_body(response: http.client.HTTPResponse, deadline: _Deadline) -> int:
    """The body's length, read and dropped chunk by chunk (bounded in memory, and in time by the
    object's deadline)."""
    return sum(len(chunk) for chunk in _chunks(response, deadline, "", "", None, ""))


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


__all__ = [
    "DEFAULT_MIN_RATE",
    "DEFAULT_MIN_RATE_WINDOW",
    "DEFAULT_OBJECT_DEADLINE",
    "MAX_REDIRECTS",
    "MIN_RATE_ENV",
    "MIN_RATE_WINDOW_ENV",
    "OBJECT_DEADLINE_ENV",
    "HttpObjectStore",
    "HttpStoreError",
    "ReadOnlyStoreError",
    "default_min_rate",
    "default_min_rate_window",
    "default_object_deadline",
]

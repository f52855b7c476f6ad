"""Read-only object store over plain HTTP(S) GET: the Simple Transfer Protocol's pull side.

Any static web server (or kamu's `/refs`, `/blocks`, `/data`, `/checkpoints` routes) serves a dataset
as `<base url>/<key>`. Only the standard library is used. Transient failures (connection errors,
timeouts, 5xx, 429) are retried with exponential back-off, honouring a capped `Retry-After`; a 404 is
final at once. An optional bearer token is sent only to the configured host (never forwarded on a
redirect) and never appears in messages or `repr`.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import BinaryIO, TypeVar
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.storage.store import ObjectNotFoundError, ObjectStore, check_key, writing_atomically

USER_AGENT = "airflow-provider-odf"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 4
DEFAULT_BACKOFF = 0.2
DEFAULT_MAX_DELAY = 10.0
_CHUNK = 1024 * 1024
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_NOT_FOUND_STATUSES = frozenset({404, 410})
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_T = TypeVar("_T")


class ReadOnlyStoreError(OdfError):
    """The store cannot be written (or listed): a plain HTTP repository only answers GET."""


class HttpStoreError(OdfError):
    """An HTTP request failed for good (after retries where the failure was transient)."""

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


def redact_url(url: str) -> str:
    """The URL without user:password@ (for messages: credentials never leave the store object)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


class HttpObjectStore(ObjectStore):
    """`GET <base_url>/<key>`; every write (and listing) raises ReadOnlyStoreError."""

    def __init__(
        self,
        base_url: str,
        *,
        bearer_token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        max_delay: float = DEFAULT_MAX_DELAY,
        headers: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise HttpStoreError(f"not an http(s) URL: {redact_url(base_url)}", url=redact_url(base_url))
        if retries < 0 or timeout <= 0:
            raise ValueError("retries must be >= 0 and timeout > 0")
        self.base_url = base_url.rstrip("/")
        self._token = bearer_token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_delay = max_delay
        self._headers = {"User-Agent": USER_AGENT, **(headers or {})}
        self._sleep = sleep
        self._opener = urllib.request.build_opener()
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

    def _connection(self) -> http.client.HTTPConnection:
        """This thread's connection to the server, kept open between requests: a pull makes one
        request per block, and a new connection (a TLS handshake over HTTPS) for each would dominate."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            parts = urlsplit(self.base_url)
            if parts.scheme == "https":
                conn = http.client.HTTPSConnection(
                    parts.hostname or "",
                    parts.port,
                    timeout=self.timeout,
                    context=ssl.create_default_context(),
                )
            else:
                conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def _send(self, method: str, url: str) -> http.client.HTTPResponse:
        """One request on the kept connection; a connection the server closed while idle is reopened
        once without counting as a failed attempt."""
        headers = dict(self._headers)
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        target = urlsplit(url)._replace(scheme="", netloc="").geturl() or "/"
        for reopened in (False, True):
            conn = self._connection()
            reused = conn.sock is not None
            try:
                conn.request(method, target, headers=headers)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop_connection()
                if reopened or not reused:
                    raise
            except BaseException:
                self._drop_connection()
                raise
        raise AssertionError("unreachable")

    def _request(self, method: str, key: str, consume: Callable[[http.client.HTTPResponse], _T]) -> _T:
        """Sends the request and runs `consume` on the response, retrying transient failures (the
        body is read inside the retry, so a connection dropped mid-body is retried too). A redirect is
        followed without the token (e.g. to a pre-signed URL on another host)."""
        url = self._url(key)
        shown = redact_url(url)
        attempts = self.retries + 1
        status: int | None = None
        failure = "no attempt made"
        for attempt in range(attempts):
            retry_after: float | None = None
            try:
                response = self._send(method, url)
                status = response.status
                if status in _REDIRECT_STATUSES:
                    location = urljoin(url, response.getheader("Location") or "")
                    response.read()
                    return self._follow(method, location, consume)
                if 200 <= status < 300:
                    try:
                        return consume(response)
                    except BaseException:
                        self._drop_connection()  # the body was not read to its end
                        raise
                response.read()  # drain, so that the connection can be used again
                if status in _NOT_FOUND_STATUSES:
                    raise ObjectNotFoundError(f"{key} not found at {shown} (HTTP {status})")
                failure = f"HTTP {status} {response.reason}".rstrip()
                if status not in _RETRY_STATUSES:
                    raise HttpStoreError(f"{method} {shown} failed: {failure}", url=shown, status=status)
                retry_after = _retry_after(response.getheader("Retry-After"))
            except (urllib.error.URLError, TimeoutError, OSError, http.client.HTTPException) as e:
                status = None
                reason = getattr(e, "reason", None) or e
                failure = f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__
            if attempt + 1 < attempts:
                delay = self.backoff * 2**attempt if retry_after is None else retry_after
                self._sleep(max(0.0, min(delay, self.max_delay)))
        raise HttpStoreError(
            f"{method} {shown} failed after {attempts} attempt{'s' if attempts > 1 else ''}: {failure}",
            url=shown,
            status=status,
        )

    def _follow(self, method: str, url: str, consume: Callable[[http.client.HTTPResponse], _T]) -> _T:
        """A redirect's target, fetched without the bearer token (urllib follows further redirects)."""
        request = urllib.request.Request(url, method=method, headers=self._headers)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return consume(response)
        except urllib.error.HTTPError as e:
            with e:
                if e.code in _NOT_FOUND_STATUSES:
                    raise ObjectNotFoundError(f"{redact_url(url)} not found (HTTP {e.code})") from None
                raise http.client.HTTPException(f"HTTP {e.code} from redirect target") from None

    def _read_only(self, action: str) -> ReadOnlyStoreError:
        return ReadOnlyStoreError(
            f"{self.url} is a read-only HTTP repository: cannot {action}; push to s3:// or file:// instead"
        )

    # ----- reading -----

    def get(self, key: str) -> bytes:
        return self._request("GET", key, _read_all)

    def get_file(self, key: str, target: Path) -> None:
        """Streams in chunks into a temp file next to `target`; a retry starts the file over."""

        def download(response: http.client.HTTPResponse) -> None:
            with writing_atomically(target) as f:
                _copy(response, f)

        self._request("GET", key, download)

    def _head(self, key: str) -> int | None:
        """Content-Length by HEAD; servers without HEAD (405/501) are asked with GET instead."""
        try:
            return self._request("HEAD", key, _content_length)
        except HttpStoreError as e:
            if e.status not in (405, 501):
                raise
        return self._request("GET", key, lambda r: len(_read_all(r)))

    def size(self, key: str) -> int:
        length = self._head(key)
        if length is None:  # HEAD without Content-Length (e.g. chunked): count the body
            length = self._request("GET", key, lambda r: len(_read_all(r)))
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


def _read_all(response: http.client.HTTPResponse) -> bytes:
    return response.read()


def _content_length(response: http.client.HTTPResponse) -> int | None:
    value = response.headers.get("Content-Length")
    return int(value) if value is not None and value.strip().isdigit() else None


def _copy(response: http.client.HTTPResponse, target: BinaryIO) -> None:
    expected = _content_length(response)
    copied = 0
    while chunk := response.read(_CHUNK):
        target.write(chunk)
        copied += len(chunk)
    if expected is not None and copied != expected:
        raise http.client.IncompleteRead(b"", expected - copied)


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

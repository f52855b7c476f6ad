"""FetchStep::Url: http(s) with conditional requests (ETag / Last-Modified), and file:// without a copy."""

from __future__ import annotations

import http.client
import os
import stat
import tempfile
import urllib.error
import urllib.request
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from urllib.parse import urlsplit

from airflow_odf.odf.format.model import (
    EventTimeSourceFromPath,
    EventTimeSourceFromSystemTime,
    FetchStepUrl,
    SourceState,
)
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.fetch.local_files import confine
from airflow_odf.odf.ingest.fetch.types import (
    STATE_ETAG,
    STATE_LAST_MODIFIED,
    FetchedFile,
    FetchError,
    FetchOptions,
    FetchResult,
    PollingState,
    SourceNotFoundError,
    SourceUnreachableError,
    file_mtime,
    make_state,
    up_to_date,
)

USER_AGENT = "airflow-provider-odf"
MAX_REDIRECTS = 10
PROGRESS_EVERY = 4 * 1024 * 1024
_CHUNK = 1024 * 1024
_BODY_EXCERPT = 1000


#: An HTTP answer: urllib raises non-2xx answers as HTTPError, which is a response as well.
_Response = http.client.HTTPResponse | urllib.error.HTTPError


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
    max_redirections = MAX_REDIRECTS


class UrlSource:
    """Fetches one URL per iteration; the state is the response's ETag or Last-Modified."""

    def __init__(self, step: FetchStepUrl, options: FetchOptions) -> None:
        if isinstance(step.event_time, EventTimeSourceFromPath):
            raise FetchError(
                "fetch.eventTime: FromPath is supported only by FilesGlob sources; for Url use "
                "FromMetadata (Last-Modified header or file mtime, the default) or FromSystemTime"
            )
        self._step = step
        self._options = options
        self._opener = urllib.request.build_opener(_RedirectHandler)

    def fetch(self, prev_state: SourceState | None, system_time: Timestamp) -> FetchResult:
        url, scheme = self._url()
        if scheme == "file":
            return self._fetch_file(url, prev_state, system_time)
        return self._fetch_http(url, prev_state, system_time)

    def check(self, prev_state: SourceState | None) -> tuple[bool, str]:
        """Would `fetch` download something? `(changed, reason)`, found without downloading.

        For http(s) a conditional GET whose body is never read (HEAD is not reliably honoured with
        validators); for file:// the modification time. A source that gives no ETag/Last-Modified
        cannot tell: that answers "changed". 404 and a missing file raise `SourceNotFoundError`.
        """
        url, scheme = self._url()
        if scheme == "file":
            path, mtime = self._stat_file(url)
            if PollingState.of(prev_state, "fetch.url").last_modified == mtime:
                return False, f"{path} unchanged since {mtime}"
            return True, f"{path} modified at {mtime}"
        shown = self._step.url
        response = self._open(url, prev_state)
        try:
            status = response.getcode()
            if status == 304:
                return False, f"{shown} not modified (HTTP 304)"
            self._check_status(response, status, shown)
            new_state = _http_state(
                response.headers.get("ETag"), self._last_modified(response.headers.get("Last-Modified"))
            )
        finally:
            response.close()
        if new_state is None:
            return True, f"{shown} gives no ETag or Last-Modified, so it may have changed"
        if new_state == prev_state:
            return False, f"{shown} unchanged ({new_state.kind} {new_state.value})"
        return True, f"{shown} changed ({new_state.kind} {new_state.value})"

    def _url(self) -> tuple[str, str]:
        """The URL with its templates filled in, and its scheme: file, http or https."""
        url = self._options.render(self._step.url, "fetch.url")
        scheme = urlsplit(url).scheme.lower()
        if scheme not in ("file", "http", "https"):
            raise FetchError(
                f"fetch.url: scheme {scheme!r} of {self._step.url} is not supported; "
                "expected http, https or file"
            )
        return url, scheme

    def _event_time(self, metadata_time: Timestamp | None, system_time: Timestamp) -> Timestamp | None:
        if isinstance(self._step.event_time, EventTimeSourceFromSystemTime):
            return system_time
        return metadata_time

    # ----- file:// -----

    def _fetch_file(self, url: str, prev_state: SourceState | None, system_time: Timestamp) -> FetchResult:
        path, mtime = self._stat_file(url)
        if PollingState.of(prev_state, "fetch.url").last_modified == mtime:
            self._options.log(f"fetch.url: {path} unchanged since {mtime}")
            return up_to_date(prev_state)
        return FetchResult(
            files=[FetchedFile(path, self._event_time(mtime, system_time))],
            new_source_state=make_state(STATE_LAST_MODIFIED, mtime.isoformat()),
        )

    def _stat_file(self, url: str) -> tuple[Path, Timestamp]:
        """The local file of a file:// URL (its real path, in an allowed directory) and its modification
        time (the source state it records)."""
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise FetchError(f"fetch.url: {url} names host {parts.netloc!r}; expected a local file:///path")
        path = confine(Path(urllib.request.url2pathname(parts.path)), self._options, "fetch.url")
        try:
            info = path.stat()
        except FileNotFoundError:
            raise SourceNotFoundError(
                f"fetch.url: file {path} does not exist (from {self._step.url})"
            ) from None
        except OSError as e:
            raise FetchError(f"fetch.url: cannot read file {path}: {e.strerror}") from None
        if not stat.S_ISREG(info.st_mode):
            raise FetchError(f"fetch.url: {path} is not a regular file; expected a data file")
        return path, file_mtime(info)

    # ----- http(s) -----

    def _fetch_http(self, url: str, prev_state: SourceState | None, system_time: Timestamp) -> FetchResult:
        shown = self._step.url  # the manifest's form: templated secrets stay out of messages
        response = self._open(url, prev_state)
        try:
            status = response.getcode()
            if status == 304:
                self._options.log(f"fetch.url: {shown} not modified (HTTP 304)")
                return up_to_date(prev_state)
            self._check_status(response, status, shown)
            last_modified = self._last_modified(response.headers.get("Last-Modified"))
            etag = response.headers.get("ETag")
            new_state = _http_state(etag, last_modified)
            if new_state is not None and new_state == prev_state:
                self._options.log(f"fetch.url: {shown} ignored the conditional request but is unchanged")
                return up_to_date(prev_state)
            path = self._download(response, shown)
        finally:
            response.close()
        return FetchResult(
            files=[FetchedFile(path, self._event_time(last_modified, system_time))],
            new_source_state=new_state,
        )

    def _open(self, url: str, prev_state: SourceState | None) -> _Response:
        headers = {"User-Agent": USER_AGENT}
        for i, header in enumerate(self._step.headers or []):
            headers[header.name] = self._options.render(header.value, f"fetch.headers[{i}].value")
        previous = PollingState.of(prev_state, "fetch.url")
        if previous.etag is not None:
            headers["If-None-Match"] = previous.etag
        elif previous.last_modified is not None:
            headers["If-Modified-Since"] = format_datetime(previous.last_modified.to_datetime(), usegmt=True)
        try:
            return self._opener.open(
                urllib.request.Request(url, headers=headers), timeout=self._options.timeout
            )
        except urllib.error.HTTPError as e:
            return e  # a status to interpret (304, 404, 5xx), not a failure to connect
        except OSError as e:  # URLError, refused connection, DNS failure, timeout
            raise SourceUnreachableError(
                f"fetch.url: GET {self._step.url} failed: {getattr(e, 'reason', e)}; "
                f"expected an HTTP answer within {self._options.timeout:g} s"
            ) from None

    @staticmethod
    def _check_status(response: _Response, status: int, shown: str) -> None:
        if 200 <= status < 300:
            return
        answer = f"fetch.url: GET {shown} returned HTTP {status} {response.reason}"
        if status == 404:
            raise SourceNotFoundError(f"{answer}; expected 200 (does the URL exist?)")
        if 300 <= status < 400:
            raise FetchError(f"{answer}; expected 200 within at most {MAX_REDIRECTS} redirects")
        body = response.read(_BODY_EXCERPT).decode("utf-8", errors="replace").strip()
        raise SourceUnreachableError(
            f"{answer}; expected 200. Response body starts with: {body!r}",
            status=status,
            body=body,
            retryable=status >= 500 or status in (408, 429),
        )

    def _last_modified(self, value: str | None) -> Timestamp | None:
        if not value:
            return None
        try:
            return Timestamp.from_datetime(parsedate_to_datetime(value))
        except (TypeError, ValueError):
            self._options.log(f"fetch.url: ignoring unreadable Last-Modified header {value!r}")
            return None

    def _download(self, response: _Response, shown: str) -> Path:
        """Stream the body into a new file of the cache dir; a partial file never survives a failure."""
        self._options.cache_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="fetch-", suffix=".bin", dir=self._options.cache_dir)
        path = Path(name)
        length = response.headers.get("Content-Length")
        of_total = f" of {_mib(int(length))}" if length and length.isdigit() else ""
        done, next_report = 0, PROGRESS_EVERY
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    done += len(chunk)
                    if done >= next_report:
                        self._options.log(f"fetch.url: {shown}: {_mib(done)}{of_total} downloaded")
                        next_report += PROGRESS_EVERY
        except BaseException as e:
            path.unlink(missing_ok=True)
            if isinstance(e, (OSError, http.client.HTTPException)):
                raise SourceUnreachableError(
                    f"fetch.url: GET {shown} broke off after {_mib(done)}: {e!r}; expected the whole body"
                ) from None
            raise
        self._options.log(f"fetch.url: {shown}: download complete, {_mib(done)} in {path.name}")
        return path


def _http_state(etag: str | None, last_modified: Timestamp | None) -> SourceState | None:
    """ETag if the server gave one, else Last-Modified, else None (the source is then "uncacheable")."""
    if etag:
        return make_state(STATE_ETAG, etag)
    if last_modified is not None:
        return make_state(STATE_LAST_MODIFIED, last_modified.isoformat())
    return None


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"

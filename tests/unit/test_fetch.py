"""Fetch steps against real things: an HTTP server on 127.0.0.1, real files, a fake container runtime."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.model import (
    EnvVar,
    EventTimeSourceFromMetadata,
    EventTimeSourceFromPath,
    EventTimeSourceFromSystemTime,
    FetchStepContainer,
    FetchStepEthereumLogs,
    FetchStepFilesGlob,
    FetchStepMqtt,
    FetchStepUrl,
    MqttTopicSubscription,
    RequestHeader,
    SourceCachingForever,
    SourceOrdering,
    SourceState,
)
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.fetch.fetcher import (
    ContainerRuntimeError,
    FetchError,
    FetchOptions,
    FetchResult,
    SourceFetcher,
    SourceNotFoundError,
    SourceUnreachableError,
)
from airflow_odf.odf.ingest.fetch.templating import TemplateError, render
from airflow_odf.odf.ingest.fetch.time_formats import java_to_strftime, parse_timestamp
from airflow_odf.odf.ingest.trust import SourceTrust

SYSTEM_TIME = Timestamp.parse("2050-01-01T00:00:00Z")
LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"


def etag(value: str) -> SourceState:
    return SourceState(source_name="default", kind="odf/etag", value=value)


def last_modified(value: str) -> SourceState:
    return SourceState(source_name="default", kind="odf/last-modified", value=value)


def options(tmp_path: Path, logs: list[str] | None = None, **kwargs: object) -> FetchOptions:
    """Options of a deployment that trusts these tests' manifests: Container sources on, local files
    under `tmp_path` (tests/unit/test_source_trust.py tests what is refused)."""
    log = logs.append if logs is not None else (lambda _line: None)
    kwargs.setdefault("trust", SourceTrust(allow_container_sources=True, local_source_dirs=(tmp_path,)))
    return FetchOptions(cache_dir=tmp_path / "cache", log=log, **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# A real HTTP server
# ------------------------------------------------------------------------------------------------


@dataclass
class Route:
    """What the server answers on one path; honours If-None-Match / If-Modified-Since like a real one."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    honour_conditions: bool = True


class _Handler(BaseHTTPRequestHandler):
    server: Server

    def do_GET(self) -> None:
        self.server.requests.append((self.path, dict(self.headers)))
        route = self.server.routes.get(self.path, Route(404, b"no such route"))
        time.sleep(route.delay)
        status = 304 if route.honour_conditions and self._not_modified(route) else route.status
        self.send_response(status)
        for name, value in route.headers.items():
            self.send_header(name, value)
        body = b"" if status == 304 else route.body
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _not_modified(self, route: Route) -> bool:
        if "If-None-Match" in self.headers:
            return self.headers["If-None-Match"] == route.headers.get("ETag")
        if "If-Modified-Since" in self.headers and "Last-Modified" in route.headers:
            since = parsedate_to_datetime(self.headers["If-Modified-Since"])
            return parsedate_to_datetime(route.headers["Last-Modified"]) <= since
        return False

    def log_message(self, format: str, *args: object) -> None:
        """Keep test output quiet."""


class Server(ThreadingHTTPServer):
    routes: dict[str, Route]
    requests: list[tuple[str, dict[str, str]]]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    srv = Server(("127.0.0.1", 0), _Handler)
    srv.routes, srv.requests = {}, []
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def fetch_url(server: Server, tmp_path: Path, path: str, prev: SourceState | None = None, **kw: object):
    step = FetchStepUrl(url=server.url(path))
    return SourceFetcher(step, options(tmp_path, **kw)).fetch(prev, SYSTEM_TIME)


# ------------------------------------------------------------------------------------------------
# Url: http
# ------------------------------------------------------------------------------------------------


def test_http_etag_state_and_conditional_request(server: Server, tmp_path: Path) -> None:
    server.routes["/data.csv"] = Route(
        body=b"a,b\n1,2\n", headers={"ETag": '"v1"', "Last-Modified": LAST_MODIFIED}
    )

    first = fetch_url(server, tmp_path, "/data.csv")
    assert first.new_source_state == etag('"v1"')
    assert not first.up_to_date and not first.has_more
    [file] = first.files
    assert file.path.read_bytes() == b"a,b\n1,2\n"
    assert file.path.parent == tmp_path / "cache"
    assert file.source_event_time == Timestamp.parse("2015-10-21T07:28:00Z")
    headers = server.requests[0][1]
    assert "If-None-Match" not in headers and "If-Modified-Since" not in headers
    assert headers["User-Agent"].startswith("airflow-provider-odf")

    second = fetch_url(server, tmp_path, "/data.csv", first.new_source_state)
    assert server.requests[1][1]["If-None-Match"] == '"v1"'
    assert second == FetchResult(files=[], new_source_state=etag('"v1"'), up_to_date=True)


def test_http_last_modified_state_sends_if_modified_since(server: Server, tmp_path: Path) -> None:
    server.routes["/lm"] = Route(body=b"x", headers={"Last-Modified": LAST_MODIFIED})

    first = fetch_url(server, tmp_path, "/lm")
    assert first.new_source_state == last_modified("2015-10-21T07:28:00Z")

    second = fetch_url(server, tmp_path, "/lm", first.new_source_state)
    assert server.requests[1][1]["If-Modified-Since"] == LAST_MODIFIED
    assert second.up_to_date and second.files == []

    older = fetch_url(server, tmp_path, "/lm", last_modified("2015-10-20T00:00:00.5Z"))
    assert server.requests[2][1]["If-Modified-Since"] == "Tue, 20 Oct 2015 00:00:00 GMT"
    assert older.files[0].path.read_bytes() == b"x"


def test_http_same_etag_on_200_is_up_to_date(server: Server, tmp_path: Path) -> None:
    """A server that ignores If-None-Match but returns the same ETag has not changed: no duplicate ingest."""
    server.routes["/deaf"] = Route(body=b"x", headers={"ETag": "e1"}, honour_conditions=False)
    result = fetch_url(server, tmp_path, "/deaf", etag("e1"))
    assert result.up_to_date and result.files == []
    assert not (tmp_path / "cache").exists()  # the body was not downloaded


def test_http_without_caching_headers_is_uncacheable(server: Server, tmp_path: Path) -> None:
    server.routes["/plain"] = Route(body=b"plain")

    first = fetch_url(server, tmp_path, "/plain")
    assert first.new_source_state is None
    assert first.files[0].source_event_time is None  # no Last-Modified: the core uses system time

    skipped = fetch_url(server, tmp_path, "/plain", has_previous_data=True)
    assert skipped == FetchResult(files=[], new_source_state=None, up_to_date=True, uncacheable=True)
    assert len(server.requests) == 1  # nothing was requested

    forced = fetch_url(server, tmp_path, "/plain", has_previous_data=True, fetch_uncacheable=True)
    assert forced.files[0].path.read_bytes() == b"plain"
    assert len(server.requests) == 2


def test_http_cache_forever_skips_once_ingested(server: Server, tmp_path: Path) -> None:
    server.routes["/once"] = Route(body=b"x", headers={"ETag": "e1"})
    step = FetchStepUrl(url=server.url("/once"), cache=SourceCachingForever())
    first = SourceFetcher(step, options(tmp_path)).fetch(None, SYSTEM_TIME)
    again = SourceFetcher(step, options(tmp_path, has_previous_data=True)).fetch(etag("e0"), SYSTEM_TIME)
    assert first.files and again.up_to_date and again.new_source_state == etag("e0")
    assert len(server.requests) == 1


def test_http_404_is_not_found(server: Server, tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError) as e:
        fetch_url(server, tmp_path, "/missing")
    assert e.value.retryable is False
    assert str(e.value).startswith(f"fetch.url: GET {server.url('/missing')} returned HTTP 404")


def test_http_500_is_unreachable_with_body(server: Server, tmp_path: Path) -> None:
    server.routes["/broken"] = Route(500, b"database is down\n" + b"x" * 5000)
    with pytest.raises(SourceUnreachableError) as e:
        fetch_url(server, tmp_path, "/broken")
    assert e.value.retryable is True
    assert e.value.status == 500
    assert e.value.body.startswith("database is down") and len(e.value.body) <= 1000
    assert "HTTP 500" in str(e.value) and "database is down" in str(e.value)


def test_http_403_is_unreachable_but_not_retryable(server: Server, tmp_path: Path) -> None:
    server.routes["/secret"] = Route(403, b"forbidden")
    with pytest.raises(SourceUnreachableError) as e:
        fetch_url(server, tmp_path, "/secret")
    assert e.value.status == 403 and e.value.retryable is False


def test_http_connection_refused_is_unreachable(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    step = FetchStepUrl(url=f"http://127.0.0.1:{port}/x")
    with pytest.raises(SourceUnreachableError) as e:
        SourceFetcher(step, options(tmp_path)).fetch(None, SYSTEM_TIME)
    assert e.value.retryable and f"127.0.0.1:{port}/x" in str(e.value)


def test_http_timeout_is_unreachable(server: Server, tmp_path: Path) -> None:
    server.routes["/slow"] = Route(body=b"late", delay=1.0)
    with pytest.raises(SourceUnreachableError, match=r"within 0.2 s"):
        fetch_url(server, tmp_path, "/slow", timeout=0.2)


def test_http_redirects_are_followed_but_bounded(server: Server, tmp_path: Path) -> None:
    server.routes["/old"] = Route(301, headers={"Location": "/new"})
    server.routes["/new"] = Route(body=b"moved", headers={"ETag": "m"})
    assert fetch_url(server, tmp_path, "/old").files[0].path.read_bytes() == b"moved"

    server.routes["/loop"] = Route(302, headers={"Location": "/loop"})
    with pytest.raises(FetchError, match=r"at most 10 redirects"):
        fetch_url(server, tmp_path, "/loop")


def test_http_templated_url_and_headers(server: Server, tmp_path: Path) -> None:
    server.routes["/api?token=t0k"] = Route(body=b"ok", headers={"ETag": "1"})
    step = FetchStepUrl(
        url=server.url("/api?token=${{ env.TOKEN }}"),
        headers=[RequestHeader(name="Authorization", value="Bearer ${{ env.TOKEN }} ${{ env.X || 'dflt' }}")],
    )
    env = {"TOKEN": "t0k"}
    result = SourceFetcher(step, options(tmp_path, env=env)).fetch(None, SYSTEM_TIME)
    assert result.files[0].path.read_bytes() == b"ok"
    assert server.requests[0][1]["Authorization"] == "Bearer t0k dflt"

    with pytest.raises(FetchError) as e:
        SourceFetcher(step, options(tmp_path, env={})).fetch(None, SYSTEM_TIME)
    assert str(e.value).startswith("fetch.url: environment variable TOKEN is not set")
    assert "t0k" not in str(e.value)


def test_http_event_time_sources(server: Server, tmp_path: Path) -> None:
    server.routes["/t"] = Route(body=b"x", headers={"Last-Modified": LAST_MODIFIED})
    step = FetchStepUrl(url=server.url("/t"), event_time=EventTimeSourceFromSystemTime())
    assert (
        SourceFetcher(step, options(tmp_path)).fetch(None, SYSTEM_TIME).files[0].source_event_time
        == SYSTEM_TIME
    )
    step = FetchStepUrl(url=server.url("/t"), event_time=EventTimeSourceFromMetadata())
    metadata_time = SourceFetcher(step, options(tmp_path)).fetch(None, SYSTEM_TIME).files[0].source_event_time
    assert metadata_time == Timestamp.parse("2015-10-21T07:28:00Z")
    with pytest.raises(FetchError, match=r"^fetch.eventTime: FromPath is supported only by FilesGlob"):
        SourceFetcher(
            FetchStepUrl(url=server.url("/t"), event_time=EventTimeSourceFromPath(pattern="(.*)")),
            options(tmp_path),
        )


def test_http_download_reports_progress(server: Server, tmp_path: Path) -> None:
    body = os.urandom(9 * 1024 * 1024)
    server.routes["/big"] = Route(body=body, headers={"ETag": "big"})
    logs: list[str] = []
    result = fetch_url(server, tmp_path, "/big", logs=logs)
    assert result.files[0].path.read_bytes() == body
    progress = [line for line in logs if "MiB" in line]
    assert progress[0].endswith("4.0 MiB of 9.0 MiB downloaded")
    assert progress[1].endswith("8.0 MiB of 9.0 MiB downloaded")
    assert "download complete, 9.0 MiB" in progress[2]


def test_unknown_scheme_and_previous_state_kind(server: Server, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match=r"scheme 'ftp' .* expected http, https or file"):
        SourceFetcher(FetchStepUrl(url="ftp://example.com/x"), options(tmp_path)).fetch(None, SYSTEM_TIME)
    odd = SourceState(source_name="default", kind="acme/cursor", value="1")
    with pytest.raises(FetchError, match=r"kind 'acme/cursor'; expected 'odf/etag' or 'odf/last-modified'"):
        fetch_url(server, tmp_path, "/x", odd)


# ------------------------------------------------------------------------------------------------
# Url: file://
# ------------------------------------------------------------------------------------------------


def test_file_url_state_is_mtime_in_ms_and_zero_copy(tmp_path: Path) -> None:
    data = tmp_path / "in put.csv"
    data.write_text("a\n1\n")
    os.utime(data, ns=(0, 1_700_000_000_123_456_789))
    step = FetchStepUrl(url=data.as_uri())
    fetcher = SourceFetcher(step, options(tmp_path))

    first = fetcher.fetch(None, SYSTEM_TIME)
    assert first.new_source_state == last_modified("2023-11-14T22:13:20.123Z")
    assert first.files[0].path == data  # not copied
    assert first.files[0].source_event_time == Timestamp.parse("2023-11-14T22:13:20.123Z")

    assert fetcher.fetch(first.new_source_state, SYSTEM_TIME).up_to_date

    os.utime(data, ns=(0, 1_700_000_000_123_600_000))  # rounds up to .124
    changed = fetcher.fetch(first.new_source_state, SYSTEM_TIME)
    assert changed.new_source_state == last_modified("2023-11-14T22:13:20.124Z")


def test_file_url_missing_is_not_found(tmp_path: Path) -> None:
    step = FetchStepUrl(url=(tmp_path / "nope.csv").as_uri())
    with pytest.raises(SourceNotFoundError, match=r"nope.csv does not exist"):
        SourceFetcher(step, options(tmp_path)).fetch(None, SYSTEM_TIME)


# ------------------------------------------------------------------------------------------------
# FilesGlob
# ------------------------------------------------------------------------------------------------


def make_files(directory: Path, names: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text(f"content of {name}\n")


def drain(fetcher: SourceFetcher, prev: SourceState | None = None) -> list[FetchResult]:
    results = []
    while True:
        result = fetcher.fetch(prev, SYSTEM_TIME)
        results.append(result)
        prev = result.new_source_state
        if not result.has_more:
            return results


def test_glob_by_name_one_file_per_iteration(tmp_path: Path) -> None:
    make_files(
        tmp_path / "in", ["data-2024-01-02.csv", "data-2024-01-01.csv", "data-2024-01-03.csv", "x.txt"]
    )
    (tmp_path / "in" / "data-dir.csv").mkdir()  # directories are not files
    step = FetchStepFilesGlob(
        path=str(tmp_path / "in" / "data-*.csv"),
        event_time=EventTimeSourceFromPath(pattern=r"data-(\d+-\d+-\d+)\.csv"),
    )
    results = drain(SourceFetcher(step, options(tmp_path)))
    assert [[(f.name, f.source_event_time) for f in r.files] for r in results] == [
        [("data-2024-01-01.csv", Timestamp.parse("2024-01-01T00:00:00Z"))],
        [("data-2024-01-02.csv", Timestamp.parse("2024-01-02T00:00:00Z"))],
        [("data-2024-01-03.csv", Timestamp.parse("2024-01-03T00:00:00Z"))],
    ]
    assert [r.new_source_state for r in results] == [
        etag("data-2024-01-01.csv"),
        etag("data-2024-01-02.csv"),
        etag("data-2024-01-03.csv"),
    ]
    assert [r.has_more for r in results] == [True, True, False]
    assert results[0].files[0].path.read_text() == "content of data-2024-01-01.csv\n"

    # A new run resumes after the state; older names that appear later are skipped, as in the reference.
    make_files(tmp_path / "in", ["data-2024-01-04.csv", "data-2023-12-31.csv"])
    later = SourceFetcher(step, options(tmp_path)).fetch(etag("data-2024-01-03.csv"), SYSTEM_TIME)
    assert [f.name for f in later.files] == ["data-2024-01-04.csv"]
    assert SourceFetcher(step, options(tmp_path)).fetch(later.new_source_state, SYSTEM_TIME).up_to_date


def test_a_relative_glob_resolves_from_the_source_directory_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/sources.md: a relative `path` is taken from the task's `source_dir` (`base_dir`), else from the
    first directory local sources may read (`odf --source-root`, ODF_LOCAL_SOURCE_DIRS) — issue 36: the
    command resolved it from the working directory, so it failed from any other one."""
    source_dir, elsewhere = tmp_path / "landing", tmp_path / "elsewhere"
    make_files(source_dir / "in", ["a.csv", "b.csv"])
    make_files(elsewhere / "in", ["decoy.csv"])  # what the working directory would have matched
    monkeypatch.chdir(elsewhere)
    step = FetchStepFilesGlob(path="in/*.csv")
    trusted = SourceTrust(local_source_dirs=(source_dir,))
    by_task = drain(SourceFetcher(step, options(tmp_path, files_per_batch=5, base_dir=source_dir)))
    by_root = drain(SourceFetcher(step, options(tmp_path, files_per_batch=5, trust=trusted)))
    for results in (by_task, by_root):
        assert [f.path for r in results for f in r.files] == [
            source_dir / "in" / "a.csv",
            source_dir / "in" / "b.csv",
        ]
    # without either, the working directory is the source directory (and the one local sources may read)
    alone = drain(SourceFetcher(step, options(tmp_path, trust=SourceTrust())))
    assert [f.path for r in alone for f in r.files] == [elsewhere / "in" / "decoy.csv"]


def test_glob_files_per_batch(tmp_path: Path) -> None:
    make_files(tmp_path, [f"f{i}.csv" for i in range(5)])
    step = FetchStepFilesGlob(path=str(tmp_path / "*.csv"))
    results = drain(SourceFetcher(step, options(tmp_path, files_per_batch=2)))
    assert [[f.name for f in r.files] for r in results] == [
        ["f0.csv", "f1.csv"],
        ["f2.csv", "f3.csv"],
        ["f4.csv"],
    ]
    assert [r.new_source_state.value for r in results if r.new_source_state] == ["f1.csv", "f3.csv", "f4.csv"]
    assert all(f.source_event_time == SYSTEM_TIME for r in results for f in r.files)


def test_glob_empty_match(tmp_path: Path) -> None:
    step = FetchStepFilesGlob(path=str(tmp_path / "*.csv"))
    with pytest.raises(SourceNotFoundError, match=r"^fetch.path: no regular file matches") as e:
        SourceFetcher(step, options(tmp_path)).fetch(None, SYSTEM_TIME)
    assert e.value.retryable is False
    assert SourceFetcher(step, options(tmp_path)).fetch(etag("old.csv"), SYSTEM_TIME).up_to_date


def test_glob_by_event_time(tmp_path: Path) -> None:
    make_files(
        tmp_path, ["zulu-20240101T000000.csv", "alpha-20240103T120000.csv", "mike-20240102T060000.csv"]
    )
    step = FetchStepFilesGlob(
        path=str(tmp_path / "*.csv"),
        order=SourceOrdering.BY_EVENT_TIME,
        event_time=EventTimeSourceFromPath(
            pattern=r"-(\d{8}T\d{6})\.csv$", timestamp_format="yyyyMMdd'T'HHmmss"
        ),
    )
    results = drain(SourceFetcher(step, options(tmp_path)))
    assert [(r.files[0].name, r.files[0].source_event_time.isoformat()) for r in results] == [  # type: ignore[union-attr]
        ("zulu-20240101T000000.csv", "2024-01-01T00:00:00Z"),
        ("mike-20240102T060000.csv", "2024-01-02T06:00:00Z"),
        ("alpha-20240103T120000.csv", "2024-01-03T12:00:00Z"),
    ]
    # The state is the last file name; a new run finds its place by (event time from that name, name).
    make_files(tmp_path, ["bravo-20240104T000000.csv"])
    resumed = SourceFetcher(step, options(tmp_path)).fetch(etag("mike-20240102T060000.csv"), SYSTEM_TIME)
    assert [f.name for f in resumed.files] == ["alpha-20240103T120000.csv"] and resumed.has_more


def test_glob_by_event_time_needs_from_path(tmp_path: Path) -> None:
    step = FetchStepFilesGlob(path=str(tmp_path / "*"), order=SourceOrdering.BY_EVENT_TIME)
    with pytest.raises(FetchError, match=r"^fetch.order: ByEventTime .* expected eventTime of kind FromPath"):
        SourceFetcher(step, options(tmp_path))


@pytest.mark.parametrize(
    "pattern, fmt, name, message",
    [
        (r"data-\d+\.csv", None, "data-1.csv", r"^fetch.eventTime.pattern: pattern .* has no group 1"),
        (r"(", None, "data-1.csv", r"^fetch.eventTime.pattern: '\(' is not a valid regex"),
        (r"day-(\d+)\.csv", None, "data-1.csv", r"file name 'data-1.csv' of file .* does not match pattern"),
        (
            r"data-(\d+)\.csv",
            "%Y-%m-%d",
            "data-1.csv",
            r"^fetch.eventTime.timestampFormat: file name 'data-1.csv'",
        ),
    ],
)
def test_glob_from_path_errors(
    tmp_path: Path, pattern: str, fmt: str | None, name: str, message: str
) -> None:
    make_files(tmp_path, [name])
    step = FetchStepFilesGlob(
        path=str(tmp_path / "*.csv"),
        event_time=EventTimeSourceFromPath(pattern=pattern, timestamp_format=fmt),
    )
    with pytest.raises(FetchError, match=message):
        SourceFetcher(step, options(tmp_path)).fetch(None, SYSTEM_TIME)


def test_glob_from_metadata_uses_mtime(tmp_path: Path) -> None:
    make_files(tmp_path, ["a.csv"])
    os.utime(tmp_path / "a.csv", ns=(0, 1_600_000_000_000_000_000))
    step = FetchStepFilesGlob(path=str(tmp_path / "*.csv"), event_time=EventTimeSourceFromMetadata())
    [file] = SourceFetcher(step, options(tmp_path)).fetch(None, SYSTEM_TIME).files
    assert file.source_event_time == Timestamp.parse("2020-09-13T12:26:40Z")


def test_glob_backfill_lists_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"part-{i:05d}.csv" for i in range(1000)]
    make_files(tmp_path, names)
    calls = []
    real_scandir = os.scandir

    def counting_scandir(path: str) -> object:
        calls.append(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", counting_scandir)
    fetcher = SourceFetcher(FetchStepFilesGlob(path=str(tmp_path / "*.csv")), options(tmp_path))
    results = drain(fetcher)
    assert [r.files[0].name for r in results] == names
    assert len(calls) == 1

    # Handing back a state the fetcher did not return (another writer moved on) makes it list again.
    assert fetcher.fetch(etag("part-00997.csv"), SYSTEM_TIME).files[0].name == "part-00998.csv"
    assert len(calls) == 2


def test_glob_state_of_another_kind_is_an_error(tmp_path: Path) -> None:
    make_files(tmp_path, ["a.csv"])
    step = FetchStepFilesGlob(path=str(tmp_path / "*.csv"))
    with pytest.raises(FetchError, match=r"kind 'odf/last-modified'; expected 'odf/etag'"):
        SourceFetcher(step, options(tmp_path)).fetch(last_modified("2024-01-01T00:00:00Z"), SYSTEM_TIME)


# ------------------------------------------------------------------------------------------------
# Timestamp formats of FromPath, templates
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, fmt, expected",
    [
        ("2024-01-31", None, "2024-01-31T00:00:00Z"),
        ("2024-01-31", "%Y-%m-%d", "2024-01-31T00:00:00Z"),
        ("2024-01-31", "yyyy-MM-dd", "2024-01-31T00:00:00Z"),
        ("20240131T123456", "yyyyMMdd'T'HHmmss", "2024-01-31T12:34:56Z"),
        ("20240131T123456", "%Y%m%dT%H%M%S", "2024-01-31T12:34:56Z"),
        ("2024-01-31T12:00:00.123+01:00", "%Y-%m-%dT%H:%M:%S%.3f%:z", "2024-01-31T11:00:00.123Z"),
        ("2024-01-31T12:00:00.5Z", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "2024-01-31T12:00:00.500Z"),
        ("31 Jan 2024 o'clock", "dd MMM yyyy 'o''clock'", "2024-01-31T00:00:00Z"),
    ],
)
def test_timestamp_formats(text: str, fmt: str | None, expected: str) -> None:
    assert parse_timestamp(text, fmt).isoformat() == expected


def test_java_literals_are_escaped_for_strptime() -> None:
    """A `%` anywhere marks strftime, so a Java literal `%` only occurs when translating directly."""
    assert java_to_strftime("'100%' yyyy-MM-dd''HH") == "100%% %Y-%m-%d'%H"


def test_timestamp_format_errors() -> None:
    with pytest.raises(OdfFormatError, match=r"pattern letter 'G' is not supported"):
        java_to_strftime("G yyyy")
    with pytest.raises(OdfFormatError, match=r"'2024/01/31' does not have the timestamp format 'yyyy-MM-dd'"):
        parse_timestamp("2024/01/31", "yyyy-MM-dd")


def test_templates() -> None:
    env = {"A": "1", "EMPTY": ""}
    assert render("x${{ env.A }}y${{env.B || 'two'}}z${{ env.EMPTY || 'd' }}", env.get, "f") == "x1ytwoz"
    assert render("no templates, ${ env.A }", env.get, "f") == "no templates, ${ env.A }"
    with pytest.raises(TemplateError, match=r"^f: environment variable B is not set"):
        render("${{ env.B }}", env.get, "f")
    with pytest.raises(TemplateError, match=r"^f: unsupported template '\$\{\{ secrets.B \}\}'"):
        render("${{ secrets.B }}", env.get, "f")


def test_template_defaults_to_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "d.csv"
    data.write_text("x")
    monkeypatch.setenv("ODF_TEST_DIR", str(tmp_path))
    step = FetchStepUrl(url="file://${{ env.ODF_TEST_DIR }}/d.csv")
    assert SourceFetcher(step, options(tmp_path)).fetch(None, SYSTEM_TIME).files[0].path == data


# ------------------------------------------------------------------------------------------------
# Unsupported kinds
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "step, kind",
    [
        (FetchStepMqtt(host="localhost", port=1883, topics=[MqttTopicSubscription(path="t")]), "Mqtt"),
        (FetchStepEthereumLogs(node_url="http://localhost:8545"), "EthereumLogs"),
    ],
)
def test_unsupported_fetch_kinds(tmp_path: Path, step: object, kind: str) -> None:
    with pytest.raises(FetchError, match=rf"^fetch: FetchStep kind {kind} is not supported by this provider"):
        SourceFetcher(step, options(tmp_path))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# Container, through a fake `docker` that runs a local script under the same env contract
# ------------------------------------------------------------------------------------------------

FAKE_DOCKER = f"""#!{sys.executable}
import json, os, subprocess, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(json.dumps(argv) + "\\n")
if argv[0] == "info":
    sys.exit(0)
assert argv[:2] == ["run", "--rm"], argv
i, names, volume, entrypoint = 2, [], None, None
while argv[i] != "--":  # the options end with `--`, as docker and podman allow
    if argv[i].startswith("--entrypoint="):
        entrypoint = argv[i].partition("=")[2]
        i += 1
        continue
    flag, value = argv[i], argv[i + 1]
    i += 2
    if flag == "-v":
        volume = value
    elif flag == "-e":
        names.append(value)
host_dir, container_dir = volume.rsplit(":", 1)
env = {{"PATH": os.environ["PATH"]}}
env.update({{n: os.environ[n].replace(container_dir, host_dir) for n in names}})
image, rest = argv[i + 1], argv[i + 2:]
sys.exit(subprocess.call([entrypoint or image, *rest], env=env))
"""

# Serves 3 pages of ODF_BATCH_SIZE rows, one page per run, keeping the page number as its ETag.
# Modes: pages, last-modified, fail, stuck (keeps its ETag, no rows), noisy (keeps its ETag, writes rows).
FETCHER = f"""#!{sys.executable}
import os, sys
mode, env = sys.argv[1], os.environ
assert "HOME_MARKER" not in env  # only the contract's variables and the step's env get in
if mode == "fail":
    print("boom: upstream API said no", file=sys.stderr)
    sys.exit(3)
previous = int(env["ODF_ETAG"] or 0)
page = previous if mode in ("stuck", "noisy") else min(previous + 1, 3)
if page != previous or mode == "noisy":
    for i in range(int(env["ODF_BATCH_SIZE"])):
        print(f"{{page}},{{i}},{{env['GREETING']}}")
if mode == "last-modified":
    open(env["ODF_NEW_LAST_MODIFIED_PATH"], "w").write("2024-01-01T00:00:00+01:00\\n")
else:
    open(env["ODF_NEW_ETAG_PATH"], "w").write(f"{{page}}\\n")
if page < 3:
    open(env["ODF_NEW_HAS_MORE_DATA_PATH"], "w").close()
print(f"served page {{page}}", file=sys.stderr)
"""


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Puts a fake `docker` first on PATH; returns the log of the command lines it received."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir / "docker", FAKE_DOCKER)
    log = tmp_path / "docker.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    monkeypatch.setenv("HOME_MARKER", "host only")
    return log


def container_step(tmp_path: Path) -> FetchStepContainer:
    script = executable(tmp_path / "fetcher.py", FETCHER)
    return FetchStepContainer(
        image="ghcr.io/example/fetcher:1",
        command=[str(script)],
        args=["${{ env.MODE || 'pages' }}"],
        env=[EnvVar(name="ODF_BATCH_SIZE", value="2"), EnvVar(name="GREETING")],
    )


def test_container_pages_with_state_and_has_more(tmp_path: Path, fake_docker: Path) -> None:
    fetcher = SourceFetcher(container_step(tmp_path), options(tmp_path, env={"GREETING": "hi"}))
    results = drain(fetcher)
    assert [r.files[0].path.read_text() for r in results] == [
        "1,0,hi\n1,1,hi\n",
        "2,0,hi\n2,1,hi\n",
        "3,0,hi\n3,1,hi\n",
    ]
    assert [r.new_source_state for r in results] == [etag("1"), etag("2"), etag("3")]
    assert [r.has_more for r in results] == [True, True, False]
    assert all(r.files[0].source_event_time is None for r in results)

    done = fetcher.fetch(etag("3"), SYSTEM_TIME)
    assert done == FetchResult(files=[], new_source_state=etag("3"), up_to_date=True)
    assert sorted(p.suffix for p in (tmp_path / "cache").iterdir()) == [".out"] * 3  # only the data

    calls = [json.loads(line) for line in fake_docker.read_text().splitlines()]
    assert [c[0] for c in calls] == ["info", "run", "run", "run", "run"]  # the engine is probed once
    run = calls[1]
    assert f"--entrypoint={tmp_path / 'fetcher.py'}" in run
    assert run[-3:] == ["--", "ghcr.io/example/fetcher:1", "pages"]
    assert run[run.index("-v") + 1].endswith(":/opt/odf/out")
    passed = {run[i + 1] for i, arg in enumerate(run) if arg == "-e"}
    assert passed == {
        "ODF_ETAG",
        "ODF_LAST_MODIFIED",
        "ODF_NEW_ETAG_PATH",
        "ODF_NEW_LAST_MODIFIED_PATH",
        "ODF_NEW_HAS_MORE_DATA_PATH",
        "ODF_BATCH_SIZE",
        "GREETING",
    }
    assert not any("hi" in arg for arg in run)  # values are not on the command line


def test_container_last_modified_state(tmp_path: Path, fake_docker: Path) -> None:
    env = {"MODE": "last-modified", "GREETING": "x"}
    fetcher = SourceFetcher(container_step(tmp_path), options(tmp_path, env=env))
    result = fetcher.fetch(None, SYSTEM_TIME)
    assert result.new_source_state == last_modified("2023-12-31T23:00:00Z")
    assert result.files[0].path.read_text() == "1,0,x\n1,1,x\n"


def test_container_failure_carries_stderr(tmp_path: Path, fake_docker: Path) -> None:
    fetcher = SourceFetcher(
        container_step(tmp_path), options(tmp_path, env={"MODE": "fail", "GREETING": "x"})
    )
    with pytest.raises(ContainerRuntimeError) as e:
        fetcher.fetch(None, SYSTEM_TIME)
    assert "exited with code 3" in str(e.value) and "boom: upstream API said no" in str(e.value)
    assert e.value.retryable is True
    [log] = (tmp_path / "cache").iterdir()  # no data file or volume dir left, the stderr log kept
    assert log.name.endswith(".err.txt") and str(log) in str(e.value)


def test_container_same_state_with_data_is_a_protocol_error(tmp_path: Path, fake_docker: Path) -> None:
    step = container_step(tmp_path)
    stuck = SourceFetcher(step, options(tmp_path, env={"MODE": "stuck", "GREETING": "x"}))
    assert stuck.fetch(etag("2"), SYSTEM_TIME) == FetchResult([], etag("2"), up_to_date=True)
    # Keeping the ETag while writing rows would ingest the same rows on every run.
    noisy = SourceFetcher(step, options(tmp_path, env={"MODE": "noisy", "GREETING": "x"}))
    with pytest.raises(FetchError, match=r"wrote 12 bytes but kept the state odf/etag='2'.*protocol error"):
        noisy.fetch(etag("2"), SYSTEM_TIME)


def test_container_env_without_value_must_be_set(tmp_path: Path, fake_docker: Path) -> None:
    with pytest.raises(FetchError, match=r"^fetch.env\[1\]: GREETING has no value and is not set"):
        SourceFetcher(container_step(tmp_path), options(tmp_path, env={})).fetch(None, SYSTEM_TIME)


def test_container_without_engine_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir / "docker", "#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(ContainerRuntimeError) as e:
        SourceFetcher(container_step(tmp_path), options(tmp_path, env={"GREETING": "x"})).fetch(
            None, SYSTEM_TIME
        )
    message = str(e.value)
    assert message.startswith(
        "fetch.image: running ghcr.io/example/fetcher:1 needs a working docker or podman"
    )
    assert "`docker info` exited with code 1: Cannot connect to the Docker daemon" in message
    assert "podman: not found on PATH" in message
    assert e.value.retryable is False


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI on this machine")
def test_container_with_real_docker_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real CLI: either the engine runs (then `info` passes) or the error says what is missing."""
    real = shutil.which("docker")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").symlink_to(real)
    monkeypatch.setenv("PATH", str(bin_dir))
    fetcher = SourceFetcher(container_step(tmp_path), options(tmp_path, env={"GREETING": "x"}, timeout=10))
    try:
        fetcher.fetch(None, SYSTEM_TIME)
    except ContainerRuntimeError as e:
        assert "needs a working docker or podman engine" in str(e) or "exited with code" in str(e)

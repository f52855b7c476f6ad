"""`check_source`: does a polling source have new data, asked of real sources (an HTTP server on
127.0.0.1, files on disk) for datasets whose chains record what was ingested last."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, Multihash
from airflow_odf.odf.ingest.fetch.templating import TemplateError
from airflow_odf.odf.ingest.fetch.types import SourceUnreachableError, file_mtime
from airflow_odf.odf.ingest.source_check import SourceCheckError, check_source
from airflow_odf.odf.ingest.trust import SourceTrust
from airflow_odf.odf.repo.repository import Repository

LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"


# ------------------------------------------------------------------------------------------------
# A real HTTP server (also used by the Airflow-layer sensor and DAG tests)
# ------------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: HttpSource

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.requests.append((self.path, dict(self.headers)))
            status, body, headers, conditional = self.server.files.get(
                self.path, (404, b"no such file", {}, False)
            )
        if status == 200 and conditional and self._not_modified(headers):
            status, body = 304, b""
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _not_modified(self, headers: dict[str, str]) -> bool:
        if "If-None-Match" in self.headers:
            return self.headers["If-None-Match"] == headers.get("ETag")
        if "If-Modified-Since" in self.headers and "Last-Modified" in headers:
            since = parsedate_to_datetime(self.headers["If-Modified-Since"])
            return parsedate_to_datetime(headers["Last-Modified"]) <= since
        return False

    def log_message(self, format: str, *args: object) -> None:
        """Keep test output quiet."""


class HttpSource(ThreadingHTTPServer):
    """Serves files set with `put`, honouring If-None-Match / If-Modified-Since like a real server."""

    files: dict[str, tuple[int, bytes, dict[str, str], bool]]
    requests: list[tuple[str, dict[str, str]]]
    lock: threading.Lock

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"

    def put(
        self, path: str, body: bytes, *, status: int = 200, conditional: bool = True, **headers: str
    ) -> None:
        """Serve `body` at `path`; `headers` by keyword (`ETag=`, `Last_Modified=`: `_` becomes `-`).
        `conditional=False` makes the server ignore If-None-Match / If-Modified-Since."""
        with self.lock:
            named = {k.replace("_", "-"): v for k, v in headers.items()}
            self.files[path] = (status, body, named, conditional)


def start_http_source(monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpSource]:
    """A running `HttpSource` (no proxy in the way); stopped when the generator is closed."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    srv = HttpSource(("127.0.0.1", 0), _Handler)
    srv.files, srv.requests, srv.lock = {}, [], threading.Lock()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def http(monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpSource]:
    yield from start_http_source(monkeypatch)


# ------------------------------------------------------------------------------------------------
# Datasets whose chain says what was ingested last (metadata only: the check reads no data)
# ------------------------------------------------------------------------------------------------

_SCHEMA = model.SetDataSchema(
    schema=model.DataSchema(
        fields=[
            model.DataField(name="offset", type=model.DataTypeInt64()),
            model.DataField(name="value", type=model.DataTypeString()),
        ]
    )
)


def root(tmp_path: Path, fetch: Any, name: str = "com.example.source") -> Dataset:
    repo = Repository.init(tmp_path / "repo")
    source = model.SetPollingSource(
        fetch=fetch, read=model.ReadStepCsv(header=True), merge=model.MergeStrategyAppend()
    )
    repo.add(model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=[source]))
    return repo.dataset(name)


def ingested(dataset: Dataset, source_state: model.SourceState | None, *, records: int = 2) -> None:
    """Records an ingest as AddData with a data slice and the source state it left behind."""
    state = dataset.state()
    start = 0 if state.last_offset is None else state.last_offset + 1
    data = model.DataSlice(
        logical_hash=Multihash(ARROW0_SHA3_256, bytes(32)),
        physical_hash=Multihash.sha3_256(f"slice-{start}".encode()),
        offset_interval=model.OffsetInterval(start=start, end=start + records - 1),
        size=100,
    )
    event = model.AddData(prev_offset=state.last_offset, new_data=data, new_source_state=source_state)
    dataset.commit([event] if state.schema is not None else [_SCHEMA, event])


def etag(value: str) -> model.SourceState:
    return model.SourceState(source_name="default", kind="odf/etag", value=value)


def last_modified(value: str) -> model.SourceState:
    return model.SourceState(source_name="default", kind="odf/last-modified", value=value)


# ------------------------------------------------------------------------------------------------
# Url: http
# ------------------------------------------------------------------------------------------------


def test_http_etag_unchanged_then_changed(http: HttpSource, tmp_path: Path) -> None:
    http.put("/prices.csv", b"a\n1\n", ETag='"v1"', Last_Modified=LAST_MODIFIED)
    dataset = root(tmp_path, model.FetchStepUrl(url=http.url("/prices.csv")))

    first = check_source(dataset, "prices")
    assert first.changed and '"v1"' in first.reason
    assert "If-None-Match" not in http.requests[-1][1]

    ingested(dataset, etag('"v1"'))
    same = check_source(dataset, "prices")
    assert not same.changed and "304" in same.reason
    assert http.requests[-1][1]["If-None-Match"] == '"v1"'

    http.put("/prices.csv", b"a\n1\n2\n", ETag='"v2"', Last_Modified=LAST_MODIFIED)
    moved = check_source(dataset, "prices")
    assert moved.changed and '"v2"' in moved.reason
    assert moved.as_dict() == {"changed": True, "reason": moved.reason}


def test_http_last_modified_is_sent_as_if_modified_since(http: HttpSource, tmp_path: Path) -> None:
    http.put("/prices.csv", b"a\n1\n", Last_Modified=LAST_MODIFIED)
    dataset = root(tmp_path, model.FetchStepUrl(url=http.url("/prices.csv")))
    ingested(dataset, last_modified("2015-10-21T07:28:00Z"))

    assert not check_source(dataset, "prices").changed
    assert http.requests[-1][1]["If-Modified-Since"] == LAST_MODIFIED

    http.put("/prices.csv", b"a\n1\n2\n", Last_Modified="Thu, 22 Oct 2015 07:28:00 GMT")
    assert check_source(dataset, "prices").changed


def test_http_server_ignoring_the_condition_but_unchanged(http: HttpSource, tmp_path: Path) -> None:
    """A 200 carrying the recorded ETag (the server ignored If-None-Match) is still "no new data"."""
    http.put("/prices.csv", b"a\n1\n", ETag='"v1"', conditional=False)
    dataset = root(tmp_path, model.FetchStepUrl(url=http.url("/prices.csv")))
    ingested(dataset, etag('"v1"'))
    check = check_source(dataset, "prices")
    assert not check.changed and "unchanged" in check.reason
    assert http.requests[-1][1]["If-None-Match"] == '"v1"'


def test_http_missing_source_is_no_new_data(http: HttpSource, tmp_path: Path) -> None:
    dataset = root(tmp_path, model.FetchStepUrl(url=http.url("/not-yet.csv")))
    check = check_source(dataset, "prices")
    assert not check.changed and "404" in check.reason


def test_http_server_error_raises_retryable(http: HttpSource, tmp_path: Path) -> None:
    http.put("/prices.csv", b"overloaded", status=503)
    dataset = root(tmp_path, model.FetchStepUrl(url=http.url("/prices.csv")))
    with pytest.raises(SourceUnreachableError) as info:
        check_source(dataset, "prices")
    assert info.value.retryable and info.value.status == 503


def test_http_refused_connection_raises_retryable(tmp_path: Path) -> None:
    dataset = root(tmp_path, model.FetchStepUrl(url="http://127.0.0.1:9/prices.csv"))
    with pytest.raises(SourceUnreachableError) as info:
        check_source(dataset, "prices", timeout=2)
    assert info.value.retryable


def test_uncacheable_source_is_unknown_so_yes(http: HttpSource, tmp_path: Path) -> None:
    http.put("/prices.csv", b"a\n1\n")
    dataset = root(tmp_path, model.FetchStepUrl(url=http.url("/prices.csv")))
    first = check_source(dataset, "prices")
    assert first.changed and "no ETag or Last-Modified" in first.reason

    ingested(dataset, None)
    asked = len(http.requests)
    again = check_source(dataset, "prices")
    assert again.changed and "only fetching it can tell" in again.reason
    assert len(http.requests) == asked  # nothing to ask the server


def test_url_from_env_template(http: HttpSource, tmp_path: Path) -> None:
    http.put("/prices.csv", b"a\n1\n", ETag='"v1"')
    dataset = root(tmp_path, model.FetchStepUrl(url="${{ env.PRICES_URL }}"))
    assert check_source(dataset, "prices", env={"PRICES_URL": http.url("/prices.csv")}).changed
    with pytest.raises(TemplateError, match="PRICES_URL"):
        check_source(dataset, "prices", env={})


def test_cache_forever_after_first_ingest(http: HttpSource, tmp_path: Path) -> None:
    http.put("/prices.csv", b"a\n1\n", ETag='"v1"')
    fetch = model.FetchStepUrl(url=http.url("/prices.csv"), cache=model.SourceCachingForever())
    dataset = root(tmp_path, fetch)
    assert check_source(dataset, "prices").changed
    ingested(dataset, etag('"v0"'))
    check = check_source(dataset, "prices")
    assert not check.changed and "cached forever" in check.reason


# ------------------------------------------------------------------------------------------------
# Url: file://
# ------------------------------------------------------------------------------------------------


def test_file_url_by_modification_time(tmp_path: Path) -> None:
    data = tmp_path / "prices.csv"
    data.write_text("a\n1\n")
    dataset = root(tmp_path, model.FetchStepUrl(url=data.as_uri()))
    assert check_source(dataset, "prices", source_dir=tmp_path).changed

    ingested(dataset, last_modified(file_mtime(data.stat()).isoformat()))
    assert not check_source(dataset, "prices", source_dir=tmp_path).changed

    later = data.stat().st_mtime_ns + 5_000_000_000
    os.utime(data, ns=(later, later))
    check = check_source(dataset, "prices", source_dir=tmp_path)
    assert check.changed and "modified at" in check.reason


def test_missing_file_url_is_no_new_data(tmp_path: Path) -> None:
    dataset = root(tmp_path, model.FetchStepUrl(url=(tmp_path / "absent.csv").as_uri()))
    check = check_source(dataset, "prices", source_dir=tmp_path)
    assert not check.changed and "does not exist" in check.reason


# ------------------------------------------------------------------------------------------------
# FilesGlob
# ------------------------------------------------------------------------------------------------


def test_glob_files_after_the_last_ingested_one(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    dataset = root(tmp_path, model.FetchStepFilesGlob(path="inbox/trades-*.csv"))

    nothing = check_source(dataset, "trades", source_dir=tmp_path)
    assert not nothing.changed and "nothing ingested yet" in nothing.reason

    for day in ("01", "02"):
        (inbox / f"trades-2024-01-{day}.csv").write_text("a\n1\n")
    first = check_source(dataset, "trades", source_dir=tmp_path)
    assert first.changed and "2 new file(s)" in first.reason

    ingested(dataset, etag("trades-2024-01-02.csv"))
    assert not check_source(dataset, "trades", source_dir=tmp_path).changed

    (inbox / "trades-2024-01-00.csv").write_text("a\n1\n")  # sorts before: not new for ByName
    assert not check_source(dataset, "trades", source_dir=tmp_path).changed

    (inbox / "trades-2024-01-03.csv").write_text("a\n1\n")
    check = check_source(dataset, "trades", source_dir=tmp_path)
    assert check.changed and "trades-2024-01-03.csv" in check.reason and "1 new file(s)" in check.reason


def test_glob_by_event_time_uses_the_ingest_order(tmp_path: Path) -> None:
    """ByEventTime orders by the time in the name, not the name: 9-Jan sorts before 10-Jan."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    fetch = model.FetchStepFilesGlob(
        path=str(inbox / "data-*.csv"),
        order=model.SourceOrdering.BY_EVENT_TIME,
        event_time=model.EventTimeSourceFromPath(
            pattern=r"data-(\d+-\d+-\d+)\.csv", timestamp_format="%d-%m-%Y"
        ),
    )
    dataset = root(tmp_path, fetch)
    (inbox / "data-10-01-2024.csv").write_text("a\n1\n")
    ingested(dataset, etag("data-10-01-2024.csv"))
    (inbox / "data-09-01-2024.csv").write_text("a\n1\n")  # older by name and by time
    (inbox / "data-11-01-2023.csv").write_text("a\n1\n")  # newer by name, older by time
    assert not check_source(dataset, "data", source_dir=tmp_path).changed
    (inbox / "data-01-02-2024.csv").write_text("a\n1\n")  # older by name, newer by time
    check = check_source(dataset, "data", source_dir=tmp_path)
    assert check.changed and "data-01-02-2024.csv" in check.reason


# ------------------------------------------------------------------------------------------------
# Other sources, other datasets
# ------------------------------------------------------------------------------------------------


def test_container_source_is_unknown_so_yes(tmp_path: Path) -> None:
    dataset = root(tmp_path, model.FetchStepContainer(image="example/fetch:1"))
    ingested(dataset, etag("page-3"))
    check = check_source(dataset, "feed", trust=SourceTrust(allow_container_sources=True))
    assert check.changed and "Container" in check.reason


def test_dataset_without_polling_source(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "repo")
    push = model.AddPushSource(
        source_name="default", read=model.ReadStepNdJson(), merge=model.MergeStrategyAppend()
    )
    repo.add(model.DatasetSnapshot(name="com.example.push", kind=model.DatasetKind.ROOT, metadata=[push]))
    with pytest.raises(SourceCheckError, match="no polling source"):
        check_source(repo.dataset("com.example.push"), "com.example.push")

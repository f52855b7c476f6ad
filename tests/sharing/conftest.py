"""Real servers for the sharing tests: an S3 API (moto's threaded server) and a static HTTP server
with injectable faults, both on 127.0.0.1 and free ports, so stores talk real HTTP."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.storage.s3 import S3ObjectStore
from airflow_odf.odf.storage.url import StoreCredentials

REGION = "us-east-1"
ACCESS_KEY = "testing-access-key"
SECRET_KEY = "testing-secret-key"


def moto_environment(endpoint: str, folder: Path) -> dict[str, str]:
    """The AWS variables of a child process (`odf`, spark-submit) that talks to the moto server at
    `endpoint` with the test's keys, and reads none of this machine's AWS configuration (the config
    files named are in `folder` and do not exist)."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_CONFIG_FILE": str(folder / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(folder / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@pytest.fixture(autouse=True)
def _fake_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test may reach real AWS credentials, config files or the instance metadata service."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _serialized(lock: threading.Lock, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return method(*args, **kwargs)

    return wrapper


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real S3 API on a free local port for the whole session.

    Real S3 evaluates `If-Match` / `If-None-Match` atomically with the write; moto checks them in the
    request handler and then writes, so two threads could both pass the check. Object PUTs and DELETEs
    are serialized here to give moto S3's atomicity (the stores' own code is not affected: a store that
    read then blindly overwrote would still lose updates in the race test)."""
    from moto.s3.responses import S3Response
    from moto.server import ThreadedMotoServer

    werkzeug_log = logging.getLogger("werkzeug")
    old_level = werkzeug_log.level
    werkzeug_log.setLevel(logging.ERROR)  # one line per request otherwise
    lock = threading.Lock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(S3Response, "put_object", _serialized(lock, S3Response.put_object))
        patch.setattr(S3Response, "delete_object", _serialized(lock, S3Response.delete_object))
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            yield f"http://{host}:{port}"
        finally:
            server.stop()
            werkzeug_log.setLevel(old_level)


@pytest.fixture
def s3_credentials(moto_endpoint: str) -> StoreCredentials:
    return StoreCredentials(
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region=REGION,
        endpoint_url=moto_endpoint,
    )


@pytest.fixture(scope="session")
def s3_admin(moto_endpoint: str) -> Any:
    """A plain boto3 client for test setup and for looking behind a store's back."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )


@pytest.fixture
def s3_bucket(s3_admin: Any) -> str:
    """A fresh, empty bucket for each test (names are unique, so tests never see each other's keys)."""
    name = f"odf-test-{uuid.uuid4().hex[:16]}"
    s3_admin.create_bucket(Bucket=name)
    return name


@pytest.fixture
def make_s3_store(moto_endpoint: str, s3_bucket: str) -> Callable[..., S3ObjectStore]:
    """Builds stores on the test's bucket (prefix and options vary per test)."""

    def make(prefix: str = "repo/ds", **options: Any) -> S3ObjectStore:
        return S3ObjectStore(
            s3_bucket,
            prefix,
            endpoint_url=moto_endpoint,
            region=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            **options,
        )

    return make


@pytest.fixture
def s3_store(make_s3_store: Callable[..., S3ObjectStore]) -> S3ObjectStore:
    return make_s3_store()


# ----- a static HTTP server with faults -----


@dataclass
class Faults:
    """What the server does wrong next: each counter is consumed one request at a time."""

    fail_next: int = 0
    fail_status: int = 503
    retry_after: str | None = None
    delay_next: int = 0
    delay_seconds: float = 0.0
    required_token: str | None = None
    no_head: bool = False
    truncate_next: int = 0


@dataclass
class Request:
    method: str
    path: str
    authorization: str | None


@dataclass
class HttpServer:
    url: str
    root: Path
    faults: Faults
    requests: list[Request] = field(default_factory=list)

    def count(self, method: str | None = None) -> int:
        return sum(1 for r in self.requests if method is None or r.method == method)


class _Handler(BaseHTTPRequestHandler):
    """Serves files under the root read-only (GET, HEAD), applying the fixture's faults."""

    state: HttpServer
    lock: threading.Lock

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _take(self, counter: str) -> bool:
        with self.lock:
            left = getattr(self.state.faults, counter)
            if left > 0:
                setattr(self.state.faults, counter, left - 1)
                return True
            return False

    def _serve(self, body: bool) -> None:
        state = self.state
        faults = state.faults
        state.requests.append(Request(self.command, self.path, self.headers.get("Authorization")))
        if self._take("delay_next"):
            time.sleep(faults.delay_seconds)
        token = faults.required_token
        if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
            self._status(HTTPStatus.UNAUTHORIZED)
            return
        if self._take("fail_next"):
            headers = {"Retry-After": faults.retry_after} if faults.retry_after is not None else {}
            self._status(HTTPStatus(faults.fail_status), headers)
            return
        if not body and faults.no_head:
            self._status(HTTPStatus.METHOD_NOT_ALLOWED)
            return
        root = state.root.resolve()
        path = (root / self.path.lstrip("/").split("?", 1)[0]).resolve()
        if root not in path.parents or not path.is_file():
            self._status(HTTPStatus.NOT_FOUND)
            return
        data = path.read_bytes()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        if body:
            if self._take("truncate_next"):
                self.wfile.write(data[: len(data) // 2])
                self.close_connection = True
                return
            self.wfile.write(data)

    def _status(self, status: HTTPStatus, headers: dict[str, str] | None = None) -> None:
        message = f"{status.value} {status.phrase}".encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(message)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(message)

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    """A real HTTP server on a free local port serving `root` read-only, with fault injection."""
    root = tmp_path / "served"
    root.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    state = HttpServer(url=f"http://127.0.0.1:{server.server_port}", root=root, faults=Faults())
    handler = type("Handler", (_Handler,), {"state": state, "lock": threading.Lock()})
    server.RequestHandlerClass = handler
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        with contextlib.suppress(RuntimeError):
            thread.join(timeout=5)

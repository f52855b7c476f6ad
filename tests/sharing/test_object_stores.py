"""Object-store backends: one contract for local and S3 (against a real S3 API), the read-only HTTP
store against a real HTTP server with injected faults, and repository URL parsing."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.storage.http import HttpObjectStore, HttpStoreError, ReadOnlyStoreError
from airflow_odf.odf.storage.local import LocalObjectStore
from airflow_odf.odf.storage.s3 import S3ObjectStore, S3StoreError
from airflow_odf.odf.storage.store import ConflictError, InvalidKeyError, ObjectNotFoundError, ObjectStore
from airflow_odf.odf.storage.url import StoreCredentials, StoreUrlError, join_url, open_store
from tests.sharing.conftest import ACCESS_KEY, REGION, SECRET_KEY, HttpServer

HEAD_A = b"f1620aaaa"
HEAD_B = b"f1620bbbb"
HEAD_C = b"f1620cccc"


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return LocalObjectStore(tmp_path / "store")
    return request.getfixturevalue("s3_store")


# ----- the contract every writable backend keeps -----


def test_put_get_roundtrip_and_overwrite(store: ObjectStore) -> None:
    store.put("blocks/f1620abc", b"block bytes")
    assert store.get("blocks/f1620abc") == b"block bytes"
    store.put("blocks/f1620abc", b"\x00\xffbinary")
    assert store.get("blocks/f1620abc") == b"\x00\xffbinary"
    store.put("info/empty", b"")
    assert store.get("info/empty") == b""
    assert store.size("info/empty") == 0


def test_missing_objects(store: ObjectStore, tmp_path: Path) -> None:
    with pytest.raises(ObjectNotFoundError, match="refs/head"):
        store.get("refs/head")
    assert store.get_or_none("refs/head") is None
    assert store.exists("refs/head") is False
    with pytest.raises(ObjectNotFoundError):
        store.size("refs/head")
    target = tmp_path / "out" / "file"
    target.parent.mkdir()
    with pytest.raises(ObjectNotFoundError):
        store.get_file("data/f1620nothing", target)
    assert not target.exists()
    assert list(target.parent.iterdir()) == []  # no temp file left behind


def test_exists_and_size(store: ObjectStore) -> None:
    store.put("data/f1620one", b"12345")
    assert store.exists("data/f1620one") is True
    assert store.size("data/f1620one") == 5
    assert store.exists("data") is False  # a "directory" is not an object


def test_put_file_copy_and_move(store: ObjectStore, tmp_path: Path) -> None:
    payload = bytes(range(256)) * 1000
    source = tmp_path / "part.parquet"
    source.write_bytes(payload)
    store.put_file("data/f1620copy", source)
    assert source.read_bytes() == payload  # a copy leaves the source alone
    store.put_file("data/f1620moved", source, move=True)
    assert not source.exists()
    assert store.get("data/f1620copy") == payload
    assert store.get("data/f1620moved") == payload
    assert store.size("data/f1620moved") == len(payload)


def test_get_file_writes_the_object_and_replaces_old_content(store: ObjectStore, tmp_path: Path) -> None:
    payload = b"x" * 300_000 + b"end"
    store.put("checkpoints/f1620cp", payload)
    target = tmp_path / "nested" / "dir" / "cp"
    store.get_file("checkpoints/f1620cp", target)
    assert target.read_bytes() == payload
    target.write_bytes(b"stale and longer than the new object" * 10_000)
    store.put("checkpoints/f1620cp", b"short")
    store.get_file("checkpoints/f1620cp", target)
    assert target.read_bytes() == b"short"
    assert sorted(p.name for p in target.parent.iterdir()) == ["cp"]


def test_list_direct_children_only(store: ObjectStore) -> None:
    for key in ("blocks/f1620a", "blocks/f1620b", "blocks/deeper/f1620c", "refs/head", "blocksx/f1620d"):
        store.put(key, b"v")
    assert sorted(store.list("blocks")) == ["blocks/f1620a", "blocks/f1620b"]
    assert sorted(store.list("blocks/deeper")) == ["blocks/deeper/f1620c"]
    assert list(store.list("checkpoints")) == []


def test_delete(store: ObjectStore) -> None:
    store.put("data/f1620gone", b"v")
    store.delete("data/f1620gone")
    assert store.exists("data/f1620gone") is False
    store.delete("data/f1620gone")  # deleting a missing object is not an error
    assert list(store.list("data")) == []


INVALID_KEYS = ["", "/abs", "a//b", "../escape", "a/../b", "a/./b", "trailing/", "back\\slash"]


def test_invalid_keys_are_refused(store: ObjectStore, tmp_path: Path) -> None:
    for key in INVALID_KEYS:
        calls: list[Callable[[str], Any]] = [
            store.get,
            lambda k: store.put(k, b"v"),
            store.exists,
            store.size,
            store.delete,
            lambda k: list(store.list(k)),
            lambda k: store.compare_and_swap(k, None, b"v"),
            lambda k: store.get_file(k, tmp_path / "t"),
        ]
        for call in calls:
            with pytest.raises(InvalidKeyError, match="invalid object key"):
                call(key)
    assert not (tmp_path / "t").exists()


def test_cas_create_update_delete(store: ObjectStore) -> None:
    store.compare_and_swap("refs/head", None, HEAD_A)
    assert store.get("refs/head") == HEAD_A
    store.compare_and_swap("refs/head", HEAD_A, HEAD_B)
    assert store.get("refs/head") == HEAD_B
    store.compare_and_swap("refs/head", HEAD_B, None)
    assert store.exists("refs/head") is False
    store.compare_and_swap("refs/head", None, None)  # absent stays absent
    assert store.exists("refs/head") is False


def test_cas_conflicts_leave_the_ref_unchanged(store: ObjectStore) -> None:
    with pytest.raises(ConflictError, match="expected f1620aaaa, found nothing"):
        store.compare_and_swap("refs/head", HEAD_A, HEAD_B)
    assert store.exists("refs/head") is False
    store.compare_and_swap("refs/head", None, HEAD_A)
    with pytest.raises(ConflictError, match="expected nothing, found f1620aaaa"):
        store.compare_and_swap("refs/head", None, HEAD_B)
    with pytest.raises(ConflictError, match="expected f1620bbbb, found f1620aaaa"):
        store.compare_and_swap("refs/head", HEAD_B, HEAD_C)
    with pytest.raises(ConflictError, match="expected f1620bbbb, found f1620aaaa"):
        store.compare_and_swap("refs/head", HEAD_B, None)
    with pytest.raises(ConflictError, match="expected nothing, found f1620aaaa"):
        store.compare_and_swap("refs/head", None, None)
    assert store.get("refs/head") == HEAD_A


def test_cas_compares_exact_bytes(store: ObjectStore) -> None:
    store.put("refs/head", HEAD_A + b"\n")  # another tool wrote it with a newline
    with pytest.raises(ConflictError):
        store.compare_and_swap("refs/head", HEAD_A, HEAD_B)
    store.compare_and_swap("refs/head", HEAD_A + b"\n", HEAD_B)
    assert store.get("refs/head") == HEAD_B


# ----- S3 specifics -----


def test_s3_keys_live_under_the_prefix(make_s3_store: Callable[..., S3ObjectStore], s3_bucket: str) -> None:
    a = make_s3_store("repo/a")
    b = make_s3_store("/repo/b/")
    a.put("refs/head", HEAD_A)
    b.put("refs/head", HEAD_B)
    assert (a.get("refs/head"), b.get("refs/head")) == (HEAD_A, HEAD_B)
    raw = a.client.get_object(Bucket=s3_bucket, Key="repo/a/refs/head")["Body"].read()
    assert raw == HEAD_A
    root = make_s3_store("")
    assert sorted(root.list("repo/a/refs")) == ["repo/a/refs/head"]
    assert root.url == f"s3://{s3_bucket}" and a.url == f"s3://{s3_bucket}/repo/a"


def test_s3_list_paginates(make_s3_store: Callable[..., S3ObjectStore]) -> None:
    store = make_s3_store(page_size=3)
    keys = {f"blocks/f1620{i:03d}" for i in range(20)}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: store.put(k, b"b"), keys))
    store.put("blocks/sub/f1620x", b"b")
    calls: list[dict[str, Any]] = []

    def spy(params: dict[str, Any], **_: Any) -> None:
        calls.append(params)

    events = store.client.meta.events  # the client is shared: the spy is removed afterwards
    events.register("before-call.s3.ListObjectsV2", spy, unique_id="odf-test-spy")
    try:
        assert set(store.list("blocks")) == keys
    finally:
        events.unregister("before-call.s3.ListObjectsV2", unique_id="odf-test-spy")
    assert len(calls) == 7  # ceil(20 / 3) pages: the listing followed continuation tokens


def test_s3_put_file_multipart(make_s3_store: Callable[..., S3ObjectStore], tmp_path: Path) -> None:
    store = make_s3_store(multipart_threshold=5 * 1024 * 1024)  # S3's smallest part size
    payload = bytes(range(251)) * (12 * 1024 * 1024 // 251)
    source = tmp_path / "big"
    source.write_bytes(payload)
    store.put_file("data/f1620big", source)
    head = store.client.head_object(Bucket=store.bucket, Key=f"{store.prefix}/data/f1620big")
    assert head["ETag"].strip('"').endswith("-3")  # uploaded in 3 parts
    target = tmp_path / "back"
    store.get_file("data/f1620big", target)
    assert target.read_bytes() == payload


def test_s3_cas_race_has_exactly_one_winner(make_s3_store: Callable[..., S3ObjectStore]) -> None:
    store = make_s3_store()
    store.compare_and_swap("refs/head", None, HEAD_A)
    writers = 12
    for round_ in range(3):
        expected = store.get("refs/head")
        barrier = threading.Barrier(writers)

        def move(
            i: int, expected: bytes = expected, barrier: threading.Barrier = barrier, round_: int = round_
        ) -> bytes | None:
            """The new head when this writer won, None when it got a ConflictError."""
            new = f"f1620r{round_}w{i}".encode()
            barrier.wait()
            try:
                store.compare_and_swap("refs/head", expected, new)
            except ConflictError:
                return None
            return new

        with ThreadPoolExecutor(writers) as pool:
            results = list(pool.map(move, range(writers)))
        winners = [r for r in results if r is not None]
        assert len(winners) == 1 and results.count(None) == writers - 1
        assert store.get("refs/head") == winners[0]


def test_s3_create_race_has_exactly_one_winner(make_s3_store: Callable[..., S3ObjectStore]) -> None:
    store = make_s3_store()
    barrier = threading.Barrier(8)

    def create(i: int) -> bool:
        barrier.wait()
        try:
            store.compare_and_swap("refs/head", None, f"f1620w{i}".encode())
        except ConflictError:
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(create, range(8)))
    assert won.count(True) == 1
    assert store.get("refs/head") == f"f1620w{won.index(True)}".encode()


class _SneakyClient:
    """Proxies a boto3 client; right after the store reads the ref, another writer moves it. A store
    that wrote without `If-Match` would overwrite that writer's value."""

    def __init__(self, client: Any, other: S3ObjectStore, key: str, value: bytes) -> None:
        self._client, self._other, self._key, self._value = client, other, key, value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_object(self, **kwargs: Any) -> Any:
        response = self._client.get_object(**kwargs)
        self._other.put(self._key, self._value)
        return response


@pytest.mark.parametrize("new", [HEAD_C, None], ids=["update", "delete"])
def test_s3_cas_never_overwrites_a_concurrent_write(
    make_s3_store: Callable[..., S3ObjectStore], new: bytes | None
) -> None:
    other = make_s3_store()
    other.put("refs/head", HEAD_A)
    sneaky = S3ObjectStore(
        other.bucket, other.prefix, client=_SneakyClient(other.client, other, "refs/head", HEAD_B)
    )
    with pytest.raises(ConflictError, match="expected f1620aaaa, found f1620bbbb"):
        sneaky.compare_and_swap("refs/head", HEAD_A, new)
    assert other.get("refs/head") == HEAD_B


def test_s3_missing_bucket_and_bad_credentials(moto_endpoint: str, s3_bucket: str) -> None:
    missing = S3ObjectStore(
        "odf-no-such-bucket",
        endpoint_url=moto_endpoint,
        region=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    with pytest.raises(S3StoreError, match="bucket 'odf-no-such-bucket' does not exist") as e:
        missing.get("refs/head")
    assert e.value.code == "NoSuchBucket"
    unreachable = S3ObjectStore(
        s3_bucket, endpoint_url="http://127.0.0.1:9", region=REGION, retries=0, timeout=2
    )
    with pytest.raises(S3StoreError, match=rf"GET s3://{s3_bucket}/refs/head failed: .*127\.0\.0\.1:9"):
        unreachable.get("refs/head")


def test_s3_store_options_are_checked(moto_endpoint: str) -> None:
    for setting in ({"endpoint_url": moto_endpoint}, {"retries": 2}, {"region": REGION}):
        with pytest.raises(ValueError, match="either a ready S3 client or connection settings"):
            S3ObjectStore("bucket", client=object(), **setting)
    with pytest.raises(S3StoreError, match="invalid S3 bucket name"):
        S3ObjectStore("", endpoint_url=moto_endpoint)
    with pytest.raises(InvalidKeyError):
        S3ObjectStore("bucket", "a/../b", endpoint_url=moto_endpoint)


def test_s3_module_does_not_import_boto3() -> None:
    """boto3 is optional: the core and its S3 module load without it until an S3 store is made."""
    code = (
        "import sys; import airflow_odf.odf.storage.url, airflow_odf.odf.storage.s3; "
        "import airflow_odf.odf.storage.store, airflow_odf.odf.storage.local; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore', 'airflow', 'pyspark')]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ----- HTTP (read-only) -----


def _http(server: HttpServer, **options: Any) -> HttpObjectStore:
    options.setdefault("backoff", 0.001)
    return HttpObjectStore(f"{server.url}/repo/ds", **options)


def _serve(server: HttpServer, key: str, data: bytes) -> None:
    path = server.root / "repo" / "ds" / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_http_reads(http_server: HttpServer, tmp_path: Path) -> None:
    payload = bytes(range(256)) * 8000  # 2 MB: several chunks
    _serve(http_server, "refs/head", HEAD_A)
    _serve(http_server, "data/f1620big", payload)
    store = _http(http_server)
    assert store.get("refs/head") == HEAD_A
    assert store.exists("refs/head") is True
    assert store.size("data/f1620big") == len(payload)
    target = tmp_path / "dl" / "big"
    store.get_file("data/f1620big", target)
    assert target.read_bytes() == payload
    assert [p.name for p in target.parent.iterdir()] == ["big"]
    assert http_server.count("HEAD") == 2  # exists and size ask without downloading


def test_http_missing_is_final_at_once(http_server: HttpServer, tmp_path: Path) -> None:
    store = _http(http_server)
    with pytest.raises(
        ObjectNotFoundError, match=r"refs/head not found at .*/repo/ds/refs/head \(HTTP 404\)"
    ):
        store.get("refs/head")
    assert store.get_or_none("refs/head") is None
    assert store.exists("refs/head") is False
    with pytest.raises(ObjectNotFoundError):
        store.size("refs/head")
    with pytest.raises(ObjectNotFoundError):
        store.get_file("data/f1620x", tmp_path / "x")
    assert not (tmp_path / "x").exists()
    assert http_server.count() == 5  # one request each: no retries on 404


def test_http_retries_transient_failures(http_server: HttpServer, tmp_path: Path) -> None:
    _serve(http_server, "blocks/f1620b", b"block")
    delays: list[float] = []
    store = _http(http_server, retries=4, backoff=0.1, sleep=delays.append)
    http_server.faults.fail_next = 3
    assert store.get("blocks/f1620b") == b"block"
    assert http_server.count("GET") == 4
    assert delays == pytest.approx([0.1, 0.2, 0.4])  # exponential back-off
    http_server.faults.fail_next, http_server.faults.fail_status = 2, 429
    store.get_file("blocks/f1620b", tmp_path / "b")
    assert (tmp_path / "b").read_bytes() == b"block"
    http_server.faults.truncate_next = 1  # connection dropped mid-body
    before = http_server.count("GET")
    assert store.get("blocks/f1620b") == b"block"
    assert http_server.count("GET") == before + 2


def test_http_honours_retry_after_but_caps_it(http_server: HttpServer) -> None:
    _serve(http_server, "refs/head", HEAD_A)
    delays: list[float] = []
    store = _http(http_server, retries=2, max_delay=5, sleep=delays.append)
    http_server.faults.fail_next, http_server.faults.retry_after = 1, "2"
    assert store.get("refs/head") == HEAD_A
    http_server.faults.fail_next, http_server.faults.retry_after = 1, "3600"
    assert store.get("refs/head") == HEAD_A
    assert delays == [2.0, 5.0]


def test_http_gives_up_after_the_configured_retries(http_server: HttpServer) -> None:
    _serve(http_server, "refs/head", HEAD_A)
    http_server.faults.fail_next = 100
    store = _http(http_server, retries=2)
    with pytest.raises(HttpStoreError) as e:
        store.get("refs/head")
    message = str(e.value)
    assert f"GET {http_server.url}/repo/ds/refs/head failed after 3 attempts: HTTP 503" in message
    assert e.value.status == 503
    assert http_server.count("GET") == 3


def test_http_client_errors_are_not_retried(http_server: HttpServer) -> None:
    http_server.faults.fail_next, http_server.faults.fail_status = 100, 403
    store = _http(http_server, retries=3)
    with pytest.raises(HttpStoreError, match=r"GET .*/refs/head failed: HTTP 403 Forbidden") as e:
        store.get("refs/head")
    assert e.value.status == 403
    assert http_server.count() == 1


def test_http_timeout(http_server: HttpServer) -> None:
    _serve(http_server, "refs/head", HEAD_A)
    http_server.faults.delay_next, http_server.faults.delay_seconds = 2, 1.5
    store = _http(http_server, timeout=0.3, retries=1)
    started = time.monotonic()
    with pytest.raises(HttpStoreError, match=r"failed after 2 attempts: .*timed out"):
        store.get("refs/head")
    assert time.monotonic() - started < 1.4  # did not wait for the slow server
    http_server.faults.delay_next = 1
    assert _http(http_server, timeout=0.3, retries=1).get("refs/head") == HEAD_A  # retried in time


def test_http_bearer_token_is_sent_and_never_shown(http_server: HttpServer) -> None:
    token = "s3cr3t-t0ken-value"
    _serve(http_server, "refs/head", HEAD_A)
    http_server.faults.required_token = token
    store = _http(http_server, bearer_token=token)
    assert store.get("refs/head") == HEAD_A
    assert http_server.requests[-1].authorization == f"Bearer {token}"
    assert token not in repr(store)
    wrong = _http(http_server, bearer_token="wrong-token-value", retries=0)
    with pytest.raises(HttpStoreError) as e:
        wrong.get("refs/head")
    assert e.value.status == 401 and "wrong-token-value" not in str(e.value)
    http_server.faults.fail_next = 5
    with pytest.raises(HttpStoreError) as e:
        _http(http_server, bearer_token=token, retries=1).get("refs/head")
    assert token not in str(e.value) and token not in repr(e.value)
    with pytest.raises(HttpStoreError, match="HTTP 401"):
        _http(http_server, retries=0).get("refs/head")
    assert http_server.requests[-1].authorization is None


def test_http_store_is_read_only(http_server: HttpServer, tmp_path: Path) -> None:
    store = _http(http_server)
    source = tmp_path / "f"
    source.write_bytes(b"v")
    writes: list[Callable[[], Any]] = [
        lambda: store.put("refs/head", b"v"),
        lambda: store.put_file("data/f1620x", source),
        lambda: store.delete("refs/head"),
        lambda: store.compare_and_swap("refs/head", None, b"v"),
    ]
    for write in writes:
        with pytest.raises(ReadOnlyStoreError, match=r"is a read-only HTTP repository.*s3:// or file://"):
            write()
    with pytest.raises(ReadOnlyStoreError, match="listing keys under 'blocks' is not possible"):
        list(store.list("blocks"))
    assert source.exists()
    assert http_server.count() == 0  # nothing was even sent


def test_http_without_head_falls_back_to_get(http_server: HttpServer) -> None:
    _serve(http_server, "data/f1620x", b"12345")
    http_server.faults.no_head = True
    store = _http(http_server)
    assert store.size("data/f1620x") == 5
    assert store.exists("data/f1620x") is True
    assert store.exists("data/f1620none") is False


def test_http_unreachable_server_names_the_url() -> None:
    store = HttpObjectStore("http://127.0.0.1:9/repo", retries=1, backoff=0.001, timeout=2)
    with pytest.raises(
        HttpStoreError, match=r"GET http://127\.0\.0\.1:9/repo/refs/head failed after 2 attempts"
    ):
        store.get("refs/head")


# ----- URLs -----


def test_open_local_stores(tmp_path: Path) -> None:
    for url in (str(tmp_path / "repo"), f"file://{tmp_path}/repo", f"file://localhost{tmp_path}/repo"):
        store = open_store(url)
        assert isinstance(store, LocalObjectStore) and store.root == tmp_path / "repo"
    relative = open_store("some/relative/dir")
    assert isinstance(relative, LocalObjectStore) and relative.root == Path("some/relative/dir")
    spaced = open_store(f"file://{tmp_path}/with%20space")
    assert isinstance(spaced, LocalObjectStore) and spaced.root == tmp_path / "with space"


def test_open_s3_with_credentials(s3_credentials: StoreCredentials, s3_bucket: str) -> None:
    store = open_store(f"s3://{s3_bucket}/repo/ds", credentials=s3_credentials)
    assert isinstance(store, S3ObjectStore)
    assert (store.bucket, store.prefix, store.endpoint_url) == (
        s3_bucket,
        "repo/ds",
        s3_credentials.endpoint_url,
    )
    store.put("refs/head", HEAD_A)
    assert open_store(f"s3://{s3_bucket}", credentials=s3_credentials).get("repo/ds/refs/head") == HEAD_A


def test_open_s3_endpoint_from_environment(
    moto_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    store = open_store(f"s3://{s3_bucket}/repo")
    assert isinstance(store, S3ObjectStore) and store.endpoint_url == moto_endpoint
    store.put("refs/head", HEAD_B)
    assert store.get("refs/head") == HEAD_B


def test_open_s3_plus_http(moto_endpoint: str, s3_bucket: str) -> None:
    host = moto_endpoint.removeprefix("http://")
    creds = StoreCredentials(aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region=REGION)
    store = open_store(f"s3+http://{host}/{s3_bucket}/repo/ds", credentials=creds)
    assert isinstance(store, S3ObjectStore)
    assert (store.bucket, store.prefix, store.endpoint_url) == (s3_bucket, "repo/ds", moto_endpoint)
    store.compare_and_swap("refs/head", None, HEAD_A)
    assert store.get("refs/head") == HEAD_A
    secure = open_store("s3+https://minio.example:9000/bucket", credentials=creds)
    assert isinstance(secure, S3ObjectStore)
    assert (secure.bucket, secure.prefix, secure.endpoint_url) == ("bucket", "", "https://minio.example:9000")


def test_open_http(http_server: HttpServer) -> None:
    _serve(http_server, "refs/head", HEAD_C)
    creds = StoreCredentials(bearer_token="tok-123456", http_timeout=5, http_retries=1)
    store = open_store(f"{http_server.url}/repo/ds/", credentials=creds)
    assert isinstance(store, HttpObjectStore)
    assert (store.base_url, store.timeout, store.retries) == (f"{http_server.url}/repo/ds", 5, 1)
    assert store.get("refs/head") == HEAD_C
    assert http_server.requests[-1].authorization == "Bearer tok-123456"
    assert isinstance(open_store("https://example.org/odf"), HttpObjectStore)
    assert "tok-123456" not in repr(creds)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://host/repo", r"unsupported repository URL scheme 'ftp'.*file://, s3://, s3\+http://"),
        ("ipfs://bafy/x", "unsupported repository URL scheme 'ipfs'"),
        ("s3://", "S3 URL without a bucket"),
        ("s3+http://localhost:9000", "S3 URL without a bucket"),
        ("s3+http:///bucket", "S3 URL without an endpoint host"),
        ("s3://key:secret@bucket/x", "not the URL"),
        ("file://relative/path", "absolute path"),
        ("http:///nohost", "without a host"),
        ("https://user:pw@host/repo", "not the URL"),
        ("http://host/repo?x=1", "no query"),
        ("", "empty repository URL"),
    ],
)
def test_open_store_refuses_bad_urls(url: str, message: str) -> None:
    with pytest.raises(StoreUrlError, match=message) as e:
        open_store(url)
    assert "secret" not in str(e.value) and ":pw@" not in str(e.value)


def test_join_url() -> None:
    assert join_url("s3://bucket/repo", "ds") == "s3://bucket/repo/ds"
    assert join_url("s3://bucket", "ds") == "s3://bucket/ds"
    assert join_url("s3+http://h:9000/bucket/repo/", "ds") == "s3+http://h:9000/bucket/repo/ds"
    assert join_url("https://host/odf/", "my dataset") == "https://host/odf/my%20dataset"
    assert join_url("file:///", "ds") == "file:///ds"
    assert join_url("file:///srv/repo", "a", "b") == "file:///srv/repo/a/b"
    assert join_url("/srv/repo/", "ds") == "/srv/repo/ds"
    assert join_url("repo", "ds") == "repo/ds"
    assert join_url("s3://b/r") == "s3://b/r"
    for bad in ("", "..", ".", "a/b"):
        with pytest.raises(StoreUrlError, match="invalid path segment"):
            join_url("s3://b/r", bad)


def test_join_then_open_reaches_the_dataset(tmp_path: Path, http_server: HttpServer) -> None:
    """A dataset in a repository is `open_store(join_url(repo, name))` for every backend."""
    repo = open_store(join_url(str(tmp_path), "my-ds"))
    repo.put("refs/head", HEAD_A)
    assert LocalObjectStore(tmp_path / "my-ds").get("refs/head") == HEAD_A
    _serve(http_server, "refs/head", HEAD_B)
    assert open_store(join_url(f"{http_server.url}/repo", "ds")).get("refs/head") == HEAD_B


# ----- secrets in messages -----


@pytest.mark.parametrize(
    "url",
    [
        "ftp://user:hunter2pw@host/repo",
        "ftp://user:hunter2pw@host:notaport/repo",
        "ftp://user:hunter2/pw@host/repo",
        "http://host/repo?sig=hunter2pw",
        "https://host/repo#token=hunter2pw",
        "s3://bucket/repo?X-Amz-Signature=hunter2pw",
        "s3+http://user:hunter2pw@host:9000",
    ],
)
def test_store_url_errors_never_show_credentials(url: str) -> None:
    with pytest.raises(StoreUrlError) as e:
        open_store(url)
    assert "hunter2" not in str(e.value) and "***" in str(e.value)


def test_s3_store_repr_hides_the_endpoint_credentials() -> None:
    store = S3ObjectStore("bucket", endpoint_url="http://user:hunter2pw@127.0.0.1:9/?sig=hunter2pw")
    assert "hunter2pw" not in repr(store)
    assert "127.0.0.1:9" in repr(store)

"""FilesGlob over `s3://` (moto's server on 127.0.0.1): objects ingested in name order, later pulls
listing only the keys after the last ingested one (`StartAfter`, counted as S3 returns them), objects
handed to an engine that reads the bucket itself as `s3a://` URIs, hostile paths refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.data_access import read_slice
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.engine_client.contract import EngineFailure, IngestResponse
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.fetch import s3_glob
from airflow_odf.odf.ingest.fetch.fetcher import (
    FetchError,
    FetchOptions,
    SourceFetcher,
    SourceNotFoundError,
    SourceUnreachableError,
)
from airflow_odf.odf.ingest.fetch.s3_glob import S3Pattern
from airflow_odf.odf.ingest.fetch.types import EngineS3
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.polling import pull_polling
from airflow_odf.odf.ingest.trust import SourceTrust
from airflow_odf.odf.operation import IngestError
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.storage.url import StoreCredentials, open_store
from tests.engine.conftest import runner, spark  # noqa: F401  (fixtures)

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
T1 = Timestamp.parse("2024-02-01T00:00:00Z")
T2 = Timestamp.parse("2024-02-02T00:00:00Z")
T3 = Timestamp.parse("2024-02-03T00:00:00Z")


@pytest.fixture
def source_env(monkeypatch: pytest.MonkeyPatch, moto_endpoint: str) -> None:
    """The worker's environment names the source endpoint (the manifest never does)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str | None, list[str]]]:
    """Every ListObjectsV2 answer the fetcher got: (StartAfter it echoes, the keys it returned)."""
    answers: list[tuple[str | None, list[str]]] = []
    original = s3_glob.make_s3_client

    def record(parsed: dict[str, Any], **_: Any) -> None:
        answers.append((parsed.get("StartAfter"), [item["Key"] for item in parsed.get("Contents", [])]))

    def counting(settings: Any) -> Any:
        client = original(settings)
        client.meta.events.unregister("after-call.s3.ListObjectsV2", unique_id="odf-test-listed")
        client.meta.events.register("after-call.s3.ListObjectsV2", record, unique_id="odf-test-listed")
        return client

    monkeypatch.setattr(s3_glob, "make_s3_client", counting)
    return answers


def _put(s3_admin: Any, bucket: str, objects: dict[str, str]) -> None:
    for key, body in objects.items():
        s3_admin.put_object(Bucket=bucket, Key=key, Body=body.encode())


def _fill(bucket: str, keys: list[str]) -> None:
    """Many small objects at once, straight into the in-process moto server's backend."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    for key in keys:
        backend.put_object(bucket, key, b"n\n1\n")


def _trust(bucket: str, prefix: str = "landing") -> SourceTrust:
    return SourceTrust(s3_source_prefixes=(f"s3://{bucket}/{prefix}",))


def _orders_source(path: str, *prepare: Any) -> model.SetPollingSource:
    return model.SetPollingSource(
        fetch=model.FetchStepFilesGlob(
            path=path,
            event_time=model.EventTimeSourceFromPath(
                pattern=r"orders-(\d{4}-\d{2}-\d{2})\.csv", timestamp_format="%Y-%m-%d"
            ),
        ),
        prepare=list(prepare) or None,
        read=model.ReadStepCsv(header=True, ddl_schema=["order_id BIGINT", "qty BIGINT"]),
        merge=model.MergeStrategyAppend(),
    )


def _root(repo: Repository, source: model.SetPollingSource) -> Dataset:
    repo.add(
        model.DatasetSnapshot(name="orders", kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
    )
    return repo.dataset("orders")


def _adds(dataset: Dataset) -> list[model.AddData]:
    events = [b.event for _, b in reversed(list(dataset.iter_blocks()))]
    return [e for e in events if isinstance(e, model.AddData)]


def _rows(dataset: Dataset) -> list[dict[str, Any]]:
    return [
        row for add in _adds(dataset) if add.new_data for row in read_slice(dataset, add.new_data).to_pylist()
    ]


def test_polling_ingests_in_name_order_then_lists_only_new_objects(
    runner: LocalSparkRunner,  # noqa: F811  (the fixture imported above)
    s3_admin: Any,
    s3_bucket: str,
    source_env: None,
    listed: list[tuple[str | None, list[str]]],
    tmp_path: Path,
) -> None:
    _put(
        s3_admin,
        s3_bucket,
        {
            "landing/orders-2024-01-02.csv": "order_id,qty\n2,20\n",
            "landing/orders-2024-01-01.csv": "order_id,qty\n1,10\n",
            "landing/orders-2024-01-03.csv": "order_id,qty\n3,30\n",
            "landing/other.csv": "order_id,qty\n99,99\n",  # not matched
            "landing/sub/orders-2024-01-01.csv": "order_id,qty\n98,98\n",  # deeper: not matched
            "elsewhere/orders-2024-01-01.csv": "order_id,qty\n97,97\n",  # outside the pattern
        },
    )
    dataset = _root(
        Repository.init(tmp_path / "repo"), _orders_source(f"s3://{s3_bucket}/landing/orders-*.csv")
    )
    options = IngestOptions(work_dir=tmp_path / "work", files_per_batch=2, trust=_trust(s3_bucket))

    first = pull_polling(dataset, "orders", runner, options, system_time=T1)
    assert first.records == 3
    assert [(r["offset"], r["order_id"], r["qty"]) for r in _rows(dataset)] == [
        (0, 1, 10),
        (1, 2, 20),
        (2, 3, 30),
    ]
    assert [str(r["event_time"])[:10] for r in _rows(dataset)] == ["2024-01-01", "2024-01-02", "2024-01-03"]
    assert [
        (a.new_source_state.kind, a.new_source_state.value) for a in _adds(dataset) if a.new_source_state
    ] == [
        ("odf/etag", "orders-2024-01-02.csv"),
        ("odf/etag", "orders-2024-01-03.csv"),
    ]
    assert listed == [(None, [f"landing/orders-2024-01-0{d}.csv" for d in (1, 2, 3)])]
    assert not any((tmp_path / "work" / "fetch").rglob("*.csv"))  # downloads removed once ingested

    listed.clear()
    _put(
        s3_admin,
        s3_bucket,
        {
            "landing/orders-2024-01-05.csv": "order_id,qty\n5,50\n",
            "landing/orders-2024-01-04.csv": "order_id,qty\n4,40\n",
            "landing/orders-2023-12-31.csv": "order_id,qty\n0,0\n",  # sorts before the last one: never
        },
    )
    second = pull_polling(dataset, "orders", runner, options, system_time=T2)
    assert second.records == 2
    assert [(r["offset"], r["order_id"]) for r in _rows(dataset)][3:] == [(3, 4), (4, 5)]
    assert _adds(dataset)[-1].new_source_state == model.SourceState(
        source_name="default", kind="odf/etag", value="orders-2024-01-05.csv"
    )
    assert listed == [
        ("landing/orders-2024-01-03.csv", ["landing/orders-2024-01-04.csv", "landing/orders-2024-01-05.csv"])
    ]

    listed.clear()
    assert pull_polling(dataset, "orders", runner, options, system_time=T3).up_to_date
    assert listed == [("landing/orders-2024-01-05.csv", [])]


def test_the_second_listing_returns_only_the_keys_after_the_last_ingested_one(
    s3_bucket: str,
    source_env: None,
    moto_endpoint: str,
    listed: list[tuple[str | None, list[str]]],
    tmp_path: Path,
) -> None:
    """3,000 objects; the next poll after three new ones gets back three keys, and with an engine that
    reads this endpoint itself nothing is downloaded: the objects go over as `s3a://` URIs."""
    _fill(s3_bucket, [f"in/n-{i:05d}.csv" for i in range(3000)])
    step = model.FetchStepFilesGlob(path=f"s3a://{s3_bucket}/in/n-*.csv")
    options = FetchOptions(
        cache_dir=tmp_path / "cache",
        files_per_batch=5000,
        engine_s3=EngineS3("s3a", moto_endpoint),
        trust=_trust(s3_bucket, "in"),
    )
    first = SourceFetcher(step, options).fetch(None, T1)
    assert len(first.files) == 3000 and not first.has_more
    assert first.files[0].uri == f"s3a://{s3_bucket}/in/n-00000.csv" and first.files[0].path is None
    assert sum(len(keys) for _, keys in listed) == 3000 and len(listed) == 3  # pages of 1000
    assert first.new_source_state is not None and first.new_source_state.value == "n-02999.csv"
    assert not (tmp_path / "cache").exists()

    listed.clear()
    _fill(s3_bucket, [f"in/n-{i:05d}.csv" for i in (3000, 3001, 3002)])
    second = SourceFetcher(step, options).fetch(first.new_source_state, T2)
    assert [f.name for f in second.files] == ["n-03000.csv", "n-03001.csv", "n-03002.csv"]
    assert listed == [("in/n-02999.csv", ["in/n-03000.csv", "in/n-03001.csv", "in/n-03002.csv"])]


def test_batches_read_the_listing_page_by_page(
    s3_bucket: str, source_env: None, listed: list[tuple[str | None, list[str]]], tmp_path: Path
) -> None:
    """A backfill takes `files_per_batch` objects per iteration from one listing that is read as far as
    the batches go (plus one key to know whether more follow), not listed in full up front."""
    _fill(s3_bucket, [f"in/n-{i:05d}.csv" for i in range(2500)])
    options = FetchOptions(cache_dir=tmp_path / "cache", files_per_batch=2, trust=_trust(s3_bucket, "in"))
    fetcher = SourceFetcher(model.FetchStepFilesGlob(path=f"s3://{s3_bucket}/in/n-*.csv"), options)
    first = fetcher.fetch(None, T1)
    second = fetcher.fetch(first.new_source_state, T1)
    assert [f.name for f in first.files + second.files] == [f"n-{i:05d}.csv" for i in range(4)]
    assert second.has_more and len(listed) == 1  # one page so far
    assert [f.path.read_text() for f in second.files if f.path] == ["n\n1\n", "n\n1\n"]
    assert all(
        f.path and f.path.suffix == ".csv" and f.path.parent == tmp_path / "cache" for f in second.files
    )


def test_by_event_time_lists_everything_and_orders_by_the_time_in_the_name(
    s3_admin: Any,
    s3_bucket: str,
    source_env: None,
    listed: list[tuple[str | None, list[str]]],
    tmp_path: Path,
) -> None:
    """Names are not in event-time order, so StartAfter cannot be used: the prefix is listed in full once
    per run and the resume point is (time from the last name, name), as for local files."""
    _put(s3_admin, s3_bucket, {f"in/{name}": name for name in ("zulu-20240101.json", "alpha-20240103.json")})
    step = model.FetchStepFilesGlob(
        path=f"s3://{s3_bucket}/in/*.json",
        order=model.SourceOrdering.BY_EVENT_TIME,
        event_time=model.EventTimeSourceFromPath(pattern=r"-(\d{8})\.json$", timestamp_format="%Y%m%d"),
    )
    options = FetchOptions(cache_dir=tmp_path / "cache", files_per_batch=1, trust=_trust(s3_bucket, "in"))
    first = SourceFetcher(step, options).fetch(None, T1)
    assert [(f.name, str(f.source_event_time)) for f in first.files] == [
        ("zulu-20240101.json", "2024-01-01T00:00:00Z")
    ]
    _put(s3_admin, s3_bucket, {"in/mike-20240102.json": "m", "in/kilo-20231231.json": "late"})
    listed.clear()
    second = SourceFetcher(step, options).fetch(first.new_source_state, T2)
    assert [f.name for f in second.files] == ["mike-20240102.json"] and second.has_more
    assert listed == [
        (
            None,
            [
                f"in/{n}"
                for n in (
                    "alpha-20240103.json",
                    "kilo-20231231.json",
                    "mike-20240102.json",
                    "zulu-20240101.json",
                )
            ],
        )
    ]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("s3://{bucket}/landing/../secrets/*.csv", "is not a plain one; expected"),
        ("s3://{bucket}//landing/*.csv", "is not a plain one; expected"),
        ("s3://{bucket}/landing/*.csv/", "is not a plain one; expected"),
        (
            "s3://Not_A_Bucket/landing/*.csv",
            "'Not_A_Bucket' in s3://Not_A_Bucket/landing/*.csv is not an S3 bucket",
        ),
        ("s3://169.254.169.254/latest/*", "is not an S3 bucket name"),
        ("s3://key:secret@{bucket}/landing/*.csv", "is not an S3 bucket name"),
        ("s3://{bucket}", "is not a plain one"),
        ("s3://{bucket}/landing*/x.csv", "is outside the S3 prefixes sources may read"),
        ("s3://{bucket}/land/*.csv", "is outside the S3 prefixes sources may read"),
        ("s3://other-bucket/landing/*.csv", "is outside the S3 prefixes sources may read"),
    ],
)
def test_a_hostile_path_gets_one_clear_error_and_lists_nothing(
    path: str,
    message: str,
    s3_bucket: str,
    source_env: None,
    listed: list[tuple[str | None, list[str]]],
    tmp_path: Path,
) -> None:
    step = model.FetchStepFilesGlob(path=path.format(bucket=s3_bucket))
    options = FetchOptions(cache_dir=tmp_path / "cache", trust=_trust(s3_bucket))
    with pytest.raises(FetchError, match=r"^fetch\.path: ") as caught:
        SourceFetcher(step, options).fetch(None, T1)
    assert message in str(caught.value) and "Traceback" not in str(caught.value)
    assert "key:secret" not in str(caught.value)
    assert listed == []


def test_nothing_is_allowed_by_default(s3_bucket: str, source_env: None, tmp_path: Path) -> None:
    step = model.FetchStepFilesGlob(path=f"s3://{s3_bucket}/landing/*.csv")
    with pytest.raises(
        FetchError,
        match="outside the S3 prefixes sources may read \\(none\\); allow it with ODF_S3_SOURCE_PREFIXES",
    ):
        SourceFetcher(step, FetchOptions(cache_dir=tmp_path, trust=SourceTrust())).fetch(None, T1)


def test_a_missing_bucket_is_not_found_and_a_dead_endpoint_is_retryable(
    s3_bucket: str, source_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trust = SourceTrust(s3_source_prefixes=("s3://no-such-bucket-odf", f"s3://{s3_bucket}"))
    options = FetchOptions(cache_dir=tmp_path, timeout=2.0, trust=trust)
    missing = model.FetchStepFilesGlob(path="s3://no-such-bucket-odf/landing/*.csv")
    with pytest.raises(SourceNotFoundError, match="bucket 'no-such-bucket-odf' does not exist"):
        SourceFetcher(missing, options).fetch(None, T1)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    dead = model.FetchStepFilesGlob(path=f"s3://{s3_bucket}/landing/*.csv")
    with pytest.raises(
        SourceUnreachableError, match=f"^fetch.path: listing s3://{s3_bucket}/landing/ failed: "
    ) as e:
        SourceFetcher(dead, options).fetch(None, T1)
    assert e.value.retryable


@pytest.mark.parametrize(
    ("pattern", "key", "matched"),
    [
        ("in/*.csv", "in/a.csv", True),
        ("in/*.csv", "in/sub/a.csv", False),  # `*` stays within a segment
        ("in/*.csv", "in/.a.csv", False),  # nor matches a leading dot
        ("in/*/day-*.csv", "in/2024/day-1.csv", True),
        ("in/**/day-*.csv", "in/day-1.csv", True),
        ("in/**/day-*.csv", "in/a/b/day-1.csv", True),
        ("in/**/day-*.csv", "in/.hidden/day-1.csv", False),
        ("in/**", "in/a/b.csv", True),
        ("in/*.csv", "in//a.csv", False),  # not a file-like key
        ("in/a.csv", "in/a.csv", True),
    ],
)
def test_patterns_match_keys_by_segments_as_the_local_glob_matches_paths(
    pattern: str, key: str, matched: bool
) -> None:
    assert S3Pattern.parse(f"s3://bucket/{pattern}").matches(key) is matched


class _RecordingRunner:
    """An engine that records the request and refuses it: what the ingest hands over is the point."""

    def __init__(self) -> None:
        self.inputs: list[str] = []
        self.sizes: list[int | None] = []

    def run(self, request_json: str, op_dir: Path) -> str:
        self.inputs = [i["path"] for i in json.loads(request_json)["inputs"]]
        self.sizes = [i.get("size") for i in json.loads(request_json)["inputs"]]
        return IngestResponse(error=EngineFailure("bad-input", "recorded")).to_json()


@pytest.mark.parametrize("with_prepare", [False, True])
def test_an_engine_that_reads_the_bucket_gets_s3a_uris_unless_a_prepare_step_needs_a_file(
    with_prepare: bool,
    s3_admin: Any,
    s3_bucket: str,
    s3_credentials: StoreCredentials,
    source_env: None,
    tmp_path: Path,
) -> None:
    _put(s3_admin, s3_bucket, {"landing/orders-2024-01-01.csv": "order_id,qty\n1,10\n"})
    store = open_store(
        f"s3://{s3_bucket}/odf",
        credentials=StoreCredentials(**{**s3_credentials.__dict__, "engine_scheme": "s3a"}),
    )
    repo = Repository.in_store(store, f"s3://{s3_bucket}/odf", create=True)
    prepare = [model.PrepStepPipe(command=["cat"])] if with_prepare else []
    dataset = _root(repo, _orders_source(f"s3://{s3_bucket}/landing/orders-*.csv", *prepare))
    engine = _RecordingRunner()
    options = IngestOptions(
        work_dir=tmp_path / "work",
        trust=SourceTrust(allow_shell_steps=True, s3_source_prefixes=(f"s3://{s3_bucket}/landing",)),
    )
    with pytest.raises(IngestError, match="recorded"):
        pull_polling(dataset, "orders", engine, options, system_time=T1)  # type: ignore[arg-type]
    [handed] = engine.inputs
    source_uri = f"s3a://{s3_bucket}/landing/orders-2024-01-01.csv"
    if with_prepare:  # the prepared local file (which the engine gets on this disk or staged in the bucket)
        assert handed != source_uri and "prepare-0-pipe" in handed
    else:  # with the size the listing gave: the engine sizes its partitions by it
        assert handed == source_uri and engine.sizes == [len("order_id,qty\n1,10\n")]
    assert not [p for p in (tmp_path / "work" / "fetch").rglob("*") if p.is_file()]  # downloads removed


def test_the_sensor_check_lists_from_the_last_ingested_name(
    s3_admin: Any,
    s3_bucket: str,
    source_env: None,
    listed: list[tuple[str | None, list[str]]],
    tmp_path: Path,
) -> None:
    _put(s3_admin, s3_bucket, {f"landing/orders-2024-01-0{d}.csv": "x" for d in (1, 2, 3)})
    source = _orders_source(f"s3://{s3_bucket}/landing/orders-*.csv")
    from airflow_odf.odf.ingest.fetch.files_glob import GlobSource

    options = FetchOptions(cache_dir=tmp_path, trust=_trust(s3_bucket))
    state = model.SourceState(source_name="default", kind="odf/etag", value="orders-2024-01-01.csv")
    pending = GlobSource(source.fetch, options).pending(state)
    assert [p.name for p in pending] == ["orders-2024-01-02.csv", "orders-2024-01-03.csv"]
    assert listed == [
        ("landing/orders-2024-01-01.csv", ["landing/orders-2024-01-02.csv", "landing/orders-2024-01-03.csv"])
    ]

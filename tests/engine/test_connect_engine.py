"""The engine on Spark Connect: the same ingests and transforms as on the local engine (and on
spark-submit) give the same datasets (records, offsets, op codes, logical hashes, events) and responses;
requests share one server safely; an unreachable server fails at once with a clear message."""

from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from airflow_odf.engine import transform_job
from airflow_odf.engine.connect_runner import (
    ConnectUnreachableError,
    SparkConnectRunner,
    connect_mode,
    open_session,
)
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.engine.partition_order import served_partition_keys
from airflow_odf.engine.session import default_parallelism, get_session
from airflow_odf.odf.chain.data_access import read_slice
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.engine_client.runner import EngineRunner, SparkSubmitRunner
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.hashing.parquet_hashes import logical_hash_of_parquet
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.operation import IngestError
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.execute import TransformOptions, run_transform
from airflow_odf.odf.transform.verify import verify_reproducibility

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
CENSUS = "census"
BIG = "census.big"  # a filter and projection: the local engine reads its input in one scan
TOTALS = "census.totals"  # an aggregate: read file by file on both engines
CENSUS_CSV = [
    "city,population\nA,1000\nB,2000\nC,3000\n",
    "city,population\nA,1000\nB,2500\nD,4000\nE,500\nF,6000\n",
]


class RecordingRunner:
    """Passes requests on to `runner` and keeps the responses."""

    def __init__(self, runner: EngineRunner) -> None:
        self.runner = runner
        self.responses: list[dict[str, Any]] = []

    def run(self, request_json: str, work_dir: Path) -> str:
        response = self.runner.run(request_json, work_dir)
        self.responses.append(json.loads(response))
        return response


def _t(day: int) -> Timestamp:
    return Timestamp.parse(f"2024-02-{day:02d}T10:00:00Z")


def _derivative(name: str, query: str) -> model.DatasetSnapshot:
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref=CENSUS)],
        transform=model.TransformSql(engine="spark", queries=[model.SqlQueryStep(alias=None, query=query)]),
    )
    return model.DatasetSnapshot(name=name, kind=model.DatasetKind.DERIVATIVE, metadata=[transform])


def _pipeline(
    runner: EngineRunner, root: Path, pushes: int = len(CENSUS_CSV), *, replay: bool = True
) -> Repository:
    """A Snapshot-merged root pushed twice (the second time in several slices: range partitions), each
    time followed by two derivatives' transforms; then the derivatives' replay is verified (unless not
    `replay`). `pushes` stops after the first pushes (and their transforms)."""
    repo = Repository.init(root / "repo")
    read = model.ReadStepCsv(header=True, ddl_schema=["city STRING", "population BIGINT"])
    source = model.AddPushSource(
        source_name="default", read=read, merge=model.MergeStrategySnapshot(primary_key=["city"])
    )
    repo.add(
        model.DatasetSnapshot(name=CENSUS, kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
    )
    big = f"SELECT op, event_time, city, population * 2 AS doubled FROM {CENSUS} WHERE population > 1500"
    repo.add(_derivative(BIG, big), system_time=T0)
    totals = (
        f"SELECT event_time, count(*) AS changes, sum(population) AS people FROM {CENSUS} "
        "GROUP BY event_time ORDER BY event_time"
    )
    repo.add(_derivative(TOTALS, totals), system_time=T0)
    for day, text in enumerate(CENSUS_CSV[:pushes], start=1):
        path = root / f"census-{day}.csv"
        path.write_text(text)
        options = IngestOptions(work_dir=root / "work", target_slice_bytes=16 if day > 1 else 1 << 30)
        push_ingest(
            repo.dataset(CENSUS), CENSUS, runner, [path], options, event_time=_t(day), system_time=_t(day)
        )
        for name in (BIG, TOTALS):
            run_transform(repo, name, runner, TransformOptions(work_dir=root / "work"), system_time=_t(day))
    for name in (BIG, TOTALS):
        assert not replay or verify_reproducibility(repo, name, runner, root / "verify") == []
    return repo


def _events(dataset: Dataset) -> list[Any]:
    return [b.event for _, b in reversed(list(dataset.iter_blocks()))]


def _slices(dataset: Dataset) -> list[model.DataSlice]:
    return [e.new_data for e in _events(dataset) if getattr(e, "new_data", None) is not None]


def _records(dataset: Dataset) -> list[dict[str, Any]]:
    return [row for s in _slices(dataset) for row in read_slice(dataset, s).to_pylist()]


def _comparable(event: Any) -> Any:
    """The event as both repositories must have it. Not its files' physical hashes: parquet-mr writes a
    column chunk's encodings in the order of a hash set of Java enums, which differs from JVM to JVM (two
    local runs in two processes differ alike). Of a transform's inputs, which are other datasets in each
    repository, only the offsets."""
    if isinstance(event, model.Seed | model.SetTransform):
        return type(event).__name__
    if not isinstance(event, model.AddData | model.ExecuteTransform):
        return event
    data = event.new_data
    common = (
        event.prev_offset,
        None if data is None else (data.logical_hash, data.offset_interval),
        event.prev_checkpoint is None,
        event.new_checkpoint is None,
        event.new_watermark,
    )
    if isinstance(event, model.AddData):
        return (*common, event.new_source_state)
    return (*common, [(i.prev_offset, i.new_offset) for i in event.query_inputs])


def _without_paths(value: Any) -> Any:
    """A response without the paths of its files (each run has its own operation folder)."""
    if isinstance(value, dict):
        return {k: _without_paths(v) for k, v in value.items() if not k.endswith("path")}
    if isinstance(value, list):
        return [_without_paths(v) for v in value]
    return value


@dataclass(frozen=True)
class Pipelines:
    """The pipeline on the local engine and on Connect, with each engine's responses."""

    local: Repository
    connect: Repository
    local_responses: list[dict[str, Any]]
    connect_responses: list[dict[str, Any]]


@pytest.fixture(scope="module")
def pipelines(spark: SparkSession, connect_url: str, tmp_path_factory: pytest.TempPathFactory) -> Pipelines:
    """`_pipeline` run once per module on both engines: the spark-submit test compares its first push
    with theirs."""
    root = tmp_path_factory.mktemp("pipelines")
    local, connect = (
        RecordingRunner(LocalSparkRunner("local[2]")),
        RecordingRunner(SparkConnectRunner(connect_url)),
    )
    local_repo, connect_repo = _pipeline(local, root / "local"), _pipeline(connect, root / "connect")
    return Pipelines(local_repo, connect_repo, local.responses, connect.responses)


def test_the_same_pipeline_gives_the_same_datasets_on_local_and_connect(pipelines: Pipelines) -> None:
    local_repo, connect_repo = pipelines.local, pipelines.connect
    census = connect_repo.dataset(CENSUS)
    assert [(r["offset"], r["op"], r["city"], r["population"]) for r in _records(census)] == [
        (0, 0, "A", 1000),
        (1, 0, "B", 2000),
        (2, 0, "C", 3000),
        (3, 2, "B", 2000),
        (4, 3, "B", 2500),
        (5, 1, "C", 3000),
        (6, 0, "D", 4000),
        (7, 0, "E", 500),
        (8, 0, "F", 6000),
    ]
    assert len(_slices(census)) > 2  # the second push in several slices
    for name in (CENSUS, BIG, TOTALS):
        ours, theirs = connect_repo.dataset(name), local_repo.dataset(name)
        assert _records(ours) == _records(theirs), name
        assert [_comparable(e) for e in _events(ours)] == [_comparable(e) for e in _events(theirs)], name
        hashes = [
            logical_hash_of_parquet(ours.store.local_path(f"data/{s.physical_hash}")) for s in _slices(ours)
        ]
        assert hashes == [s.logical_hash for s in _slices(theirs)], name
        assert verify_integrity(ours) == []
    assert [(r["op"], r["city"], r["doubled"]) for r in _records(connect_repo.dataset(BIG))] == [
        (0, "B", 4000),
        (0, "C", 6000),
        (2, "B", 4000),
        (3, "B", 5000),
        (1, "C", 6000),
        (0, "D", 8000),
        (0, "F", 12000),
    ]
    assert _without_paths(pipelines.connect_responses) == _without_paths(pipelines.local_responses)
    assert all("error" not in response for response in pipelines.connect_responses)


def test_spark_submit_gives_the_same_datasets_as_local_and_connect(
    pipelines: Pipelines, tmp_path: Path
) -> None:
    """The third engine on the first push and its transforms (a JVM per request: kept short; its replay
    is tested through Airflow, tests/integration/test_airflow_spark_submit.py), against the first push
    of the pipelines on the other two engines: the same records, and the same events as far as it went."""
    submitted = _pipeline(SparkSubmitRunner("local[1]"), tmp_path / "submit", pushes=1, replay=False)
    assert [r["city"] for r in _records(submitted.dataset(CENSUS))] == ["A", "B", "C"]
    for name in (CENSUS, BIG, TOTALS):
        dataset = submitted.dataset(name)
        ours = [_comparable(e) for e in _events(dataset)]
        assert len(ours) == len(_events(dataset)) > 1, name
        records = _records(dataset)
        for engine in (pipelines.local, pipelines.connect):
            theirs = engine.dataset(name)
            assert ours == [_comparable(e) for e in _events(theirs)][: len(ours)], name
            assert records == _records(theirs)[: len(records)], name
        assert verify_integrity(dataset) == []


def _census_root(repo: Repository, name: str) -> Dataset:
    """A root whose preprocess reads the view `input` and tags each row with the dataset's name: every
    request on the server has a view of that name."""
    read = model.ReadStepCsv(header=True, ddl_schema=["city STRING", "population BIGINT"])
    tagged = model.TransformSql(engine="spark", query=f"SELECT *, '{name}' AS dataset FROM input")
    source = model.AddPushSource(
        source_name="default",
        read=read,
        preprocess=tagged,
        merge=model.MergeStrategySnapshot(primary_key=["city"]),
    )
    repo.add(model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0)
    return repo.dataset(name)


def test_four_ingests_at_once_on_one_server(connect_url: str, tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "repo")
    names = [f"city{n}" for n in range(4)]
    datasets = {name: _census_root(repo, name) for name in names}
    engine = SparkConnectRunner(connect_url)

    def two_pushes(n: int) -> None:
        name = names[n]
        for day, rows in enumerate([[("A", n), ("B", 10 + n)], [("B", 20 + n), ("C", 30 + n)]], start=1):
            path = tmp_path / f"{name}-{day}.csv"
            path.write_text("city,population\n" + "".join(f"{c},{p}\n" for c, p in rows))
            options = IngestOptions(work_dir=tmp_path / f"work-{name}")
            push_ingest(
                datasets[name], name, engine, [path], options, event_time=_t(day), system_time=_t(day)
            )

    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(two_pushes, range(len(names))))

    for n, name in enumerate(names):
        dataset = repo.dataset(name)
        assert [
            (r["offset"], r["op"], r["city"], r["population"], r["dataset"]) for r in _records(dataset)
        ] == [
            (0, 0, "A", n, name),
            (1, 0, "B", 10 + n, name),
            (2, 1, "A", n, name),
            (3, 2, "B", 10 + n, name),
            (4, 3, "B", 20 + n, name),
            (5, 0, "C", 30 + n, name),
        ], name
        assert verify_integrity(dataset) == []


def test_a_row_of_the_wrong_width_fails_naming_its_line_on_both_engines(
    connect_url: str, tmp_path: Path
) -> None:
    """The check is deferred into the write (a FAILFAST read): every row's width is checked against all the
    declared columns even where the preprocess query drops some, as the full check does; a value is
    parsed where a query uses it (as in the reference, whose reader decodes the columns the query uses)."""
    read = model.ReadStepCsv(header=True, ddl_schema=["city STRING", "population BIGINT"])
    source = model.AddPushSource(
        source_name="default",
        read=read,
        preprocess=model.TransformSql(engine="spark", query="SELECT city FROM input"),
        merge=model.MergeStrategyAppend(),
    )
    short, unused = tmp_path / "short.csv", tmp_path / "unused.csv"
    short.write_text("city,population\nA,1\nB\nC,3\n")
    unused.write_text("city,population\nA,1\nB,lots\nC,3\n")
    for engine in (LocalSparkRunner("local[2]"), SparkConnectRunner(connect_url)):
        name = type(engine).__name__
        repo = Repository.init(tmp_path / name)
        repo.add(
            model.DatasetSnapshot(name="cities", kind=model.DatasetKind.ROOT, metadata=[source]),
            system_time=T0,
        )
        dataset = repo.dataset("cities")
        head = dataset.head()
        options = IngestOptions(work_dir=tmp_path / "work")
        with pytest.raises(IngestError) as err:
            push_ingest(dataset, "cities", engine, [short], options, event_time=_t(1), system_time=_t(1))
        assert err.value.kind == "bad-input", name
        assert f"{short}, line 3: malformed record" in str(err.value) and "'B'" in str(err.value), name
        assert dataset.head() == head and list(dataset.store.list("data")) == []
        push_ingest(dataset, "cities", engine, [unused], options, event_time=_t(1), system_time=_t(1))
        assert [(r["offset"], r["city"]) for r in _records(dataset)] == [(0, "A"), (1, "B"), (2, "C")], name


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_server_fails_the_request_naming_the_url(tmp_path: Path) -> None:
    url = f"sc://127.0.0.1:{_unused_port()}"
    with pytest.raises(ConnectUnreachableError) as failure:
        SparkConnectRunner(url + "/;user_id=odf;token=secret").run("{}", tmp_path)
    message = str(failure.value)
    assert message.startswith(f"Spark Connect server {url}: no server answered within 5 s;")
    assert "odf engine serve" in message and "secret" not in message


@pytest.mark.parametrize("answer", [None, b"HTTP/1.1 400 Bad Request\r\n\r\n"], ids=["silent", "http1"])
def test_a_port_that_does_not_speak_grpc_is_no_server(tmp_path: Path, answer: bytes | None) -> None:
    """A listener that accepts and then says nothing (or answers in HTTP/1) is not taken for a server:
    the request fails unstarted, as for a closed port, instead of waiting on gRPC's retries."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"sc://127.0.0.1:{listener.getsockname()[1]}"

        def serve() -> None:
            connection, _ = listener.accept()
            with connection:
                if answer is not None:
                    connection.sendall(answer)
                connection.recv(1024)  # until the client gives up and closes

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        with pytest.raises(ConnectUnreachableError) as failure:
            SparkConnectRunner(url).run("{}", tmp_path)
        server.join(30)
    assert str(failure.value).startswith(f"Spark Connect server {url}: no server answered within 5 s;")


def test_a_url_of_another_scheme_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConnectUnreachableError, match=r"not a Spark Connect URL \(sc://HOST:PORT"):
        SparkConnectRunner("http://127.0.0.1:15002").run("{}", tmp_path)


def test_the_server_tells_its_cores_as_the_local_session_does(
    runner: LocalSparkRunner, connect_url: str
) -> None:
    cores = default_parallelism(get_session())
    with connect_mode():
        spark = open_session(connect_url)
        try:
            assert default_parallelism(spark) == cores == 2
            assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
            assert spark.conf.get("spark.sql.caseSensitive") == "true"
        finally:
            spark.stop()


TRADES = "trades"
# small row groups and splits on the server: several splits per slice file, most of them holding no row
# group's middle (they read no rows), so that the partition-to-split mapping is tested on small files
SMALL_SPLITS = {"parquet.block.size": "32768", "spark.sql.files.maxPartitionBytes": "24576"}
# the first push's prices are all below 100,000: this filter empties its file's partitions
ROW_BY_ROW = (
    f"SELECT op, event_time, symbol, price * 2 AS doubled FROM {TRADES} "
    "WHERE price >= 100000 AND price % 3 <> 0"
)
EXCHANGING = f"SELECT event_time, symbol, price FROM {TRADES} WHERE price % 5 <> 0 ORDER BY price DESC"


_PRICES = [range(push * 100_000, push * 100_000 + 20_000) for push in range(3)]


def _trades_root(tmp_path: Path, engine: EngineRunner) -> Repository:
    """A root of three slices (three pushes of 20,000 rows in event-time order, each slice of several
    row groups); prices are unique."""
    repo = Repository.init(tmp_path / "repo")
    read = model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "symbol STRING", "price BIGINT"]
    )
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(
        model.DatasetSnapshot(name=TRADES, kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
    )
    for push in range(3):
        path = tmp_path / f"trades-{push}.csv"
        rows = (
            f"2024-02-{push + 1:02d}T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z,S{n % 17},{price}\n"
            for n, price in enumerate(_PRICES[push])
        )
        path.write_text("event_time,symbol,price\n" + "".join(rows))
        options = IngestOptions(work_dir=tmp_path / "work")
        push_ingest(repo.dataset(TRADES), TRADES, engine, [path], options, system_time=_t(push + 1))
    return repo


def test_a_row_by_row_transform_on_connect_takes_the_local_path_and_gives_the_same_slice(
    runner: LocalSparkRunner, connect_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Connect, a filter and projection over a multi-slice input is written in frame order from one
    scan (its partitions mapped to the input's files and splits from the data), a query that exchanges
    rows falls back to a read per file: both give what the local engine gives."""
    connect = SparkConnectRunner(connect_url, SMALL_SPLITS)
    repo = _trades_root(tmp_path, connect)
    assert len(_slices(repo.dataset(TRADES))) == 3
    assert all(meta.num_row_groups > 1 for meta in map(pq.read_metadata, _slice_files(repo.dataset(TRADES))))
    mapped: list[list[Any] | None] = []

    def recorded(*args: Any) -> list[Any] | None:
        mapped.append(keys := served_partition_keys(*args))
        return keys

    monkeypatch.setattr(transform_job, "served_partition_keys", recorded)
    for number, query in enumerate((ROW_BY_ROW, EXCHANGING)):
        mapped.clear()
        names = {}
        for engine_name, engine in (("local", runner), ("connect", connect)):
            name = names[engine_name] = f"{TRADES}.{engine_name}{number}"
            repo.add(_derivative_of(TRADES, name, query), system_time=T0)
            run_transform(repo, name, engine, TransformOptions(work_dir=tmp_path / "work"), system_time=_t(9))
        ours, theirs = repo.dataset(names["connect"]), repo.dataset(names["local"])
        records = _records(ours)
        assert records == _records(theirs)
        assert [_comparable(e) for e in _events(ours)] == [_comparable(e) for e in _events(theirs)]
        assert [logical_hash_of_parquet(path) for path in _slice_files(ours)] == [
            s.logical_hash for s in _slices(theirs)
        ]
        assert verify_integrity(ours) == []
        assert [r["offset"] for r in records] == list(range(len(records)))
        if query == ROW_BY_ROW:
            (keys,) = mapped  # the frame-order path: every non-empty partition mapped to one split
            assert keys is not None and len([k for k in keys if k is not None]) > 3
            assert None in keys  # partitions that read no rows
            expected = [2 * p for prices in _PRICES for p in prices if p >= 100_000 and p % 3]
            assert [r["doubled"] for r in records] == expected
            assert {r["op"] for r in records} == {0}
        else:
            assert mapped == []  # not row by row: a read per file
            expected = sorted((p for prices in _PRICES for p in prices if p % 5), reverse=True)
            assert [r["price"] for r in records] == expected


def _derivative_of(input_name: str, name: str, query: str) -> model.DatasetSnapshot:
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref=input_name)],
        transform=model.TransformSql(engine="spark", queries=[model.SqlQueryStep(alias=None, query=query)]),
    )
    return model.DatasetSnapshot(name=name, kind=model.DatasetKind.DERIVATIVE, metadata=[transform])


def _slice_files(dataset: Dataset) -> list[Path]:
    return [dataset.store.local_path(f"data/{s.physical_hash}") for s in _slices(dataset)]

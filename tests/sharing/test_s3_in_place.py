"""A repository in S3 (moto on 127.0.0.1) worked on by a Spark engine that reads and writes the bucket
itself through `s3a://` (the hadoop-aws jars): the engine writes its output into the operation's
staging folder in the bucket and hashes it on the executors, the core commits it by copies inside the
bucket. The same inputs give the same records, offsets and logical hashes as a local repository, and
no data object passes through the coordinator.

One local SparkSession with the jars for the whole module: a running JVM cannot take the jars, so the
session the suite shares is stopped (its JVM too) first and this one's at the end; later tests start a
plain one again (`get_session`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.cli.main import main
from airflow_odf.engine.connect_runner import SparkConnectRunner
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.engine.session import get_session
from airflow_odf.odf.chain.dataset import STAGING_PREFIX, Dataset
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.engine_client.connect_server import ConnectServer
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.polling import pull_polling
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.operation import IngestError
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.storage.s3 import S3ObjectStore
from airflow_odf.odf.storage.url import StoreCredentials, open_store
from airflow_odf.odf.transform.execute import TransformOptions, run_transform
from airflow_odf.utils.s3a import s3a_conf
from tests.sharing.conftest import ACCESS_KEY, REGION, SECRET_KEY

pyspark = pytest.importorskip("pyspark")

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
ORDERS = "com.acme.orders"
BIG = "com.acme.orders.big"
STOCK = "com.acme.stock"
ROWS = 60_000  # 1.8 MB of CSV


def _stop_spark() -> None:
    """Stops this process's SparkSession and the JVM behind it (the next session starts a new JVM,
    which is the only way it gets other jars)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.shutdown()
        proc = getattr(gateway, "proc", None)
        if proc is not None:  # the JVM exits when its stdin closes
            proc.stdin.close()
            proc.wait(timeout=60)
        SparkContext._gateway = None
        SparkContext._jvm = None


@pytest.fixture(scope="module")
def s3a_runner(moto_endpoint: str) -> Iterator[LocalSparkRunner]:
    """The in-process engine on a session that reads and writes the moto bucket through s3a."""
    yield from s3a_session_runner(moto_endpoint, {"spark.sql.shuffle.partitions": "4"})


def s3a_session_runner(
    endpoint: str, extra: dict[str, str], master: str = "local[2]"
) -> Iterator[LocalSparkRunner]:
    """The in-process engine on a fresh session with the s3a jars and the settings of the S3 server at
    `endpoint` (the suite's shared session, which has no jars, is stopped first and after). The keys go
    through `get_session`, which sets them on the running session, never on the JVM's command line."""
    conf = s3a_conf(
        endpoint=endpoint, region=REGION, path_style=True, access_key=ACCESS_KEY, secret_key=SECRET_KEY
    )
    _stop_spark()
    get_session(master, {**conf, "spark.driver.memory": "2g", **extra})
    try:
        yield LocalSparkRunner(master)
    finally:
        _stop_spark()


@pytest.fixture
def s3a_repo(s3_bucket: str, s3_credentials: StoreCredentials) -> Repository:
    url = f"s3://{s3_bucket}/odf"
    store = open_store(url, credentials=dataclasses.replace(s3_credentials, engine_scheme="s3a"))
    return Repository.in_store(store, url, create=True)


@dataclasses.dataclass
class Traffic:
    """What the coordinator moved of data objects, and what the engine left in the operation folders."""

    data_reads: list[str] = dataclasses.field(default_factory=list)  # `<store prefix>/<key>`
    uploaded: dict[str, int] = dataclasses.field(default_factory=dict)
    put_bytes: int = 0
    local_parquet: list[Path] = dataclasses.field(default_factory=list)

    @property
    def input_bytes(self) -> int:
        return sum(size for key, size in self.uploaded.items() if "/inputs/" in key)

    @property
    def data_bytes(self) -> int:
        """Bytes of data objects (slices, checkpoints, staged output) through the coordinator."""
        return self.put_bytes + sum(size for key, size in self.uploaded.items() if "/inputs/" not in key)


@pytest.fixture
def traffic(monkeypatch: pytest.MonkeyPatch) -> Traffic:
    """Counts the S3 store's reads of data objects and its uploads."""
    seen = Traffic()
    get, get_file, put, put_file = (
        S3ObjectStore.get,
        S3ObjectStore.get_file,
        S3ObjectStore.put,
        S3ObjectStore.put_file,
    )

    def is_data(key: str) -> bool:
        return key.startswith(("data/", "checkpoints/", f"{STAGING_PREFIX}/"))

    def counted_get(self: S3ObjectStore, key: str) -> bytes:
        if is_data(key):
            seen.data_reads.append(f"{self.prefix}/{key}")
        return get(self, key)

    def counted_get_file(self: S3ObjectStore, key: str, target: Path, **kwargs: Any) -> None:
        if is_data(key):
            seen.data_reads.append(f"{self.prefix}/{key}")
        get_file(self, key, target, **kwargs)

    def counted_put(self: S3ObjectStore, key: str, data: bytes) -> None:
        if is_data(key):
            seen.put_bytes += len(data)
        put(self, key, data)

    def counted_put_file(self: S3ObjectStore, key: str, source: Path, **kwargs: Any) -> None:
        seen.uploaded[key] = Path(source).stat().st_size
        put_file(self, key, source, **kwargs)

    monkeypatch.setattr(S3ObjectStore, "get", counted_get)
    monkeypatch.setattr(S3ObjectStore, "get_file", counted_get_file)
    monkeypatch.setattr(S3ObjectStore, "put", counted_put)
    monkeypatch.setattr(S3ObjectStore, "put_file", counted_put_file)
    return seen


def _watching(runner: LocalSparkRunner, traffic: Traffic) -> LocalSparkRunner:
    """The runner, noting every Parquet file in the operation folder once the engine answered."""

    class Watching(LocalSparkRunner):
        def run(self, request_json: str, work_dir: Path) -> str:
            response = super().run(request_json, work_dir)
            traffic.local_parquet += list(Path(work_dir).rglob("*.parquet"))
            return response

    return Watching(runner.master, runner.conf)


def _ledger_snapshot() -> model.DatasetSnapshot:
    read = model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "order_id BIGINT", "qty BIGINT"]
    )
    return model.DatasetSnapshot(
        name=ORDERS,
        kind=model.DatasetKind.ROOT,
        metadata=[
            model.AddPushSource(
                source_name="default", read=read, merge=model.MergeStrategyLedger(primary_key=["order_id"])
            )
        ],
    )


def _orders_csv(path: Path, first: int, last: int) -> Path:
    lines = ["event_time,order_id,qty"]
    lines += [f"2024-02-{1 + i % 28:02d}T{i % 24:02d}:00:00Z,{i},{i % 97}" for i in range(first, last)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _slices(dataset: Dataset) -> list[tuple[str, int, int, int]]:
    """(logical hash, first offset, last offset, records) of every AddData slice, oldest first."""
    found = []
    for _, block in dataset.iter_blocks():
        data = getattr(block.event, "new_data", None)
        if data is not None:
            interval = data.offset_interval
            found.append(
                (str(data.logical_hash), interval.start, interval.end, interval.end - interval.start + 1)
            )
    return list(reversed(found))


def _pushes(
    repo: Repository,
    runner: LocalSparkRunner | SparkConnectRunner,
    files: list[Path],
    work: Path,
    log: list[str] | None = None,
) -> tuple[Dataset, list[int]]:
    repo.add(_ledger_snapshot(), system_time=T0)
    dataset = repo.dataset(ORDERS)
    records = []
    for day, path in enumerate(files, start=1):
        result = push_ingest(
            dataset,
            ORDERS,
            runner,
            [path],
            IngestOptions(work_dir=work, log=(log if log is not None else []).append),
            system_time=Timestamp.parse(f"2024-03-0{day}T12:00:00Z"),
        )
        records.append(result.records)
    return dataset, records


Pushed = tuple[Dataset, list[int]]


def _pushed_here_and_in_the_bucket(
    runner: LocalSparkRunner | SparkConnectRunner,
    bucket_runner: LocalSparkRunner | SparkConnectRunner,
    s3a_repo: Repository,
    traffic: Traffic,
    tmp_path: Path,
    log: list[str] | None = None,
) -> tuple[list[Path], Pushed, Pushed]:
    """Two days of orders (the second repeating 100 of the first) pushed into a local repository and
    into the bucket's; the core's uploads are counted from the bucket's pushes only. Returns the files
    and, for each repository, the dataset and the records of each push."""
    files = [
        _orders_csv(tmp_path / "day1.csv", 0, ROWS),
        _orders_csv(tmp_path / "day2.csv", ROWS - 100, ROWS + 500),
    ]
    local = _pushes(Repository.init(tmp_path / "local"), runner, files, tmp_path / "local-work")
    traffic.uploaded.clear()
    return files, local, _pushes(s3a_repo, bucket_runner, files, tmp_path / "work", log)


def test_push_ingest_writes_and_hashes_in_the_bucket(
    s3a_runner: LocalSparkRunner,
    s3a_repo: Repository,
    traffic: Traffic,
    tmp_path: Path,
    s3_bucket: str,
    moto_endpoint: str,
) -> None:
    """Two pushes into a Ledger (the second merges against the checkpoint the first left in the bucket):
    the same slices as in a local repository, no data object read or uploaded by the core beyond the
    input files, nothing left in the staging folder, and `odf verify` content."""
    log: list[str] = []
    files, (local_orders, local_records), (orders, records) = _pushed_here_and_in_the_bucket(
        s3a_runner, _watching(s3a_runner, traffic), s3a_repo, traffic, tmp_path, log
    )

    assert records == local_records == [ROWS, 500]  # the 100 orders seen again were dropped: the checkpoint
    assert not [line for line in log if "asked for the previous slices" in line]  # it read the checkpoint
    assert _slices(orders) == _slices(local_orders)
    assert orders.state().checkpoint is not None
    assert traffic.data_reads == [] and traffic.local_parquet == []
    ingested = sum(path.stat().st_size for path in files)
    assert traffic.input_bytes == ingested  # the inputs entered the bucket once
    # target: at most 1% of the data through the coordinator; found: none of it
    assert traffic.data_bytes == 0
    assert list(orders.store.list_tree(STAGING_PREFIX)) == []
    assert verify_integrity(orders) == []
    assert main(["verify", ORDERS, "--repo", f"s3+{moto_endpoint}/{s3_bucket}/odf"]) == 0


def test_polling_snapshot_and_transform_in_the_bucket(
    s3a_runner: LocalSparkRunner, s3a_repo: Repository, traffic: Traffic, tmp_path: Path
) -> None:
    """A Snapshot polling source (prepared files uploaded, merge state checkpointed in the bucket) and a
    transform over the pushed orders: the same slices as in a local repository, no data object read."""
    files = [_orders_csv(tmp_path / "day1.csv", 0, 5_000)]
    local = Repository.init(tmp_path / "local")
    for repo, work, runner in (
        (local, tmp_path / "local-work", s3a_runner),
        (s3a_repo, tmp_path / "work", _watching(s3a_runner, traffic)),
    ):
        _pushes(repo, runner, files, work)
        repo.add(_transform_snapshot(), system_time=T0)
        src = work / "stock"
        src.mkdir(parents=True)
        repo.add(_stock_snapshot(src), system_time=T0)
        for day, rows in enumerate([["a,1", "b,2", "c,3"], ["a,1", "b,5", "d,4"]], start=1):
            (src / f"stock-{day}.csv").write_text("item,qty\n" + "\n".join(rows) + "\n")
            when = Timestamp.parse(f"2024-04-0{day}T00:00:00Z")
            options = IngestOptions(work_dir=work, source_dir=src)
            pull_polling(repo.dataset(STOCK), STOCK, runner, options, system_time=when)
        run_transform(repo, BIG, runner, TransformOptions(work_dir=work), system_time=T0)
    # the core read no data object; only the transform's own checkpoint (its inputs' watermarks)
    big = s3a_repo.dataset(BIG)
    assert isinstance(big.store, S3ObjectStore)
    assert all(read.startswith(f"{big.store.prefix}/checkpoints/") for read in traffic.data_reads)
    assert traffic.local_parquet == []
    for name in (STOCK, BIG):
        assert _slices(s3a_repo.dataset(name)) == _slices(local.dataset(name))
        assert list(s3a_repo.dataset(name).store.list_tree(STAGING_PREFIX)) == []
        assert verify_integrity(s3a_repo.dataset(name)) == []
    # +A a b c, then -C/+C b, -R c, +A d: the second snapshot merged against the first's state
    assert [records for *_, records in _slices(s3a_repo.dataset(STOCK))] == [3, 4]
    assert s3a_repo.dataset(STOCK).state().checkpoint is not None


def test_a_failed_operation_leaves_staged_objects_for_gc(
    s3a_runner: LocalSparkRunner, s3a_repo: Repository, tmp_path: Path, s3_bucket: str, moto_endpoint: str
) -> None:
    """The engine wrote into the staging folder, then the commit failed: the objects stay there until
    `odf gc` removes them (by age; `--min-age 0`: all of them), and the dataset is untouched."""
    repo_url = f"s3+{moto_endpoint}/{s3_bucket}/odf"
    s3a_repo.add(_ledger_snapshot(), system_time=T0)
    orders = s3a_repo.dataset(ORDERS)
    head = orders.head()

    class BrokenEngine(LocalSparkRunner):
        def run(self, request_json: str, work_dir: Path) -> str:
            response = super().run(request_json, work_dir)
            return response.replace('"physical_hash": "f', '"physical_hash": "x')

    with pytest.raises(IngestError, match="not a multihash"):
        push_ingest(
            orders, ORDERS, BrokenEngine(s3a_runner.master), [_orders_csv(tmp_path / "d.csv", 0, 100)],
            IngestOptions(work_dir=tmp_path / "work"),
        )  # fmt: skip
    staged = [key for key, _ in orders.store.list_tree(STAGING_PREFIX)]
    assert any(key.endswith(".parquet") and "/out/data/" in key for key in staged)
    assert any("/inputs/" in key for key in staged) and orders.head() == head
    assert main(["gc", "--repo", repo_url, "--min-age", "3600"]) == 0
    assert [key for key, _ in orders.store.list_tree(STAGING_PREFIX)] == staged  # too young to be garbage
    assert main(["gc", "--repo", repo_url, "--min-age", "0"]) == 0
    assert list(orders.store.list_tree(STAGING_PREFIX)) == []
    assert main(["verify", ORDERS, "--repo", repo_url]) == 0


def _transform_snapshot() -> model.DatasetSnapshot:
    query = f"SELECT event_time, order_id, qty FROM `{ORDERS}` WHERE qty >= 50"
    return model.DatasetSnapshot(
        name=BIG,
        kind=model.DatasetKind.DERIVATIVE,
        metadata=[
            model.SetTransform(
                inputs=[model.TransformInput(dataset_ref=ORDERS)],
                transform=model.TransformSql(engine="spark", query=query),
            )
        ],
    )


def _stock_snapshot(src: Path) -> model.DatasetSnapshot:
    source = model.SetPollingSource(
        fetch=model.FetchStepFilesGlob(path=str(src / "stock-*.csv")),
        read=model.ReadStepCsv(header=True, ddl_schema=["item STRING", "qty BIGINT"]),
        merge=model.MergeStrategySnapshot(primary_key=["item"]),
    )
    return model.DatasetSnapshot(name=STOCK, kind=model.DatasetKind.ROOT, metadata=[source])


def test_a_large_object_is_copied_in_parts_inside_the_bucket(
    make_s3_store: Callable[..., S3ObjectStore], traffic: Traffic
) -> None:
    """Above the multipart threshold the commit's copy is a multipart copy of ranges (one CopyObject
    takes at most 5 GB), still without the bytes passing through here; `list_tree` sees every level."""
    store = make_s3_store(multipart_threshold=5 * 1024 * 1024)  # S3's smallest part
    content = bytes(range(256)) * (12 * 1024 * 1024 // 256)
    store.put(f"{STAGING_PREFIX}/op/out/data/part-0.parquet", content)
    store.copy(f"{STAGING_PREFIX}/op/out/data/part-0.parquet", "data/f1620abc")
    assert store.client.head_object(Bucket=store.bucket, Key=f"{store.prefix}/data/f1620abc")[
        "ETag"
    ].endswith('-3"')  # three parts
    assert store.size("data/f1620abc") == len(content) and traffic.data_reads == []
    assert [key for key, _ in store.list_tree(STAGING_PREFIX)] == [
        f"{STAGING_PREFIX}/op/out/data/part-0.parquet"
    ]
    assert store.get("data/f1620abc") == content


def test_a_connect_server_started_with_s3a_writes_and_hashes_in_the_bucket(
    moto_endpoint: str, s3a_repo: Repository, traffic: Traffic, tmp_path: Path
) -> None:
    """The warm engine (`odf engine serve --s3a`'s server: the jars, the store's settings, the keys in a
    file only its user reads): its executors hash what they wrote with the settings the driver reads
    from the server's conf; the slices are those of a local repository and verify."""
    conf = s3a_conf(
        endpoint=moto_endpoint, region=REGION, path_style=True, access_key=ACCESS_KEY, secret_key=SECRET_KEY
    )
    server = ConnectServer("local[2]", port=0, conf={**conf, "spark.sql.shuffle.partitions": "4"})
    runner = SparkConnectRunner(server.start())
    try:
        _, (local_orders, local_records), (orders, records) = _pushed_here_and_in_the_bucket(
            runner, runner, s3a_repo, traffic, tmp_path
        )
    finally:
        server.stop()
    assert records == local_records == [ROWS, 500]
    assert _slices(orders) == _slices(local_orders)
    assert traffic.data_reads == [] and traffic.data_bytes == 0
    assert list(orders.store.list_tree(STAGING_PREFIX)) == []
    assert verify_integrity(orders) == []

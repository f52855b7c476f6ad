"""A working repository in S3 (moto on 127.0.0.1) with the local Spark engine: the engine reads staged
copies of the inputs and writes to local scratch space, the core moves objects into the bucket. Push
ingest, incremental ingest (merge state read back from S3), a transform over it, verification of
integrity and reproducibility, and `odf` commands on an `s3+http://` repository URL."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from airflow_odf.cli.main import main
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.operation import local_object
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.storage.s3 import S3ObjectStore
from airflow_odf.odf.storage.url import StoreCredentials, open_store
from airflow_odf.odf.transform.execute import TransformOptions, run_transform
from airflow_odf.odf.transform.verify import verify_reproducibility
from tests.engine.conftest import runner, spark  # noqa: F401  (fixtures)
from tests.unit.test_dataset import DID

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
ORDERS = "com.acme.orders"
BIG = "com.acme.orders.big"


@pytest.fixture
def repo_url(moto_endpoint: str, s3_bucket: str) -> str:
    return f"s3+{moto_endpoint}/{s3_bucket}/odf"


def _snapshots() -> list[model.DatasetSnapshot]:
    read = model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "order_id BIGINT", "qty BIGINT"]
    )
    root = model.DatasetSnapshot(
        name=ORDERS,
        kind=model.DatasetKind.ROOT,
        metadata=[
            model.AddPushSource(
                source_name="default", read=read, merge=model.MergeStrategyLedger(primary_key=["order_id"])
            )
        ],
    )
    derivative = model.DatasetSnapshot(
        name=BIG,
        kind=model.DatasetKind.DERIVATIVE,
        metadata=[
            model.SetTransform(
                inputs=[model.TransformInput(dataset_ref=ORDERS)],
                transform=model.TransformSql(
                    engine="spark", query=f"SELECT event_time, order_id, qty FROM `{ORDERS}` WHERE qty >= 10"
                ),
            )
        ],
    )
    return [root, derivative]


def test_ingest_and_transform_into_an_s3_repository(
    repo_url: str,
    tmp_path: Path,
    runner: LocalSparkRunner,  # noqa: F811  (the fixture imported above)
    s3_bucket: str,
) -> None:
    repo = Repository.init(repo_url)
    assert isinstance(repo.store, S3ObjectStore) and not repo.is_local
    for snapshot in _snapshots():
        repo.add(snapshot, system_time=T0)
    options = IngestOptions(work_dir=tmp_path / "work")
    day1, day2 = tmp_path / "day1.csv", tmp_path / "day2.csv"
    day1.write_text("event_time,order_id,qty\n2024-02-01T00:00:00Z,1,5\n2024-02-01T01:00:00Z,2,20\n")
    day2.write_text("event_time,order_id,qty\n2024-02-01T01:00:00Z,2,20\n2024-02-02T00:00:00Z,3,30\n")
    orders = repo.dataset(ORDERS)
    first = push_ingest(
        orders, ORDERS, runner, [day1], options, system_time=Timestamp.parse("2024-02-01T12:00:00Z")
    )
    second = push_ingest(
        orders, ORDERS, runner, [day2], options, system_time=Timestamp.parse("2024-02-02T12:00:00Z")
    )
    assert first.records == 2 and second.records == 1  # the ledger saw order 2 again: merge state from S3
    result = run_transform(repo, BIG, runner, TransformOptions(work_dir=tmp_path / "work"))
    assert result.records == 2
    big = repo.dataset(BIG)
    rows = tail(big, 10)
    assert rows is not None and rows.column("order_id").to_pylist() == [2, 3]
    assert rows.column("offset").to_pylist() == [0, 1]
    # every object of both chains is in the bucket, and checks out
    for dataset in (orders, big):
        assert verify_integrity(dataset) == []
        for _, block in dataset.iter_blocks():
            event = block.event
            if isinstance(event, model.AddData | model.ExecuteTransform) and event.new_data is not None:
                assert dataset.store.exists(f"data/{event.new_data.physical_hash}")
                assert dataset.store.local_path(f"data/{event.new_data.physical_hash}") is None
    assert verify_reproducibility(repo, BIG, runner, tmp_path / "verify") == []


def test_odf_commands_on_an_s3_repository_url(
    repo_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    spark: object,  # noqa: F811  (the fixture imported above)
) -> None:
    assert main(["init", "--repo", repo_url]) == 0
    manifest = tmp_path / "orders.yaml"
    manifest.write_text(
        json.dumps(
            {
                "kind": "DatasetSnapshot",
                "version": 1,
                "content": {
                    "name": ORDERS,
                    "kind": "Root",
                    "metadata": [
                        {
                            "kind": "AddPushSource",
                            "sourceName": "default",
                            "read": {
                                "kind": "Csv",
                                "header": True,
                                "schema": ["event_time TIMESTAMP", "qty BIGINT"],
                            },
                            "merge": {"kind": "Append"},
                        }
                    ],
                },
            }
        )
    )
    data = tmp_path / "in.csv"
    data.write_text("event_time,qty\n2024-02-01T00:00:00Z,7\n")
    assert main(["add", str(manifest), "--repo", repo_url]) == 0
    assert (
        main(["ingest", ORDERS, str(data), "--repo", repo_url, "--engine", "local", "--format", "json"]) == 0
    )
    capsys.readouterr()
    assert main(["tail", ORDERS, "--repo", repo_url, "--format", "json"]) == 0
    assert [r["qty"] for r in json.loads(capsys.readouterr().out)] == [7]
    assert main(["verify", ORDERS, "--repo", repo_url]) == 0
    assert main(["list", "--repo", repo_url]) == 0
    assert ORDERS in capsys.readouterr().out


def test_a_cluster_with_s3a_reads_objects_in_place(
    moto_endpoint: str, s3_bucket: str, s3_credentials: StoreCredentials, tmp_path: Path
) -> None:
    """The documented switch: with `engine_scheme="s3a"` the engine is given `s3a://` URIs of the
    objects instead of staged copies (this machine's Spark has no hadoop-aws, so only the request is
    checked); without it, objects are staged."""
    url = f"s3://{s3_bucket}/odf/ds"
    direct = Dataset(open_store(url, credentials=dataclasses.replace(s3_credentials, engine_scheme="s3a")))
    staged = Dataset(open_store(url, credentials=s3_credentials))
    staged.store.put("data/x", b"parquet bytes")
    assert local_object(direct, "data/x", tmp_path) == f"s3a://{s3_bucket}/odf/ds/data/x"
    copy = Path(local_object(staged, "data/x", tmp_path))
    assert copy.read_bytes() == b"parquet bytes" and copy.is_relative_to(tmp_path)
    repo = Repository.in_store(
        open_store(
            f"s3://{s3_bucket}/odf", credentials=dataclasses.replace(s3_credentials, engine_scheme="s3a")
        ),
        f"s3://{s3_bucket}/odf",
        create=True,
    )
    assert (
        repo.dataset_by_id(DID).store.engine_uri("data/y")
        == f"s3a://{s3_bucket}/odf/datasets/{str(DID)[8:]}/data/y"
    )


def test_an_odf_repo_connection_to_s3(
    monkeypatch: pytest.MonkeyPatch, moto_endpoint: str, s3_bucket: str
) -> None:
    """Keys from an AWS connection (`aws_conn_id`), endpoint and region from the extras; the hook
    opens (and creates) the repository in the bucket, and its test button says so."""
    from airflow_odf.hooks.repo import OdfRepoHook

    aws = {"conn_type": "aws", "login": "testing-access-key", "password": "testing-secret-key"}
    monkeypatch.setenv("AIRFLOW_CONN_MY_AWS", json.dumps(aws))
    extra = {
        "aws_conn_id": "my_aws",
        "endpoint_url": moto_endpoint,
        "region_name": "us-east-1",
        "spark_s3a": "true",
    }
    conn = {"conn_type": "odf_repo", "host": f"s3://{s3_bucket}/odf", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_ODF_LAKE", json.dumps(conn))
    hook = OdfRepoHook("odf_lake")
    creds = hook.store_credentials()
    assert (creds.aws_access_key_id, creds.aws_secret_access_key) == (
        "testing-access-key",
        "testing-secret-key",
    )
    assert creds.endpoint_url == moto_endpoint and creds.engine_scheme == "s3a"
    assert "testing-secret-key" not in repr(creds)
    repo = hook.open_repository(create=True)
    assert not repo.is_local and repo.location == f"s3://{s3_bucket}/odf"
    ok, message = hook.test_connection()
    assert ok and "0 dataset(s)" in message
    assert hook.dataset_url("com.acme.orders") == f"s3://{s3_bucket}/odf/com.acme.orders"

"""Example DAG 6 with `dag.test()` on SQLite, the local Spark and a real S3 API (moto on 127.0.0.1):
ingest, transform, push both datasets to S3, pull them into a second repository, verify the replica."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.storage.url import StoreCredentials, open_store
from tests.airflow.conftest import odf_repo  # noqa: F401  (a fixture)
from tests.airflow.dag_runs import asset_events, load_dag, task_states, xcom
from tests.engine.conftest import spark  # noqa: F401  (the shared SparkSession fixture)
from tests.sharing.conftest import ACCESS_KEY, REGION, SECRET_KEY
from tests.unit.test_dataset import files

DATASETS = ("com.example.trades", "com.example.trades.daily")


@pytest.mark.usefixtures("airflow_db", "spark")
def test_sharing_dag(
    odf_repo: Path,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    s3_bucket: str,
    moto_endpoint: str,
    s3_credentials: StoreCredentials,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replica_root = tmp_path / "replica"
    extra = {
        "endpoint_url": moto_endpoint,
        "aws_access_key_id": ACCESS_KEY,
        "aws_secret_access_key": SECRET_KEY,
        "region_name": REGION,
    }
    remote = f"s3://{s3_bucket}/odf"
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_S3", json.dumps({"conn_type": "odf_repo", "host": remote, "extra": extra})
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_REPLICA", json.dumps({"conn_type": "odf_repo", "host": replica_root.as_uri()})
    )
    run = load_dag("odf_sharing.py", "odf_sharing").test()
    assert set(task_states(run).values()) == {"success"}, task_states(run)

    origin, replica = Repository.open(odf_repo), Repository.open(replica_root)
    for name, push_task, pull_task in zip(
        DATASETS, ("push_trades", "push_daily"), ("pull_trades", "pull_daily"), strict=True
    ):
        head = origin.dataset(name).head()
        s3_head = Dataset(open_store(f"{remote}/{name}", credentials=s3_credentials)).head()
        assert s3_head == head == replica.dataset(name).head()
        pushed, pulled = xcom(run, push_task), xcom(run, pull_task)
        assert pushed["remote_head"] == pulled["new_head"] == str(head)
        assert pushed["prev_head"] is None and pulled["prev_head"] is None
        assert pushed["new_blocks"] == pulled["new_blocks"] and pulled["records"] > 0
        assert pulled["remote_url"] == f"{remote}/{name}"
        signed = {"status": "signed", "signer": str(origin.resolve(name))}  # required by the pulls
        assert pushed["signature"] == pulled["signature"] == signed
        did = str(origin.resolve(name)).removeprefix("did:odf:")
        for sub in ("blocks", "data", "checkpoints"):
            assert files(odf_repo / "datasets" / did, sub) == files(replica_root / "datasets" / did, sub)
        attestation = f"attestations/{head}"
        assert (replica_root / "datasets" / did / attestation).read_bytes() == (
            odf_repo / "datasets" / did / attestation
        ).read_bytes()
        # the asset event of the head came from the task that wrote it; the example's pull declares no
        # outlet (a copy is no news to DAGs scheduled on the dataset), the push has none
        events = [e for e in asset_events(f"odf://{did}") if e["extra"].get("head") == str(head)]
        assert events and not {e["source_task_id"] for e in events} & {pull_task, push_task}
    report = xcom(run, "verify_replica")
    assert report["ok"] and report["reproducibility"] == "checked"
    assert report["signature"] == {"status": "signed", "signer": str(origin.resolve(DATASETS[1]))}

"""The example DAGs 1 and `odf_warm_engine` (`dags_examples/odf_trades_pipeline.py`, whose tasks
`dags_examples/odf_warm_engine.py` runs) through Airflow on the standalone cluster and an `s3://`
repository (issue 26, item 5; issue 37): `spark_connect_default` is the cluster's warm driver (a Spark
Connect server whose executors run on the cluster, the session's `warm_engine`), `odf_default` an
`odf_repo` connection to the bucket with `spark_s3a: true`. The tasks share that one driver rather than
starting a spark-submit application (a JVM, and executors on the cluster) each: the Airflow hook's
spark-submit runner is proven on a local master (tests/integration/test_airflow_spark_submit.py) and
spark-submit applications on this cluster by the `odf` commands of tests/cluster.

The DAG runs by `dag.test()` in a child process with its own Airflow home, SQLite DB and DAGS_FOLDER,
as a worker of a deployment would. The folder holds a copy of the example (DAG files, manifests, trade
files) in the session's temp base, which the executors cannot see: the ingest's local trade files reach
them only through the operation's staging folder in the bucket.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from moto.s3.responses import S3Response

from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.storage.url import StoreCredentials, open_store
from tests.airflow_db import fresh_db
from tests.cluster.pipeline import airflow_connections
from tests.cluster.standalone import StandaloneCluster
from tests.paths import REPO
from tests.sharing.conftest import ACCESS_KEY, REGION, SECRET_KEY

EXAMPLES = REPO / "dags_examples"
DAG_FILES = ("odf_trades_pipeline.py", "odf_warm_engine.py")  # the second runs the first's tasks
TASKS = ("apply_manifests", "ingest_trades", "transform_daily", "verify_daily")

# The child: the warm-engine example DAG of DAGS_FOLDER, one dag.test(), and what its tasks left in the DB.
CHILD = textwrap.dedent(
    f"""
    import importlib.util, json, os, sys

    from tests.airflow.dag_runs import task_states, xcom

    folder = os.environ["AIRFLOW__CORE__DAGS_FOLDER"]
    sys.path.insert(0, folder)  # as Airflow puts the DAG folder on sys.path
    spec = importlib.util.spec_from_file_location("odf_warm_engine", os.path.join(folder, {DAG_FILES[1]!r}))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = module.warm_engine.test()
    tasks = {TASKS!r}
    print("RESULT " + json.dumps({{"states": task_states(run), "xcom": {{t: xcom(run, t) for t in tasks}}}}))
    """
)


def copy_example(dags: Path) -> None:
    """The example DAGs with what they read (manifests, trade files) beside them, as in dags_examples/."""
    dags.mkdir(parents=True)
    for name in DAG_FILES:
        shutil.copy2(EXAMPLES / name, dags / name)
    shutil.copytree(EXAMPLES / "manifests", dags / "manifests")
    (dags / "data").mkdir()
    for trades in sorted((EXAMPLES / "data").glob("trades-*.csv")):
        shutil.copy2(trades, dags / "data" / trades.name)


def airflow_env(root: Path) -> dict[str, str]:
    """An Airflow deployment of its own under `root` (home, SQLite DB, DAGS_FOLDER); no AWS settings of
    this machine (the keys come from the connection)."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AWS_", "ODF_WORK_DIR"))}
    return {
        **inherited,
        "AIRFLOW_HOME": str(root / "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AWS_CONFIG_FILE": str(root / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(root / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


@pytest.fixture
def keys_put(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """`(bucket, key)` of every object PUT to the moto server at `moto_endpoint` (it runs in this
    process) from now on."""
    put: list[tuple[str, str]] = []
    original = S3Response.put_object  # the moto_endpoint fixture's serialized PUT

    def recorded(self: S3Response) -> Any:
        put.append((self.bucket_name, self.parse_key_name()))
        return original(self)

    monkeypatch.setattr(S3Response, "put_object", recorded)
    return put


def test_the_example_dag_runs_on_the_cluster_with_its_repository_in_s3(
    cluster: StandaloneCluster,
    warm_engine: str,
    moto_endpoint: str,
    s3_admin: Any,
    keys_put: list[tuple[str, str]],
    tmp_path: Path,
) -> None:
    bucket = f"odf-dag-{uuid.uuid4().hex[:12]}"
    s3_admin.create_bucket(Bucket=bucket)
    repository = f"s3://{bucket}/odf"
    scratch = tmp_path / "scratch"  # the connection's work_dir: hidden from the executors
    assert any(folder in tmp_path.parents for folder in cluster.hidden)  # and so are the trade files
    copy_example(tmp_path / "dags")
    env = {
        **airflow_env(tmp_path),
        **airflow_connections(
            warm_engine, repository, moto_endpoint, scratch, spark_conn_id="spark_connect_default"
        ),
    }
    fresh_db(tmp_path / "home" / "airflow.db")  # what `airflow db migrate` makes there, copied

    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, cwd=REPO, capture_output=True, text=True, timeout=1500
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-6000:] + cluster.logs()
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["states"] == dict.fromkeys(TASKS, "success"), done.stderr[-6000:] + cluster.logs()
    xcoms = result["xcom"]

    # the XComs name the heads the bucket holds; the transform is pinned to the ingest's head
    credentials = StoreCredentials(
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region=REGION,
        endpoint_url=moto_endpoint,
    )
    repo = Repository.in_store(open_store(repository, credentials=credentials), repository)
    trades, daily = repo.dataset("com.example.trades"), repo.dataset("com.example.trades.daily")
    applied = {r["dataset"]: r for r in xcoms["apply_manifests"]}
    assert applied["com.example.trades"]["created"] and applied["com.example.trades.daily"]["created"]
    ingested, transformed = xcoms["ingest_trades"], xcoms["transform_daily"]
    assert ingested["dataset_id"] == str(trades.state().dataset_id)
    assert ingested["new_head"] == str(trades.head()) and ingested["records"] == 5
    assert transformed["new_head"] == str(daily.head()) and transformed["records"] == 4
    execute = daily.block(daily.head()).event
    assert isinstance(execute, model.ExecuteTransform)
    assert str(execute.query_inputs[0].new_block_hash) == ingested["new_head"]
    report = xcoms["verify_daily"]
    assert report["ok"] and report["reproducibility"] == "checked"

    # the rows: each trade once (1003 is in both files), the daily volumes of the example's data
    ingested_trades = tail(trades, 100)
    assert ingested_trades is not None
    assert sorted(ingested_trades.column("trade_id").to_pylist()) == [1001, 1002, 1003, 1004, 1005]
    assert sorted(ingested_trades.column("price").to_pylist())[-1] == Decimal("101.2500")
    days = tail(daily, 100)
    assert days is not None
    rows = [
        (row["event_time"].date().isoformat(), row["symbol"], row["volume"], row["trades"])
        for row in days.to_pylist()
    ]
    assert rows == [
        ("2024-01-02", "ACME", 350, 2),
        ("2024-01-02", "INIT", 20, 1),
        ("2024-01-03", "ACME", 75, 1),
        ("2024-01-03", "INIT", 10, 1),
    ]

    # the trade files, which the executors cannot see, were uploaded into the ingest's staging folder
    staged_inputs = [key for name, key in keys_put if name == bucket and "/cache/operations/" in key]
    assert sorted(key.rpartition("-trades-")[2] for key in staged_inputs if "/inputs/" in key) == [
        "2024-01-02.csv",
        "2024-01-03.csv",
    ]
    # the data went through the bucket: nothing staged is left there, and none of it is on the coordinator
    keys = [o["Key"] for o in s3_admin.list_objects_v2(Bucket=bucket, Prefix="odf/")["Contents"]]
    assert not [key for key in keys if "/cache/operations/" in key]
    left = [path for path in scratch.rglob("*") if path.is_file()]  # the warm driver's requests: over gRPC
    assert not [path for path in left if path.suffix in (".parquet", ".csv")]
    assert not [path for path in left if b"101.2500" in path.read_bytes()]

"""The issue's pipeline on an `s3://` repository with s3a, run through the cluster's warm driver (issue
26 item 5, issue 37): built once per session (`s3_pipeline` in conftest.py) and shared by the scenario
test and the tests of each request kind, which would otherwise repeat its set-up.

Every command is `odf ... --engine spark-connect --remote <warm driver> --spark-s3a` (through the
environment: ODF_ENGINE, ODF_SPARK_REMOTE, ODF_SPARK_S3A): the driver runs here, beside the coordinator,
and its executors on the worker, which sees none of the coordinator's directories."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cluster.standalone import VENV_BIN
from tests.connections import spark_connect_conn
from tests.sharing.conftest import ACCESS_KEY, REGION, SECRET_KEY, moto_environment

CSV_HEADER = "event_time,id,symbol,price\n"
# out of event-time order on purpose: the ingest sorts
CSV_ROWS = [
    "2024-01-01T00:00:03Z,3,SYMC,30.5\n",
    "2024-01-01T00:00:01Z,1,SYMA,10.25\n",
    "2024-01-01T00:00:02Z,2,SYMB,20.0\n",
]
SECOND_TRADES = ["2024-01-01T00:00:04Z,2,SYMB,21.0\n", "2024-01-01T00:00:05Z,4,SYMD,40.0\n"]
POSITION_PUSHES = (["SYMA,10", "SYMB,20"], ["SYMA,15", "SYMC,5"])

PIPELINE_MANIFESTS = {
    "trades": """\
kind: DatasetSnapshot
version: 1
content:
  name: trades
  kind: Root
  metadata:
  - kind: SetPollingSource
    fetch:
      kind: FilesGlob
      path: s3://{bucket}/landing/trades-*.csv
      order: ByName
    read:
      kind: Csv
      header: true
      schema:
      - event_time TIMESTAMP
      - id BIGINT
      - symbol STRING
      - price DOUBLE
    merge:
      kind: Ledger
      primaryKey:
      - id
""",
    "positions": """\
kind: DatasetSnapshot
version: 1
content:
  name: positions
  kind: Root
  metadata:
  - kind: AddPushSource
    sourceName: default
    read:
      kind: Csv
      header: true
      schema:
      - event_time TIMESTAMP
      - symbol STRING
      - quantity BIGINT
    merge:
      kind: Snapshot
      primaryKey:
      - symbol
""",
    "trades.by-symbol": """\
kind: DatasetSnapshot
version: 1
content:
  name: trades.by-symbol
  kind: Derivative
  metadata:
  - kind: SetTransform
    inputs:
    - datasetRef: trades
      alias: trades
    transform:
      kind: Sql
      engine: spark
      query: SELECT event_time, symbol, price * 2 AS doubled FROM trades
  - kind: SetVocab
    eventTimeColumn: event_time
""",
}


def driver_errors(stderr: str) -> str:
    """The driver's error lines (no INFO chatter, no Java stack frames), for failure messages."""
    lines = [
        line for line in stderr.splitlines() if " INFO " not in line and not line.lstrip().startswith("at ")
    ]
    return "\n".join(lines[-60:])


def odf(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # a hang fails the test by the timeout
        [str(VENV_BIN / "odf"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=300,
        check=False,
    )


@dataclass(frozen=True)
class S3Pipeline:
    """The repository `repo` (`s3://<bucket>/odf`) and how to run `odf` on it through the warm driver."""

    bucket: str
    repo: str
    folder: Path  # the coordinator's files: manifests, pushed files (hidden from the executors)
    scratch: Path  # the repository's work dir (ODF_WORK_DIR): hidden from the executors
    env: dict[str, str]

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        """`odf ARGS --repo REPO` on the warm driver; it must succeed unless `ok` is False."""
        done = odf(*args, "--repo", self.repo, cwd=self.folder, env=self.env)
        if ok:
            assert done.returncode == 0, f"odf {' '.join(args)}:\n{driver_errors(done.stderr)}"
        return done

    def table(self, name: str) -> list[dict[str, Any]]:
        """The dataset's records, in offset order (`odf tail`)."""
        done = self.run("tail", name, "-n", "100", "--format", "json")
        return sorted(json.loads(done.stdout), key=lambda row: row["offset"])

    def staged_keys(self, s3_admin: Any) -> list[str]:
        """Objects left in an operation's staging folder of the bucket (none once a request is done)."""
        listed = s3_admin.list_objects_v2(Bucket=self.bucket, Prefix="odf/").get("Contents", [])
        return [o["Key"] for o in listed if "/cache/operations/" in o["Key"]]

    def scratch_data(self, marker: bytes) -> list[Path]:
        """Files in the coordinator's scratch dir holding data: Parquet, CSV, or `marker`'s bytes."""
        left = [path for path in self.scratch.rglob("*") if path.is_file()]
        return [p for p in left if p.suffix in (".parquet", ".csv") or marker in p.read_bytes()]


def land(s3_admin: Any, bucket: str, name: str, rows: list[str]) -> None:
    s3_admin.put_object(Bucket=bucket, Key=f"landing/{name}", Body=(CSV_HEADER + "".join(rows)).encode())


def build_pipeline(warm_engine: str, moto_endpoint: str, s3_admin: Any, folder: Path) -> S3Pipeline:
    """`odf init` and `odf add` of the three datasets; `odf pull` of the root whose FilesGlob reads
    `s3://<bucket>/landing/trades-*.csv` (Ledger), twice as objects land; two push ingests merged as
    Snapshots; `odf pull` of the derivative. The tests check what each left."""
    bucket = f"odf-pipeline-{uuid.uuid4().hex[:12]}"
    s3_admin.create_bucket(Bucket=bucket)
    scratch = folder / "scratch"
    env = {
        **moto_environment(moto_endpoint, folder),
        "ODF_WORK_DIR": str(scratch),
        "ODF_S3_SOURCE_PREFIXES": f"s3://{bucket}/landing",
        "ODF_ENGINE": "spark-connect",
        "ODF_SPARK_REMOTE": warm_engine,
        "ODF_SPARK_S3A": "1",
    }
    pipeline = S3Pipeline(bucket, f"s3://{bucket}/odf", folder, scratch, env)
    manifests = []
    for name, text in PIPELINE_MANIFESTS.items():
        path = folder / f"{name}.yaml"
        path.write_text(text.format(bucket=bucket))
        manifests.append(str(path))
    pipeline.run("init")
    pipeline.run("add", *manifests)

    land(s3_admin, bucket, "trades-1.csv", CSV_ROWS)
    pipeline.run("pull", "trades")
    land(s3_admin, bucket, "trades-2.csv", SECOND_TRADES)
    pipeline.run("pull", "trades")
    for n, rows in enumerate(POSITION_PUSHES):
        push = folder / f"positions-{n}.csv"
        push.write_text(
            "event_time,symbol,quantity\n" + "".join(f"2024-01-0{n + 1}T00:00:00Z,{r}\n" for r in rows)
        )
        pipeline.run("ingest", "positions", str(push))
    pipeline.run("pull", "trades.by-symbol")
    return pipeline


def airflow_connections(
    warm_engine: str, repository: str, endpoint: str, work_dir: Path, *, spark_conn_id: str
) -> dict[str, str]:
    """The environment's Airflow connections of a task on the cluster: `spark_conn_id`, a `spark_connect`
    connection to the warm driver (`sc://HOST:PORT`), and `odf_default` on the bucket, s3a on."""
    odf = {
        "conn_type": "odf_repo",
        "host": repository,
        "extra": {
            "endpoint_url": endpoint,
            "region_name": REGION,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "spark_s3a": True,
            "work_dir": str(work_dir),
        },
    }
    return {
        f"AIRFLOW_CONN_{spark_conn_id.upper()}": json.dumps(spark_connect_conn(warm_engine)),
        "AIRFLOW_CONN_ODF_DEFAULT": json.dumps(odf),
    }

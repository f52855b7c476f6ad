"""A Spark standalone cluster whose executors cannot see the coordinator's disk (issue 26, item 5): the
isolation is real, s3a works through it, the ODF engine refuses in one line to work on a local
repository it cannot see, and with an `s3://` repository and s3a the issue's whole pipeline runs."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_odf.odf.repo.repository import Repository
from airflow_odf.utils.s3a import split_secrets
from tests.cluster.standalone import VENV_BIN, StandaloneCluster, spark_submit
from tests.sharing.conftest import moto_environment

JOBS = Path(__file__).resolve().parent / "jobs.py"
CSV_HEADER = "event_time,id,symbol,price\n"
# out of event-time order on purpose: the job sorts
CSV_ROWS = [
    "2024-01-01T00:00:03Z,3,SYMC,30.5\n",
    "2024-01-01T00:00:01Z,1,SYMA,10.25\n",
    "2024-01-01T00:00:02Z,2,SYMB,20.0\n",
]


def driver_errors(stderr: str) -> str:
    """The driver's error lines (no INFO chatter, no Java stack frames), for failure messages."""
    lines = [
        line for line in stderr.splitlines() if " INFO " not in line and not line.lstrip().startswith("at ")
    ]
    return "\n".join(lines[-60:])


def run_job(
    cluster: StandaloneCluster, scratch: Path, job: str, *args: str, conf: dict[str, str] | None = None
) -> Any:
    """Runs one job of jobs.py through the cluster; its JSON result (the job must succeed)."""
    public, secrets = split_secrets(conf or {})
    result = scratch / f"{job}.json"
    done = spark_submit(
        cluster.master_url,
        JOBS,
        [job, *args, "--result", str(result)],
        conf=public,
        secrets=secrets,
        scratch=scratch,
    )
    assert done.returncode == 0 and result.exists(), (
        f"{job} failed:\n{driver_errors(done.stderr)}\n{cluster.logs()}"
    )
    return json.loads(result.read_text(encoding="utf-8"))


def test_executors_cannot_see_what_the_coordinator_writes_in_its_scratch_dir(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    hidden = tmp_path / "coordinator-only.txt"
    hidden.write_text("written by the coordinator\n")
    shared = cluster.shared / f"both-{uuid.uuid4().hex[:8]}.txt"
    shared.write_text("on a disk both see\n")
    found = run_job(cluster, tmp_path / "scratch", "probe", "--hidden", str(hidden), "--shared", str(shared))

    by_path = {seen["path"]: seen for seen in found["executors"]}
    assert (by_path[str(hidden)]["exists"], by_path[str(hidden)]["text"]) == (False, None)
    assert (by_path[str(shared)]["exists"], by_path[str(shared)]["text"]) == (True, "on a disk both see\n")
    executor_namespaces = {seen["mount_namespace"] for seen in found["executors"]}
    assert found["driver_mount_namespace"] not in executor_namespaces  # the executors live elsewhere
    # Spark's own read: the driver lists the file, the executor cannot open it
    assert "FAILED_READ_FILE.FILE_NOT_EXIST" in found["reads"]["hidden"]["error"]
    assert f"file://{hidden}" in found["reads"]["hidden"]["error"]
    assert found["reads"]["shared"] == {"lines": ["on a disk both see"]}


def test_executors_read_csv_and_write_parquet_over_s3a(
    cluster: StandaloneCluster, s3a_settings: dict[str, str], s3_admin: Any, tmp_path: Path
) -> None:
    bucket = f"odf-cluster-{uuid.uuid4().hex[:12]}"
    s3_admin.create_bucket(Bucket=bucket)
    s3_admin.put_object(Bucket=bucket, Key="in/events.csv", Body=(CSV_HEADER + "".join(CSV_ROWS)).encode())
    found = run_job(
        cluster,
        tmp_path / "scratch",
        "csv-to-parquet",
        "--source",
        f"s3a://{bucket}/in/",
        "--target",
        f"s3a://{bucket}/out/events.parquet",
        conf=s3a_settings,
    )
    found.pop("write_seconds")
    assert found == {"rows": 3, "first_ids": [1, 2, 3], "columns": ["event_time", "id", "symbol", "price"]}
    # the executors wrote the Parquet files into the bucket; they hold the rows sorted by event time
    listed = s3_admin.list_objects_v2(Bucket=bucket, Prefix="out/events.parquet/")["Contents"]
    parts = sorted(o["Key"] for o in listed if o["Key"].endswith(".parquet"))
    assert parts and any(o["Key"].endswith("/_SUCCESS") for o in listed)
    ids = []
    for key in parts:
        body = s3_admin.get_object(Bucket=bucket, Key=key)["Body"].read()
        (tmp_path / "part.parquet").write_bytes(body)
        ids += pq.read_table(tmp_path / "part.parquet")["id"].to_pylist()
    assert sorted(ids) == [1, 2, 3]
    assert not list((tmp_path / "scratch").rglob("*.parquet"))  # nothing came through the coordinator's disk


MANIFEST = """\
kind: DatasetSnapshot
version: 1
content:
  name: events
  kind: Root
  metadata:
  - kind: AddPushSource
    sourceName: default
    read:
      kind: Csv
      header: true
      schema:
      - event_time TIMESTAMP
      - id BIGINT
      - symbol STRING
      - price DOUBLE
    merge:
      kind: Append
"""


@dataclass(frozen=True)
class Attempt:
    """One `odf ingest` through the cluster into a local repository, and what it left."""

    data: Path  # the pushed file
    work_dir: Path  # the repository's scratch space, where the engine writes its output
    returncode: int
    message: list[str]  # the command's error, from its last line naming the dataset
    head_moved: bool
    data_files: list[Path]


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


def ingest_through_cluster(cluster: StandaloneCluster, folder: Path, data: Path) -> Attempt:
    repo = folder / "repo"
    (folder / "events.yaml").write_text(MANIFEST)
    assert odf("init", "--repo", str(repo), cwd=folder).returncode == 0
    added = odf("add", str(folder / "events.yaml"), "--repo", str(repo), cwd=folder)
    assert added.returncode == 0, added.stderr
    before = Repository.open(repo).dataset("events").head()
    engine = ["--engine", "spark-submit", "--master", cluster.master_url]
    done = odf("ingest", "events", str(data), "--repo", str(repo), *engine, cwd=folder)
    lines = done.stderr.splitlines()
    last = max((i for i, line in enumerate(lines) if line.startswith("events: ")), default=len(lines))
    return Attempt(
        data=data,
        work_dir=Repository.open(repo).work_dir,
        returncode=done.returncode,
        message=lines[last:],
        head_moved=Repository.open(repo).dataset("events").head() != before,
        data_files=sorted((repo / "datasets").glob("*/data/*")),
    )


@pytest.fixture(scope="module")
def attempts(cluster: StandaloneCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Attempt]:
    """Today's engine on a local `file://` repository through the cluster, twice: the input file only on
    the coordinator's disk, and the input where the executors see it (the output still goes to the
    coordinator's scratch dir, the repository's work dir)."""
    hidden_input = tmp_path_factory.mktemp("input-on-coordinator")
    (hidden_input / "events.csv").write_text(CSV_HEADER + "".join(CSV_ROWS))
    visible_input = cluster.shared / f"events-{uuid.uuid4().hex[:8]}.csv"
    visible_input.write_text(CSV_HEADER + "".join(CSV_ROWS))
    return {
        "input on coordinator": ingest_through_cluster(cluster, hidden_input, hidden_input / "events.csv"),
        "output on coordinator": ingest_through_cluster(
            cluster, tmp_path_factory.mktemp("output-on-coordinator"), visible_input
        ),
    }


def test_the_engine_fails_and_commits_nothing_when_the_executors_cannot_see_the_files(
    attempts: dict[str, Attempt],
) -> None:
    """Fails in bounded time (the `odf` call's timeout), exit code 2, the head where it was, no data file."""
    for attempt in attempts.values():
        assert attempt.returncode == 2
        assert not attempt.head_moved
        assert attempt.data_files == []
    # asked before any work: the executors cannot see the operation's folder in the repository's work dir
    for attempt in attempts.values():
        assert attempt.message[0].startswith("events: the executors of the Spark cluster spark://")
        assert f" cannot see this process's folder {attempt.work_dir}/operations/" in attempt.message[0]


def test_the_engine_says_in_one_line_that_the_cluster_cannot_see_the_files(
    attempts: dict[str, Attempt],
) -> None:
    for attempt in attempts.values():
        assert len(attempt.message) == 1
        assert "cannot see" in attempt.message[0]


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


def test_a_pipeline_in_s3_runs_on_the_cluster_without_data_on_the_coordinator(
    cluster: StandaloneCluster, moto_endpoint: str, s3_admin: Any, tmp_path: Path
) -> None:
    """The issue's scenario through the cluster (client mode) on an `s3://` repository with s3a: `odf add`;
    a polling ingest from an `s3://` FilesGlob (Ledger, its checkpoint in the bucket), pulled twice as
    objects arrive; a push ingest merged as Snapshots, twice; a transform; `odf verify`. Every record is
    where it should be, and the coordinator's scratch dir never holds data files."""
    bucket = f"odf-pipeline-{uuid.uuid4().hex[:12]}"
    s3_admin.create_bucket(Bucket=bucket)
    scratch = tmp_path / "scratch"  # the repository's work dir: hidden from the executors
    env = {
        **moto_environment(moto_endpoint, tmp_path),
        "ODF_WORK_DIR": str(scratch),
        "ODF_S3_SOURCE_PREFIXES": f"s3://{bucket}/landing",
    }
    repo = f"s3://{bucket}/odf"
    engine = ["--engine", "spark-submit", "--master", cluster.master_url, "--spark-s3a"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = odf(*args, "--repo", repo, cwd=tmp_path, env=env)
        assert done.returncode == 0, f"odf {' '.join(args)}:\n{driver_errors(done.stderr)}"
        return done

    def land(name: str, rows: list[str]) -> None:
        s3_admin.put_object(Bucket=bucket, Key=f"landing/{name}", Body=(CSV_HEADER + "".join(rows)).encode())

    def table(name: str) -> Any:
        done = run("tail", name, "-n", "100", "--format", "json")
        return sorted(json.loads(done.stdout), key=lambda row: row["offset"])

    manifests = []
    for name, text in PIPELINE_MANIFESTS.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text.format(bucket=bucket))
        manifests.append(str(path))
    run("init")
    run("add", *manifests)

    land("trades-1.csv", CSV_ROWS)
    run("pull", "trades", *engine)
    land("trades-2.csv", ["2024-01-01T00:00:04Z,2,SYMB,21.0\n", "2024-01-01T00:00:05Z,4,SYMD,40.0\n"])
    run("pull", "trades", *engine)
    trades = table("trades")
    # the Ledger keeps the first record of a key: id 2 again is not a new record
    assert [(row["id"], row["symbol"]) for row in trades] == [
        (1, "SYMA"),
        (2, "SYMB"),
        (3, "SYMC"),
        (4, "SYMD"),
    ]
    assert [row["offset"] for row in trades] == [0, 1, 2, 3]

    for n, rows in enumerate((["SYMA,10", "SYMB,20"], ["SYMA,15", "SYMC,5"])):
        push = tmp_path / f"positions-{n}.csv"
        push.write_text(
            "event_time,symbol,quantity\n" + "".join(f"2024-01-0{n + 1}T00:00:00Z,{r}\n" for r in rows)
        )
        run("ingest", "positions", str(push), *engine)
    positions = table("positions")
    # Snapshot: the second push corrects SYMA, retracts SYMB, appends SYMC
    changes = [(row["op"], row["symbol"], row["quantity"]) for row in positions]
    assert changes[:2] == [(0, "SYMA", 10), (0, "SYMB", 20)]
    assert sorted(changes[2:]) == [(0, "SYMC", 5), (1, "SYMB", 20), (2, "SYMA", 10), (3, "SYMA", 15)]

    run("pull", "trades.by-symbol", *engine)
    derived = table("trades.by-symbol")
    assert sorted((row["symbol"], row["doubled"]) for row in derived) == [
        ("SYMA", 20.5),
        ("SYMB", 40.0),
        ("SYMC", 61.0),
        ("SYMD", 80.0),
    ]
    verified = run("verify", "trades.by-symbol", "--full", *engine)
    assert verified.stdout.startswith("trades.by-symbol: ok ("), verified.stdout

    # the data stayed in the bucket: nothing staged is left there, and none of it is on the coordinator
    keys = [o["Key"] for o in s3_admin.list_objects_v2(Bucket=bucket, Prefix="odf/")["Contents"]]
    assert not [key for key in keys if "/cache/operations/" in key]
    left = [path for path in scratch.rglob("*") if path.is_file()]
    assert not [path for path in left if path.suffix in (".parquet", ".csv")]
    assert not [path for path in left if b"SYMD" in path.read_bytes()]

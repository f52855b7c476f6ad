"""A Spark standalone cluster whose executors cannot see the coordinator's disk (issue 26, item 5): the
isolation is real, s3a works through it, the ODF engine refuses in one line to work on a local
repository it cannot see (through spark-submit and through the warm driver), and with an `s3://`
repository and s3a the issue's whole pipeline runs (`s3_pipeline`, through the warm driver; the other
request kinds on it are in test_request_kinds.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_odf.odf.repo.repository import Repository
from airflow_odf.utils.s3a import split_secrets
from tests.cluster.pipeline import CSV_HEADER, CSV_ROWS, S3Pipeline, driver_errors, odf
from tests.cluster.standalone import StandaloneCluster, spark_submit

JOBS = Path(__file__).resolve().parent / "jobs.py"


def run_job(
    cluster: StandaloneCluster, remote: str | None, scratch: Path, job: str, *args: str, conf: dict[str, str]
) -> Any:
    """Runs one job of jobs.py through the cluster: on the warm driver at `remote`, else by
    spark-submit with `conf`; its JSON result (the job must succeed)."""
    result = scratch / f"{job}.json"
    if remote is None:
        public, secrets = split_secrets(conf)
        command = [job, *args, "--result", str(result)]
        done = spark_submit(cluster.master_url, JOBS, command, conf=public, secrets=secrets, scratch=scratch)
    else:
        scratch.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, str(JOBS), job, *args, "--result", str(result), "--remote", remote],
            capture_output=True,
            text=True,
            cwd=scratch,
            timeout=600,
            check=False,
        )
    assert done.returncode == 0 and result.exists(), (
        f"{job} failed:\n{driver_errors(done.stderr)}\n{cluster.logs()}"
    )
    return json.loads(result.read_text(encoding="utf-8"))


def test_executors_cannot_see_what_the_coordinator_writes_in_its_scratch_dir(
    cluster: StandaloneCluster, warm_engine: str, tmp_path: Path
) -> None:
    """On the warm driver (its executors are the cluster's like any application's)."""
    hidden = tmp_path / "coordinator-only.txt"
    hidden.write_text("written by the coordinator\n")
    shared = cluster.shared / f"both-{uuid.uuid4().hex[:8]}.txt"
    shared.write_text("on a disk both see\n")
    found = run_job(
        cluster,
        warm_engine,
        tmp_path / "scratch",
        "probe",
        "--hidden",
        str(hidden),
        "--shared",
        str(shared),
        conf={},
    )

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
    found = run_job(  # a spark-submit application: the bare job of the benchmark's baseline
        cluster,
        None,
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


def ingest_through_cluster(folder: Path, data: Path, engine: list[str]) -> Attempt:
    repo = folder / "repo"
    (folder / "events.yaml").write_text(MANIFEST)
    assert odf("init", "--repo", str(repo), cwd=folder).returncode == 0
    added = odf("add", str(folder / "events.yaml"), "--repo", str(repo), cwd=folder)
    assert added.returncode == 0, added.stderr
    before = Repository.open(repo).dataset("events").head()
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
def attempts(
    cluster: StandaloneCluster, warm_engine: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Attempt]:
    """The engine on a local `file://` repository through the cluster, twice: the input file only on the
    coordinator's disk (a spark-submit application), and the input where the executors see it (the
    warm driver; the output still goes to the coordinator's scratch dir, the repository's work dir)."""
    hidden_input = tmp_path_factory.mktemp("input-on-coordinator")
    (hidden_input / "events.csv").write_text(CSV_HEADER + "".join(CSV_ROWS))
    visible_input = cluster.shared / f"events-{uuid.uuid4().hex[:8]}.csv"
    visible_input.write_text(CSV_HEADER + "".join(CSV_ROWS))
    submit = ["--engine", "spark-submit", "--master", cluster.master_url]
    warm = ["--engine", "spark-connect", "--remote", warm_engine]
    return {
        "input on coordinator": ingest_through_cluster(hidden_input, hidden_input / "events.csv", submit),
        "output on coordinator": ingest_through_cluster(
            tmp_path_factory.mktemp("output-on-coordinator"), visible_input, warm
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


def test_a_pipeline_in_s3_runs_on_the_cluster_without_data_on_the_coordinator(
    s3_pipeline: S3Pipeline, s3_admin: Any
) -> None:
    """The issue's scenario through the cluster's warm driver (client mode) on an `s3://` repository with
    s3a (`pipeline.build_pipeline`): `odf add`; a polling ingest from an `s3://` FilesGlob (Ledger, its
    checkpoint in the bucket), pulled twice as objects arrive; a push ingest merged as Snapshots, twice;
    a transform; `odf verify --full`. Every record is where it should be, and the coordinator's scratch
    dir never holds data files."""
    trades = s3_pipeline.table("trades")
    # the Ledger keeps the first record of a key: id 2 again is not a new record
    assert [(row["id"], row["symbol"]) for row in trades] == [
        (1, "SYMA"),
        (2, "SYMB"),
        (3, "SYMC"),
        (4, "SYMD"),
    ]
    assert [row["offset"] for row in trades] == [0, 1, 2, 3]

    positions = s3_pipeline.table("positions")
    # Snapshot: the second push corrects SYMA, retracts SYMB, appends SYMC
    changes = [(row["op"], row["symbol"], row["quantity"]) for row in positions]
    assert changes[:2] == [(0, "SYMA", 10), (0, "SYMB", 20)]
    assert sorted(changes[2:]) == [(0, "SYMC", 5), (1, "SYMB", 20), (2, "SYMA", 10), (3, "SYMA", 15)]

    derived = s3_pipeline.table("trades.by-symbol")
    assert sorted((row["symbol"], row["doubled"]) for row in derived) == [
        ("SYMA", 20.5),
        ("SYMB", 40.0),
        ("SYMC", 61.0),
        ("SYMD", 80.0),
    ]
    verified = s3_pipeline.run("verify", "trades.by-symbol", "--full")  # the transforms replayed
    assert verified.stdout.startswith("trades.by-symbol: ok ("), verified.stdout

    # the data stayed in the bucket: nothing staged is left there, and none of it is on the coordinator
    assert s3_pipeline.staged_keys(s3_admin) == []
    assert s3_pipeline.scratch_data(b"SYMD") == []

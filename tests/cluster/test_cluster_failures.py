"""Failures on the standalone cluster (issue 26, item 6): the executor JVM killed while an ingest into an
`s3://` repository writes its output through s3a. Spark retries the lost tasks on a new executor (or the
job fails with one message); either way the head is the old one or the new one, a retry commits once,
and no record is there twice."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.storage.url import StoreCredentials, open_store
from tests.cluster.pipeline import driver_errors
from tests.cluster.standalone import VENV_BIN, StandaloneCluster
from tests.sharing.conftest import ACCESS_KEY, REGION, SECRET_KEY, moto_environment

ROWS = 300_000
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
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
      - price DOUBLE
    merge:
      kind: Ledger
      primaryKey:
      - id
"""


def _applications(cluster: StandaloneCluster) -> set[Path]:
    """The worker's application folders (one per Spark application that ran executors on it)."""
    return set((cluster.worker_dir / "work").glob("app-*"))


def _executors(cluster: StandaloneCluster, spared: set[Path]) -> list[int]:
    """The pids of this cluster's executor JVMs: `CoarseGrainedExecutorBackend` running in an app folder
    of this cluster's worker, except those of the `spared` applications (the warm driver's)."""
    found = []
    work = cluster.worker_dir / "work"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if EXECUTOR_CLASS in command and work in cwd.parents and not (spared & {cwd, *cwd.parents}):
            found.append(int(entry.name))
    return found


def _staged_output(s3_admin: Any, bucket: str) -> bool:
    """Whether the engine has begun writing its output into the operation's staging folder."""
    listed = s3_admin.list_objects_v2(Bucket=bucket, Prefix="odf/")
    return any("/cache/operations/" in o["Key"] and "/out/" in o["Key"] for o in listed.get("Contents", []))


def _odf(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(VENV_BIN / "odf"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, **env},
    )


def _finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=600)  # a hang fails the test
    return process.returncode, stderr


def _ids_in_slices(repo: Repository, s3_admin: Any, bucket: str) -> tuple[list[tuple[int, int]], list[int]]:
    """The offset intervals of the AddData slices (oldest first) and every `id` in their data objects."""
    dataset = repo.dataset("events")
    intervals, ids = [], []
    for _, block in dataset.iter_blocks():
        if isinstance(block.event, model.AddData) and block.event.new_data is not None:
            data = block.event.new_data
            intervals.append((data.offset_interval.start, data.offset_interval.end))
            key = f"{dataset.store.prefix}/data/{data.physical_hash}"
            body = s3_admin.get_object(Bucket=bucket, Key=key)["Body"].read()
            ids += pq.read_table(io.BytesIO(body), columns=["id"]).column("id").to_pylist()
    return list(reversed(intervals)), ids


def test_an_executor_killed_mid_write_leaves_old_or_new_and_a_retry_commits_once(
    cluster: StandaloneCluster, warm_engine: str, moto_endpoint: str, s3_admin: Any, tmp_path: Path
) -> None:
    """The ingest is a spark-submit application (its executors are killed, not the warm driver's); a
    retry, and the same file pushed again afterwards, go through the warm driver (a retry commits once
    whatever the engine: what it proves is the chain's, and a second application would start another
    driver and executors)."""
    bucket = f"odf-kill-{uuid.uuid4().hex[:12]}"
    s3_admin.create_bucket(Bucket=bucket)
    env = {
        **moto_environment(moto_endpoint, tmp_path),
        "ODF_WORK_DIR": str(tmp_path / "scratch"),
    }
    url = f"s3://{bucket}/odf"
    engine = ["--engine", "spark-submit", "--master", cluster.master_url, "--spark-s3a"]
    (tmp_path / "events.yaml").write_text(MANIFEST)
    data = tmp_path / "events.csv"
    with data.open("w") as out:
        out.write("event_time,id,price\n")
        out.writelines(f"2024-01-{1 + i % 28:02d}T{i % 24:02d}:00:00Z,{i},{i % 997}.5\n" for i in range(ROWS))
    for args in (["init"], ["add", str(tmp_path / "events.yaml")]):
        code, stderr = _finish(_odf(*args, "--repo", url, env=env, cwd=tmp_path))
        assert code == 0, stderr
    credentials = StoreCredentials(
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region=REGION,
        endpoint_url=moto_endpoint,
    )
    repo = Repository.in_store(open_store(url, credentials=credentials), url)
    head = repo.dataset("events").head()

    ingest = ["ingest", "events", str(data), "--repo", url, *engine]
    spared = _applications(cluster)  # the warm driver's, and those of the applications before
    running = _odf(*ingest, env=env, cwd=tmp_path)
    killed: list[int] = []
    deadline = time.monotonic() + 300
    while not killed and running.poll() is None and time.monotonic() < deadline:
        if _staged_output(s3_admin, bucket):
            for pid in _executors(cluster, spared):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.1)
    code, stderr = _finish(running)
    assert killed, f"no executor to kill while the ingest wrote (exit {code}):\n{driver_errors(stderr)}"

    after = repo.dataset("events").head()
    warm = ["--engine", "spark-connect", "--remote", warm_engine, "--spark-s3a"]
    pushed_again = ["ingest", "events", str(data), "--repo", url, *warm]
    if code != 0:  # the job failed cleanly: one message, the old head; the retry commits
        assert after == head, driver_errors(stderr)
        assert "Traceback" not in stderr
        code, stderr = _finish(_odf(*pushed_again, env=env, cwd=tmp_path))
        assert code == 0, driver_errors(stderr)
    else:
        assert after != head
    intervals, ids = _ids_in_slices(repo, s3_admin, bucket)
    assert intervals == [(0, ROWS - 1)]
    assert len(ids) == ROWS and sorted(ids) == list(range(ROWS))  # each record once
    assert verify_integrity(repo.dataset("events")) == []

    again = _finish(_odf(*pushed_again, env=env, cwd=tmp_path))  # the same file once more: nothing new
    assert again[0] == 0, driver_errors(again[1])
    assert _ids_in_slices(repo, s3_admin, bucket)[0] == [(0, ROWS - 1)]

"""Issue 26's first target: N MB of CSV in S3 ingested into an S3 repository through a Spark standalone
cluster whose executors cannot see this machine's disk, against a bare Spark job over the same data.

Set-up (not timed): moto's S3 server on 127.0.0.1, `--mb` MB of CSV (event_time, id, symbol, price;
event times shuffled) uploaded as objects of `--object-mb` MB under `s3://<bucket>/in/`, and the cluster
of the tests (tests/cluster/standalone.py: one master, one worker with `--cores` cores and `--memory`,
in its own mount namespace with a tmpfs over the temp dir). Timed, each through the cluster in client
mode (the driver here):

- baseline: the bare job (tests/cluster/jobs.py `csv-to-parquet`): read the CSV over s3a, sort by event
  time (what the ingest's semantics need), write Parquet over s3a; rows checked after;
- ODF: `odf pull` of a FilesGlob over the same objects into an `s3://` repository in the same bucket
  (Append merge: the slices are sorted by event time too, then by input order), the executors reading
  the objects and writing the slices over s3a, hashing them where they are (`time_odf_ingest`); the
  records counted in the committed slices after.

FilesGlob rather than `odf ingest`: a push ingest takes files on the coordinator's disk (it would
download the CSV), a FilesGlob over `s3://` on the repository's endpoint hands the engine `s3a://` URIs.
`--rounds` interleaves the two. Printed: both times and their ratio (target: ODF <= 1.3x), and what
passed through the coordinator during the ingest (target: <= 1% of the CSV): the bytes the ODF core's
S3 requests sent and got (counted by the moto server, which tells clients apart by user agent) plus the
largest size its work dir reached.

Needs the s3a jars (`scripts/s3a-jars`) and permission for `unshare --mount` (root, or user namespaces).
Usage: .venv/bin/python bench/bench_cluster_ingest.py [--mb 1024] [--object-mb 64] [--cores 2] [--memory 2g]
       [--rounds 1]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq
from botocore.config import Config
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the cluster and its jobs are the tests' (tests/cluster)

from airflow_odf.utils.s3a import S3aJarsMissing, s3a_conf, split_secrets  # noqa: E402
from tests.cluster.jobs import EVENT_SCHEMA  # noqa: E402
from tests.cluster.standalone import (  # noqa: E402
    VENV_BIN,
    StandaloneCluster,
    cluster_root,
    spark_submit,
    unshare_command,
)

JOBS = REPO / "tests" / "cluster" / "jobs.py"
REGION, ACCESS_KEY, SECRET_KEY = "us-east-1", "bench-access-key", "bench-secret-key"
BENCH_AGENT = "odf-bench-admin"
HEADER = b"event_time,id,symbol,price\n"
EPOCH_2024 = 1_704_067_200  # 2024-01-01T00:00:00Z


def csv_rows(first: int, count: int, total: int) -> bytes:
    """Rows `first .. first + count - 1`; event times are a permutation of the ids (a multiplier prime
    to `total`), so the data is far from event-time order and the sort has work to do."""
    stride = 7_919 if total % 7_919 else 7_907
    spread = max(1, 86_400 * 365 // total)  # seconds between neighbours: the rows span about a year
    lines = []
    for i in range(first, first + count):
        event_time = time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH_2024 + (i * stride) % total * spread)
        )
        lines.append(f"{event_time},{i},SYM{i % 500:03d},{i * 37 % 50_000 / 100:.2f}\n")
    return "".join(lines).encode()


def upload_csv(s3: Any, bucket: str, megabytes: int, object_mb: int) -> int:
    """Uploads about `megabytes` MB of CSV as objects of `object_mb` MB; returns the number of rows."""
    row_bytes = len(csv_rows(10**6, 1, 10**7))  # a typical row
    total = megabytes * 2**20 // row_bytes
    per_object = max(1, object_mb * 2**20 // row_bytes)
    for index, first in enumerate(range(0, total, per_object)):
        body = HEADER + csv_rows(first, min(per_object, total - first), total)
        s3.upload_fileobj(io.BytesIO(body), bucket, f"in/part-{index:05d}.csv")
    return total


def event_log_conf(folder: Path) -> dict[str, str]:
    """Spark's event log into `folder` (fresh): where the time of a run went, job by job."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": folder.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }


def job_times(folder: Path) -> list[tuple[float, str]]:
    """(seconds, call site) of each Spark job in the event log under `folder`, in start order."""
    started: dict[int, tuple[int, str]] = {}
    jobs = []
    for log in sorted(path for path in folder.rglob("*") if path.is_file()):
        for line in log.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerJobStart":
                site = (event.get("Properties") or {}).get("callSite.short", "?")
                started[event["Job ID"]] = (event["Submission Time"], site)
            elif event["Event"] == "SparkListenerJobEnd" and event["Job ID"] in started:
                at, site = started.pop(event["Job ID"])
                jobs.append((at, (event["Completion Time"] - at) / 1000, site))
    return [(seconds, site) for _, seconds, site in sorted(jobs)]


def print_job_times(label: str, folder: Path) -> None:
    jobs = job_times(folder)
    listed = ", ".join(f"{site} {seconds:.1f} s" for seconds, site in jobs if seconds >= 1)
    print(f"    {label} Spark jobs: {sum(s for s, _ in jobs):.1f} s in {len(jobs)} jobs ({listed})")


def time_bare_job(
    cluster: StandaloneCluster, conf: dict[str, str], bucket: str, scratch: Path
) -> tuple[float, Any]:
    """The baseline through the cluster: wall seconds of the whole `spark-submit` (JVM start included,
    as for the ingest) and what the job found."""
    public, secrets = split_secrets({**conf, **event_log_conf(scratch / "events-bare")})
    result = scratch / "bare.json"
    args = [
        "csv-to-parquet",
        "--source",
        f"s3a://{bucket}/in/",
        "--target",
        f"s3a://{bucket}/bare/events.parquet",
    ]
    started = time.perf_counter()
    done = spark_submit(
        cluster.master_url,
        JOBS,
        [*args, "--result", str(result)],
        conf=public,
        secrets=secrets,
        scratch=scratch,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0 or not result.exists():
        errors = [line for line in done.stderr.splitlines() if " INFO " not in line and "\tat " not in line]
        sys.exit("the bare job failed:\n" + "\n".join(errors[-40:]) + "\n" + cluster.logs())
    return seconds, json.loads(result.read_text(encoding="utf-8"))


MANIFEST = """\
kind: DatasetSnapshot
version: 1
content:
  name: events
  kind: Root
  metadata:
  - kind: SetPollingSource
    fetch:
      kind: FilesGlob
      path: s3://{bucket}/in/part-*.csv
      order: ByName
    read:
      kind: Csv
      header: true
      schema: [{schema}]
    merge:
      kind: Append
  - kind: SetVocab
    eventTimeColumn: event_time
"""


def client_of(agent: str) -> str:
    """Which client a request's user agent names (see CountingMoto)."""
    if BENCH_AGENT in agent:
        return "bench"
    if agent.startswith("Hadoop"):
        return "s3a"
    return "executors-python" if agent.startswith("aws-sdk-cpp") else "core"


class CountingMoto(ThreadedMotoServer):
    """moto's S3 server, counting the bytes each kind of client sent and got: this script's own client
    (set-up and checks: its user agent carries BENCH_AGENT), Spark's s3a (on the executors and on the
    driver: the AWS SDK for Java and s3a's analytics accelerator, both naming Hadoop first), the executors'
    Python hashing what they wrote (Arrow's S3 client: the AWS SDK for C++) and everything else, which is
    the ODF core in the `odf` process (boto3)."""

    def __init__(self) -> None:
        super().__init__(ip_address="127.0.0.1", port=0, verbose=False)
        self.bytes: dict[str, list[int]] = {}  # client -> [requests, bytes sent, bytes got]
        self._lock = threading.Lock()

    def count(self, client: str, requests: int, sent: int, got: int) -> None:
        with self._lock:
            totals = self.bytes.setdefault(client, [0, 0, 0])
            totals[0] += requests
            totals[1] += sent
            totals[2] += got

    def reset(self) -> None:
        with self._lock:
            self.bytes.clear()

    def _server_entry(self) -> None:
        app = DomainDispatcherApplication(create_backend_app)

        def counted(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
            agent = environ.get("HTTP_USER_AGENT", "")
            client = client_of(agent)
            body = _CountingInput(environ["wsgi.input"])
            environ["wsgi.input"] = body
            got = 0
            for chunk in app(environ, start_response):
                got += len(chunk)
                yield chunk
            self.count(client, 1, body.read_bytes, got)

        self._server = make_server(
            self._ip_address, self._port, counted, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()


class _CountingInput:
    """A request body stream that counts the bytes read from it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.read_bytes = 0

    def read(self, *args: Any) -> bytes:
        data = self._stream.read(*args)
        self.read_bytes += len(data)
        return data

    def readline(self, *args: Any) -> bytes:
        data = self._stream.readline(*args)
        self.read_bytes += len(data)
        return data

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")


class PeakSize:
    """The largest total size of the files under `folder`, sampled every 0.1 s while the body runs."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakSize:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, folder_size(self.folder))

    def _sample(self) -> None:
        while not self._done.wait(0.1):
            self.peak = max(self.peak, folder_size(self.folder))


def folder_size(folder: Path) -> int:
    """The bytes of the files under `folder`, but for the package archive Spark hands to the executors
    (`py-files/`: code, built once per version)."""
    total = 0
    for path in folder.rglob("*"):
        if "py-files" in path.relative_to(folder).parts:
            continue
        with contextlib.suppress(OSError):  # removed while listed
            if path.is_file():
                total += path.stat().st_size
    return total


@dataclass(frozen=True)
class OdfRun:
    seconds: float
    records: int  # as `odf pull` reported them
    slice_rows: int  # counted in the committed slices' Parquet footers
    core_bytes: tuple[int, int, int]  # requests, bytes sent, bytes got by the ODF core
    s3a_bytes: tuple[int, int, int]  # the same for Spark's s3a (executors and driver)
    hashing_bytes: tuple[int, int, int]  # the same for the executors' Python (Arrow's S3 client: hashing)
    scratch_peak: int  # the coordinator's work dir: largest size seen during the run
    scratch_after: int  # and its size after it


def time_odf_ingest(
    cluster: StandaloneCluster,
    moto: CountingMoto,
    endpoint: str,
    bucket: str,
    scratch: Path,
    *,
    run: int,
    executor_memory: str,
) -> OdfRun:
    """`odf pull` of a FilesGlob over `s3://<bucket>/in/part-*.csv` (Csv, the schema of jobs.py; Append;
    event time `event_time`) into the repository `s3://<bucket>/repo-<run>` through the same cluster in
    client mode, with s3a (`--spark-s3a`), all the objects in one block (`--files-per-batch`). The
    objects are handed to the engine as `s3a://` URIs, so the executors read them where they are, as the
    bare job does. Timed: the pull alone (`odf init` and `odf add` are set-up), JVM start included."""
    work = scratch / f"odf-work-{run}"
    conf_dir = scratch / "spark-conf"  # the executors' memory, as the bare job's --conf gives it
    conf_dir.mkdir(exist_ok=True)
    defaults = {"spark.executor.memory": executor_memory, **event_log_conf(scratch / f"events-odf-{run}")}
    (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in defaults.items()))
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_CONFIG_FILE": str(scratch / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(scratch / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "ODF_WORK_DIR": str(work),
        "ODF_S3_SOURCE_PREFIXES": f"s3://{bucket}/in",
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    repo = f"s3://{bucket}/repo-{run}"
    manifest = scratch / "events.yaml"
    schema = ", ".join(f'"{column.strip()}"' for column in EVENT_SCHEMA.split(","))
    manifest.write_text(MANIFEST.format(bucket=bucket, schema=schema), encoding="utf-8")

    def odf(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(VENV_BIN / "odf"), *args, "--repo", repo],
            capture_output=True,
            text=True,
            env=env,
            cwd=scratch,
            timeout=3600,
            check=False,
        )
        if done.returncode != 0:
            errors = [
                line for line in done.stderr.splitlines() if " INFO " not in line and "\tat " not in line
            ]
            sys.exit(f"odf {args[0]} failed:\n" + "\n".join(errors[-40:]) + "\n" + cluster.logs())
        return done

    odf("init")
    odf("add", str(manifest))
    objects = s3_keys(moto_client(endpoint), bucket, "in/")
    engine = ["--engine", "spark-submit", "--master", cluster.master_url, "--spark-s3a"]
    moto.reset()
    with PeakSize(work) as scratch_size:
        started = time.perf_counter()
        done = odf("pull", "events", *engine, "--files-per-batch", str(len(objects)), "--format", "json")
        seconds = time.perf_counter() - started
    counted = dict(moto.bytes)
    slice_rows = rows_in_slices(endpoint, bucket, f"repo-{run}/datasets/")
    return OdfRun(
        seconds=seconds,
        records=json.loads(done.stdout)["records"],
        slice_rows=slice_rows,
        core_bytes=tuple(counted.get("core", (0, 0, 0))),
        s3a_bytes=tuple(counted.get("s3a", (0, 0, 0))),
        hashing_bytes=tuple(counted.get("executors-python", (0, 0, 0))),
        scratch_peak=scratch_size.peak,
        scratch_after=folder_size(work),
    )


def moto_client(endpoint: str) -> Any:
    """This script's own S3 client, told apart from the core's by its user agent."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(user_agent_extra=BENCH_AGENT),
    )


def s3_keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def rows_in_slices(endpoint: str, bucket: str, prefix: str) -> int:
    """The rows of the committed data slices (`<repo>/datasets/<id>/data/*`), from their footers."""
    s3 = moto_client(endpoint)
    rows = 0
    for key in s3_keys(s3, bucket, prefix):
        if "/data/" not in key:
            continue
        size = s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
        tail = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={max(0, size - 2**20)}-")["Body"].read()
        footer_length = int.from_bytes(tail[-8:-4], "little")
        rows += pq.read_metadata(io.BytesIO(b"PAR1" + tail[-footer_length - 8 :])).num_rows
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="MB of CSV (default 1024)")
    parser.add_argument("--object-mb", type=int, default=64, help="MB per CSV object (default 64)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--memory", default="2g", help="the worker's memory, all given to its executor")
    parser.add_argument("--rounds", type=int, default=1, help="bare job and ODF ingest, interleaved")
    args = parser.parse_args()

    unshare, why_not = unshare_command()
    if unshare is None:
        sys.exit(f"the cluster's worker needs its own mount namespace: {why_not}")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per S3 request otherwise
    moto = CountingMoto()
    moto.start()
    scratch = Path(tempfile.mkdtemp(prefix="odf-bench-cluster-"))
    hidden = [Path(tempfile.gettempdir()), scratch]
    cluster = StandaloneCluster(cluster_root(), hidden, unshare, cores=args.cores, memory=args.memory)
    try:
        host, port = moto.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        s3 = moto_client(endpoint)
        bucket = f"odf-bench-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=bucket)
        started = time.perf_counter()
        rows = upload_csv(s3, bucket, args.mb, args.object_mb)
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="in/")
        csv_bytes = sum(o["Size"] for page in pages for o in page.get("Contents", []))
        print(
            f"set-up: {args.mb} MB of CSV ({csv_bytes:,} bytes), {rows:,} rows, "
            f"in {time.perf_counter() - started:.1f} s"
        )
        try:
            conf = s3a_conf(
                endpoint=endpoint,
                region=REGION,
                path_style=True,
                access_key=ACCESS_KEY,
                secret_key=SECRET_KEY,
            )
        except S3aJarsMissing as missing:
            sys.exit(str(missing))
        conf["spark.executor.memory"] = args.memory
        started = time.perf_counter()
        cluster.start()
        print(f"cluster: {cluster.master_url}, worker up in {time.perf_counter() - started:.1f} s")

        ratios = []
        for run in range(args.rounds):
            bare_seconds, found = time_bare_job(cluster, conf, bucket, scratch)
            if found["rows"] != rows:
                sys.exit(f"the bare job wrote {found['rows']:,} rows, expected {rows:,}")
            print(
                f"[{run}] bare Spark job (s3a CSV -> sort by event time -> s3a Parquet): "
                f"{bare_seconds:.1f} s wall ({args.mb / bare_seconds:.2f} MB/s; read, sort and write "
                f"{found['write_seconds']:.1f} s of it, the rest JVM and executor start and the read-back "
                f"check), {found['rows']:,} rows"
            )
            print_job_times("bare", scratch / "events-bare")
            odf = time_odf_ingest(
                cluster, moto, endpoint, bucket, scratch, run=run, executor_memory=args.memory
            )
            if odf.records != rows or odf.slice_rows != rows:
                sys.exit(
                    f"the ODF ingest reported {odf.records:,} records and committed {odf.slice_rows:,} rows "
                    f"in its slices, expected {rows:,}"
                )
            ratios.append(odf.seconds / bare_seconds)
            requests, sent, got = odf.core_bytes
            through = sent + got + odf.scratch_peak
            print(
                f"[{run}] ODF ingest into s3:// (FilesGlob over s3://, Append, sorted by event time): "
                f"{odf.seconds:.1f} s wall, {ratios[-1]:.2f}x the bare job (target <= 1.3x), "
                f"{odf.records:,} records checked in the slices"
            )
            print_job_times("ODF", scratch / f"events-odf-{run}")
            print(
                f"[{run}] through the coordinator: the core's {requests:,} S3 requests sent {sent:,} and got "
                f"{got:,} bytes; its work dir held at most {odf.scratch_peak:,} bytes ({odf.scratch_after:,} "
                f"after): {through:,} bytes, {100 * through / csv_bytes:.3f}% of the CSV (target <= 1%); "
                f"Spark's s3a (executors and driver): {odf.s3a_bytes[0]:,} requests, sent "
                f"{odf.s3a_bytes[1]:,}, got {odf.s3a_bytes[2]:,} bytes; the executors' Python (uploading "
                f"and hashing the slices in one pass, or reading them back to hash them): "
                f"{odf.hashing_bytes[0]:,} requests, sent {odf.hashing_bytes[1]:,}, got "
                f"{odf.hashing_bytes[2]:,} bytes"
            )
        print(f"ODF / bare: {', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})")
    finally:
        cluster.stop()
        moto.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Issue 26's first target: N MB of CSV in S3 ingested into an S3 repository through a Spark standalone
cluster whose executors cannot see this machine's disk, against a bare Spark job over the same data.

Set-up (not timed): moto's S3 server on 127.0.0.1, `--mb` MB of CSV (event_time, id, symbol, price;
event times shuffled) uploaded as objects of `--object-mb` MB under `s3://<bucket>/in/`, and the cluster
of the tests (tests/cluster/standalone.py: one master, one worker with `--cores` cores and `--memory`,
in its own mount namespace with a tmpfs over the temp dir). Timed, each through the cluster in client
mode (the driver here):

- baseline: the bare job (tests/cluster/jobs.py `csv-to-parquet`): read the CSV over s3a, sort by event
  time (what the ingest's semantics need), write Parquet over s3a; rows checked after;
- ODF: the same data ingested into an `s3://` repository (`time_odf_ingest`, TODO(in-place): filled in
  when the engine writes the repository in place).

Needs the s3a jars (`scripts/s3a-jars`) and permission for `unshare --mount` (root, or user namespaces).
Usage: .venv/bin/python bench/bench_cluster_ingest.py [--mb 1024] [--object-mb 64] [--cores 2] [--memory 2g]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import boto3

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the cluster and its jobs are the tests' (tests/cluster)

from airflow_odf.utils.s3a import S3aJarsMissing, s3a_conf, split_secrets  # noqa: E402
from tests.cluster.standalone import StandaloneCluster, cluster_root, spark_submit, unshare_command  # noqa: E402

JOBS = REPO / "tests" / "cluster" / "jobs.py"
REGION, ACCESS_KEY, SECRET_KEY = "us-east-1", "bench-access-key", "bench-secret-key"
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


def time_bare_job(
    cluster: StandaloneCluster, conf: dict[str, str], bucket: str, scratch: Path
) -> tuple[float, Any]:
    """The baseline through the cluster: wall seconds of the whole `spark-submit` (JVM start included,
    as for the ingest) and what the job found."""
    public, secrets = split_secrets(conf)
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


def time_odf_ingest(
    cluster: StandaloneCluster, conf: dict[str, str], bucket: str, scratch: Path
) -> float | None:
    """TODO(in-place): the ODF ingest of `s3://<bucket>/in/*.csv` into the repository `s3://<bucket>/repo`
    through the same cluster, timed like the baseline; None until the engine writes in place.

    To fill in: `odf init` and `odf add` of a root dataset whose SetPollingSource is a FilesGlob over
    `s3://<bucket>/in/part-*.csv` (read: Csv with the schema of jobs.EVENT_SCHEMA, header; merge: Append;
    event time `event_time`), then one timed `odf pull` with `--engine spark-submit --master
    <cluster.master_url>` and the repository's s3a settings (`conf`, credentials from the environment,
    `spark_s3a`), then check the records in the new slices equal the rows uploaded and measure the bytes
    that passed through `scratch` (the target: <= 1% of the data)."""
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="MB of CSV (default 1024)")
    parser.add_argument("--object-mb", type=int, default=64, help="MB per CSV object (default 64)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--memory", default="2g", help="the worker's memory, all given to its executor")
    args = parser.parse_args()

    unshare, why_not = unshare_command()
    if unshare is None:
        sys.exit(f"the cluster's worker needs its own mount namespace: {why_not}")
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per S3 request otherwise
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    scratch = Path(tempfile.mkdtemp(prefix="odf-bench-cluster-"))
    hidden = [Path(tempfile.gettempdir()), scratch]
    cluster = StandaloneCluster(cluster_root(), hidden, unshare, cores=args.cores, memory=args.memory)
    try:
        host, port = moto.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )
        bucket = f"odf-bench-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=bucket)
        started = time.perf_counter()
        rows = upload_csv(s3, bucket, args.mb, args.object_mb)
        print(f"set-up: {args.mb} MB of CSV, {rows:,} rows, in {time.perf_counter() - started:.1f} s")
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

        bare_seconds, found = time_bare_job(cluster, conf, bucket, scratch)
        if found["rows"] != rows:
            sys.exit(f"the bare job wrote {found['rows']:,} rows, expected {rows:,}")
        print(
            f"bare Spark job (s3a CSV -> sort by event time -> s3a Parquet): {bare_seconds:.1f} s wall "
            f"({args.mb / bare_seconds:.2f} MB/s; read, sort and write {found['write_seconds']:.1f} s of it, "
            f"the rest JVM and executor start and the read-back check), {found['rows']:,} rows checked"
        )
        odf_seconds = time_odf_ingest(cluster, conf, bucket, scratch)
        if odf_seconds is None:
            print("ODF ingest into s3://: not measured yet (TODO(in-place))")
        else:
            print(
                f"ODF ingest into s3://: {odf_seconds:.1f} s, {odf_seconds / bare_seconds:.2f}x the bare job "
                "(target <= 1.3x)"
            )
    finally:
        cluster.stop()
        moto.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

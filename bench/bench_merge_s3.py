"""Stateful merge into an S3 repository the engine cannot read itself (no `s3a`): what the 20th ingest
downloads from S3 and how long it takes, this checkout against a baseline checkout in the same run.

A root dataset with a Ledger merge (primary key `id`) in an S3 repository (moto's server on 127.0.0.1)
gets `--slices` ingests of `--rows` rows each (a tenth of them keys seen in the ingest before, which the
Ledger drops). The engine is the in-process local one on `local[2]`, so every object it reads is staged
from S3 into the operation folder. Measured on the last ingest: bytes and GET requests (the S3 store's
`get` and `get_file`, counted in the measuring process) by kind of object, and the wall time of
`push_ingest`.

Each checkout is measured in its own process with that checkout first on `sys.path` (and a JVM of its
own); with `--repeat N` the two alternate N times and the medians are compared.

Usage: .venv/bin/python bench/bench_merge_s3.py [--baseline /tmp/hot-before] [--code DIR]
       [--slices 20] [--rows 50000] [--repeat 1]
The baseline is a worktree of the code before the change: `git worktree add /tmp/hot-before 5088abe`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from machine_info import cpu_model

HERE = Path(__file__).resolve().parent
REGION, ACCESS_KEY, SECRET_KEY = "us-east-1", "bench-access-key", "bench-secret-key"
NAME = "com.acme.orders"
RESULT = "RESULT "


# ----- the measuring process ----------------------------------------------------------------------


def write_slice(path: Path, index: int, rows: int) -> None:
    """Rows `index * rows ...` plus the last tenth of the previous ingest's keys again (Ledger drops
    them), event times one second apart from a day per ingest."""
    first = index * rows - rows // 10 if index else 0
    lines = [
        f"2024-01-{index + 1:02d}T{(i % 86400) // 3600:02d}:{(i % 3600) // 60:02d}:{i % 60:02d}Z,{i},"
        f"SYM{i % 500:03d},{(i * 37) % 50000 / 100:.2f}\n"
        for i in range(first, (index + 1) * rows)
    ]
    path.write_text("event_time,id,symbol,price\n" + "".join(lines))


def count_downloads() -> Counter[str]:
    """Wraps the S3 store's reads; the counter holds bytes and requests per kind of key."""
    from airflow_odf.odf.storage.s3 import S3ObjectStore

    counter: Counter[str] = Counter()
    get, get_file = S3ObjectStore.get, S3ObjectStore.get_file

    def kind(key: str) -> str:
        return key.split("/", 1)[0] if "/" in key else key

    def counted_get(self: S3ObjectStore, key: str) -> bytes:
        data = get(self, key)
        counter[f"bytes {kind(key)}"] += len(data)
        counter[f"gets {kind(key)}"] += 1
        return data

    def counted_get_file(self: S3ObjectStore, key: str, target: Path) -> None:
        get_file(self, key, target)
        counter[f"bytes {kind(key)}"] += Path(target).stat().st_size
        counter[f"gets {kind(key)}"] += 1

    S3ObjectStore.get = counted_get  # type: ignore[method-assign]
    S3ObjectStore.get_file = counted_get_file  # type: ignore[method-assign]
    return counter


def measure(code: Path, endpoint: str, bucket: str, slices: int, rows: int) -> dict[str, Any]:
    sys.path.insert(0, str(code))
    import airflow_odf

    assert Path(airflow_odf.__file__).resolve().is_relative_to(code), airflow_odf.__file__
    from airflow_odf.engine.local_runner import LocalSparkRunner
    from airflow_odf.odf.format import model
    from airflow_odf.odf.format.timestamps import Timestamp
    from airflow_odf.odf.ingest.options import IngestOptions
    from airflow_odf.odf.ingest.push import push_ingest
    from airflow_odf.odf.repo.repository import Repository

    counter = count_downloads()
    runner = LocalSparkRunner("local[2]", {"spark.sql.shuffle.partitions": "4"})
    repo = Repository.init(f"s3+{endpoint}/{bucket}/odf")
    read = model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "id BIGINT", "symbol STRING", "price DOUBLE"]
    )
    merge = model.MergeStrategyLedger(primary_key=["id"])
    source = model.AddPushSource(source_name="default", read=read, merge=merge)
    repo.add(model.DatasetSnapshot(name=NAME, kind=model.DatasetKind.ROOT, metadata=[source]))
    dataset = repo.dataset(NAME)
    times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="odf-bench-merge-s3-") as tmp:
        work = Path(tmp)
        options = IngestOptions(work_dir=work / "work", log=lambda _line: None)
        for index in range(slices):
            path = work / f"slice-{index}.csv"
            write_slice(path, index, rows)
            counter.clear()
            t0 = time.perf_counter()
            result = push_ingest(
                dataset,
                NAME,
                runner,
                [path],
                options,
                system_time=Timestamp.parse(f"2024-02-{index + 1:02d}T00:00:00Z"),
            )
            times.append(time.perf_counter() - t0)
            assert result.records == rows, result  # the repeated keys were dropped: the merge state held
    state = dataset.state()
    commit = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "code": str(code),
        "commit": commit,
        "last_wall_s": times[-1],
        "wall_s": times,
        "downloads": dict(counter),
        "stored_data_bytes": state.data_size,
        "records": state.num_records,
    }


# ----- the comparing process ----------------------------------------------------------------------


def machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{platform.platform()}, {cpu_model()}, nproc {os.cpu_count()}, {memory:.1f} GiB, "
        f"Python {platform.python_version()}"
    )


def run_one(code: Path, endpoint: str, admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    admin.create_bucket(Bucket=bucket)
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "PYTHONPATH": str(code),
    }
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        env.pop(name, None)
    cmd = [
        sys.executable,
        __file__,
        "--measure",
        "--code",
        str(code),
        "--endpoint",
        endpoint,
        "--bucket",
        bucket,
    ]
    cmd += ["--slices", str(args.slices), "--rows", str(args.rows)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=code, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        sys.exit(
            f"measuring {code} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return json.loads(lines[-1][len(RESULT) :])


def describe(result: dict[str, Any]) -> str:
    downloads = result["downloads"]
    kinds = sorted({key.split(" ", 1)[1] for key in downloads})
    parts = [f"{k} {downloads.get(f'bytes {k}', 0):,} B / {downloads.get(f'gets {k}', 0)} GET" for k in kinds]
    return ", ".join(parts)


def compare(args: argparse.Namespace) -> None:
    import boto3
    from moto.server import ThreadedMotoServer

    print(f"machine: {machine()}; date {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"{args.slices} Ledger ingests of {args.rows:,} rows, S3 repository (moto on 127.0.0.1), local[2]")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        admin = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )
        runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "this": []}
        for attempt in range(args.repeat):
            for label, code in (("baseline", args.baseline), ("this", args.code)):
                result = run_one(code.resolve(), endpoint, admin, args)
                runs[label].append(result)
                total = sum(v for k, v in result["downloads"].items() if k.startswith("bytes "))
                print(
                    f"[{attempt + 1}/{args.repeat}] {label} {result['commit']} ({result['code']}): "
                    f"ingest {args.slices}: {total:,} B downloaded, {result['last_wall_s']:.2f} s "
                    f"({describe(result)}); data stored {result['stored_data_bytes']:,} B; "
                    f"every ingest: {' '.join(f'{t:.2f}' for t in result['wall_s'])} s"
                )
    finally:
        server.stop()

    def median_bytes(label: str) -> float:
        return statistics.median(
            sum(v for k, v in r["downloads"].items() if k.startswith("bytes ")) for r in runs[label]
        )

    def median_wall(label: str) -> float:
        return statistics.median(r["last_wall_s"] for r in runs[label])

    before_b, after_b, before_t, after_t = (
        median_bytes("baseline"),
        median_bytes("this"),
        median_wall("baseline"),
        median_wall("this"),
    )
    print(
        f"ingest {args.slices}, median of {args.repeat}: downloaded {before_b:,.0f} B -> {after_b:,.0f} B "
        f"(ratio {before_b / after_b:.1f}x less), wall {before_t:.2f} s -> {after_t:.2f} s "
        f"(ratio after/before {after_t / before_t:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--baseline", type=Path, default=Path("/tmp/hot-before"), help="checkout of the code before"
    )
    parser.add_argument(
        "--code", type=Path, default=HERE.parent, help="checkout measured against the baseline"
    )
    parser.add_argument("--slices", type=int, default=20)
    parser.add_argument("--rows", type=int, default=50_000, help="rows per ingest")
    parser.add_argument("--repeat", type=int, default=1, help="baseline/this pairs, alternating")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--bucket", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        result = measure(args.code.resolve(), args.endpoint, args.bucket, args.slices, args.rows)
        print(RESULT + json.dumps(result), flush=True)
        return
    for code in (args.baseline, args.code):
        if not (code / "airflow_odf" / "__init__.py").is_file():
            sys.exit(f"{code} is not a checkout of airflow_odf (git worktree add /tmp/hot-before 5088abe)")
    compare(args)


if __name__ == "__main__":
    main()

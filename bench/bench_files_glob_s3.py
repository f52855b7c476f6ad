"""FilesGlob over S3: the listing cost of a poll after the first, against the first, in the same run.

100,000 small objects under one prefix of a moto S3 server (in this process, on 127.0.0.1; filled
straight into its backend, which is fast). Then, each with a fresh fetcher as a new pull run has:

1. the first poll: nothing ingested yet, all 100,000 objects are new and listed (one fetch of a batch
   of all of them; the engine is taken to read the bucket itself, so nothing is downloaded);
2. a handful of new objects are added; the next poll resumes from the source state the first one
   recorded: ListObjectsV2 with `StartAfter` = the last ingested key returns only the new ones;
3. for contrast, the same poll re-listing the whole prefix (what the reference does on every
   iteration; here what a pattern with a wildcard in a directory, or ByEventTime, costs).

Printed: wall time and keys S3 returned for each, and the ratio 2 / 1 (target <= 5%). moto answers a
ListObjectsV2 in time proportional to the whole bucket, even with `StartAfter` (S3 itself does not), so
the time ratio here is an upper bound; the keys returned are the cost that S3 bills and transfers.

Usage: .venv/bin/python bench/bench_files_glob_s3.py [--objects 100000] [--new 5] [--repeat 1]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from machine_info import cpu_model

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

BUCKET = "bench-landing"


def fill(keys: list[str]) -> None:
    """Objects straight into the in-process moto server's backend (an S3 PUT each would take minutes)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    for key in keys:
        backend.put_object(BUCKET, key, b"id,value\n1,2\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--new", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench-access-key",
        AWS_SECRET_ACCESS_KEY="bench-secret-key",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
    )
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        os.environ["AWS_ENDPOINT_URL"] = endpoint = f"http://{host}:{port}"
        run(endpoint, args.objects, args.new, args.repeat)
    finally:
        server.stop()


def run(endpoint: str, objects: int, new: int, repeat: int) -> None:
    import boto3

    from airflow_odf.odf.format import model
    from airflow_odf.odf.format.timestamps import Timestamp
    from airflow_odf.odf.ingest.fetch import s3_glob
    from airflow_odf.odf.ingest.fetch.fetcher import FetchOptions, SourceFetcher
    from airflow_odf.odf.ingest.fetch.types import EngineS3
    from airflow_odf.odf.ingest.trust import SourceTrust

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
    started = time.perf_counter()
    fill([f"in/obj-{i:07d}.csv" for i in range(objects)])
    print(f"set-up: {objects} objects in moto in {time.perf_counter() - started:.1f} s", file=sys.stderr)

    returned = [0]

    def count(parsed: dict[str, Any], **_: Any) -> None:
        returned[0] += len(parsed.get("Contents", []))

    original = s3_glob.make_s3_client

    def counting(settings: Any) -> Any:
        client = original(settings)
        client.meta.events.unregister("after-call.s3.ListObjectsV2", unique_id="bench-count")
        client.meta.events.register("after-call.s3.ListObjectsV2", count, unique_id="bench-count")
        return client

    s3_glob.make_s3_client = counting
    now = Timestamp.now()
    with TemporaryDirectory() as cache:
        options = FetchOptions(
            cache_dir=Path(cache),
            files_per_batch=objects + new,
            engine_s3=EngineS3("s3a", endpoint),  # the engine reads the bucket: nothing is downloaded
            trust=SourceTrust(s3_source_prefixes=(f"s3://{BUCKET}",)),
            log=lambda line: None,
        )
        by_name = model.FetchStepFilesGlob(path=f"s3://{BUCKET}/in/obj-*.csv")
        # a wildcard in a directory: names are not in key order there, so the prefix is listed in full
        relisting = model.FetchStepFilesGlob(path=f"s3://{BUCKET}/i*/obj-*.csv")

        def poll(step: Any, state: Any) -> tuple[float, int, Any]:
            returned[0] = 0
            started = time.perf_counter()
            result = SourceFetcher(step, options).fetch(state, now)
            return time.perf_counter() - started, returned[0], result

        firsts, seconds, relists = [], [], []
        total = objects
        for _ in range(repeat):
            first_time, first_keys, first = poll(by_name, None)
            assert len(first.files) == total and first_keys == total
            fill([f"in/obj-{i:07d}.csv" for i in range(total, total + new)])
            total += new
            second_time, second_keys, second = poll(by_name, first.new_source_state)
            assert len(second.files) == new and second_keys == new
            relist_time, relist_keys, _ = poll(relisting, first.new_source_state)
            assert relist_keys == total
            firsts.append((first_time, first_keys))
            seconds.append((second_time, second_keys))
            relists.append((relist_time, relist_keys))

    first_s = statistics.median(t for t, _ in firsts)
    second_s = statistics.median(t for t, _ in seconds)
    relist_s = statistics.median(t for t, _ in relists)
    print(
        f"FilesGlob over s3:// — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {cpu_model()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, moto server in process, "
        f"median of {repeat}"
    )
    rows = [
        (f"first poll, {objects} new objects", first_s, firsts[0][1]),
        (f"next poll, {new} new (StartAfter)", second_s, seconds[0][1]),
        ("same poll re-listing the prefix", relist_s, relists[-1][1]),
    ]
    for label, seconds_taken, keys in rows:
        print(f"  {label:<36} {seconds_taken * 1000:10.1f} ms, {keys:>7} keys returned by S3")
    print(f"  ratio next / first: {second_s / first_s:.2%} (target <= 5%)")


if __name__ == "__main__":
    main()

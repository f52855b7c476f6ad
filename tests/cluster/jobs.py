"""Bare PySpark jobs for the standalone cluster, run by `spark-submit` (client mode: this driver runs on
the coordinator, the tasks on the worker's executors) or, with `--remote sc://...`, by a plain Python
process on the tests' warm driver (a Spark Connect server on the cluster: no JVM to start). Each writes
what it found as JSON to `--result`, a path of the coordinator's.

    probe --hidden FILE --shared FILE        what an executor sees of a file each side wrote
    csv-to-parquet --source URI --target URI the benchmark's baseline: CSV read, sorted by event time,
                                             written as Parquet, read back
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

EVENT_SCHEMA = "event_time TIMESTAMP, id BIGINT, symbol STRING, price DOUBLE"


SEEN_SCHEMA = "path string, exists boolean, text string, mount_namespace string"
_SEEN_ARROW = pa.schema(
    [("path", pa.string()), ("exists", pa.bool_()), ("text", pa.string()), ("mount_namespace", pa.string())]
)


def seen_by_executor(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs on an executor: does each file exist there, and what does it hold."""
    for batch in batches:
        seen = []
        for path in batch.column("path").to_pylist():
            found = os.path.exists(path)
            seen.append(
                {
                    "path": path,
                    "exists": found,
                    "text": Path(path).read_text(encoding="utf-8") if found else None,
                    "mount_namespace": os.readlink("/proc/self/ns/mnt"),
                }
            )
        yield pa.RecordBatch.from_pylist(seen, schema=_SEEN_ARROW)


def probe(spark: SparkSession, hidden: str, shared: str) -> dict[str, Any]:
    """Looks at both files from an executor, then lets Spark read each (the driver lists the file, the
    executor opens it). The driver's mount namespace is this process's: the coordinator's."""
    paths = spark.createDataFrame([(hidden,), (shared,)], "path string").repartition(2)
    seen = [row.asDict() for row in paths.mapInArrow(seen_by_executor, SEEN_SCHEMA).collect()]
    reads: dict[str, Any] = {}
    for name, path in (("hidden", hidden), ("shared", shared)):
        try:
            reads[name] = {"lines": [row.value for row in spark.read.text(f"file://{path}").collect()]}
        except Exception as error:  # the executor's failure, as the driver reports it
            reads[name] = {"error": str(error)}
    return {"executors": seen, "reads": reads, "driver_mount_namespace": os.readlink("/proc/self/ns/mnt")}


def csv_to_parquet(spark: SparkSession, source: str, target: str) -> dict[str, Any]:
    """The bare job the ODF ingest is measured against: the same read, event-time sort and Parquet write."""
    started = time.perf_counter()
    frame = spark.read.csv(source, header=True, schema=EVENT_SCHEMA)
    frame.sort("event_time").write.mode("overwrite").parquet(target)
    written = time.perf_counter() - started
    back = spark.read.parquet(target)
    first = back.orderBy("event_time", "id").limit(3).collect()
    return {
        "rows": back.count(),
        "first_ids": [row.id for row in first],
        "columns": back.columns,
        "write_seconds": written,  # read, sort and write, without the check after
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("job", choices=["probe", "csv-to-parquet"])
    parser.add_argument("--hidden")
    parser.add_argument("--shared")
    parser.add_argument("--source")
    parser.add_argument("--target")
    parser.add_argument("--result", required=True)
    parser.add_argument("--remote", help="a Spark Connect server's sc:// URL (else: spark-submit's driver)")
    args = parser.parse_args()
    if args.remote:
        spark = SparkSession.builder.remote(args.remote).getOrCreate()
    else:
        spark = SparkSession.builder.appName(f"odf-cluster-{args.job}").getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
    try:
        if args.job == "probe":
            result = probe(spark, args.hidden, args.shared)
        else:
            result = csv_to_parquet(spark, args.source, args.target)
        Path(args.result).write_text(json.dumps(result), encoding="utf-8")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()

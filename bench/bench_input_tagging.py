"""The read of several CSV files in one scan (a FilesGlob batch, a push of many files), with each row
tagged by its input (`engine/ingest_job.read_inputs`: the input's index for the input order, its source
event time), against a bare read of the same files with the same schema. Both are consumed by Spark's
`noop` writer, so only the reads are timed (the ingest's: PERMISSIVE with the corrupt-record column,
its deferred check, the tags), in the same session, interleaved per round.

Issue 37: the tag was a regex and a URL decode of each row's `_metadata.file_path`, then two lookups;
it is now one lookup of the path as Spark spells it (`readers.file_index`).

Usage: .venv/bin/python bench/bench_input_tagging.py [--rows 5000000] [--files 16] [--rounds 4]
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_odf.engine.ingest_job import read_inputs
from airflow_odf.engine.session import get_session
from airflow_odf.odf.engine_client.fast_start import fast_start_conf
from airflow_odf.odf.format import model
from airflow_odf.odf.operation import read_schema_text
from airflow_odf.utils.engine_json import Vocab

DDL = ["event_time TIMESTAMP", "id BIGINT", "symbol STRING", "price DOUBLE", "qty INT"]
BASE = datetime(2024, 1, 1, tzinfo=timezone.utc)


def write_files(folder: Path, rows: int, files: int) -> list[str]:
    """`rows` trades in event-time order over `files` CSV files (sources of one batch)."""
    rnd = random.Random(42)
    symbols = [f"SYM{i:03d}" for i in range(500)]
    per_file, paths = rows // files, []
    for f in range(files):
        path = folder / f"trades-{f:03d}.csv"
        lines = ["event_time,id,symbol,price,qty\n"]
        for i in range(f * per_file, (f + 1) * per_file):
            t = BASE + timedelta(seconds=i // 3)
            lines.append(f"{t:%Y-%m-%dT%H:%M:%S}Z,{i},{rnd.choice(symbols)},{rnd.uniform(1, 500):.2f},1\n")
        path.write_text("".join(lines))
        paths.append(str(path))
    return paths


def tagged(spark: SparkSession, paths: list[str]) -> DataFrame:
    request = {
        "inputs": [
            {"path": p, "source_event_time": f"2024-01-{1 + i % 28:02d}T00:00:00Z"}
            for i, p in enumerate(paths)
        ],
        "read": {"kind": "Csv", "header": True},
        "read_schema": read_schema_text(model.ReadStepCsv(header=True, ddl_schema=DDL), "bench"),
        "merge": {"kind": "Append"},
        "out_dir": tempfile.gettempdir(),
    }
    df, _ = read_inputs(spark, request, Vocab())
    assert df is not None
    return df


def bare(spark: SparkSession, paths: list[str]) -> DataFrame:
    return spark.read.option("header", True).schema(", ".join(DDL)).csv(paths)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    conf = fast_start_conf({"spark.sql.shuffle.partitions": "4"}, "local[*]", None)
    spark = get_session("local[*]", conf)
    with tempfile.TemporaryDirectory(prefix="odf-bench-tagging-") as work:
        paths = write_files(Path(work), args.rows, args.files)
        print(f"{platform.node()}: {args.rows:,} rows in {args.files} CSV files, {args.rounds} rounds")
        rows = args.rows // args.files * args.files
        counted = [frame(spark, paths).agg(F.count("id")).first()[0] for frame in (tagged, bare)]
        assert counted == [rows, rows], counted
        times: dict[str, list[float]] = {"bare read": [], "read + input tags": []}
        for _ in range(args.rounds):
            for name, frame in (("bare read", bare), ("read + input tags", tagged)):
                start = time.perf_counter()
                frame(spark, paths).write.format("noop").mode("overwrite").save()
                times[name].append(time.perf_counter() - start)
        for name, values in times.items():
            each = " ".join(f"{v:.2f}" for v in values)
            print(f"{name:18s} median {statistics.median(values):.2f} s  ({each})")
        ratios = [t / b for t, b in zip(times["read + input tags"], times["bare read"], strict=True)]
        print(f"ratio (paired per round): median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()

"""Transform benchmark (issue 5), with its baseline in the same run and on the same SparkSession.

A root dataset holds N rows (default 5,000,000) in several Parquet slices, ingested by the provider
(set-up, not timed). Timed, interleaved B A B A ... after one warm-up of each:

(A) `run_transform` of a fresh derivative whose SetTransform is a filter + projection — the whole
    provider path: plan, engine request, the input views (offset range, offset order), the SQL, offsets
    and system columns, the Parquet slice, physical and logical hashes, the commit of SetDataSchema +
    ExecuteTransform;
(B) a bare PySpark job: `spark.read.parquet(<the same slice files>)`, the view, the same SQL, Parquet.

Reported: the median of each and their ratio A/B (target <= 1.25), and the median of the ratios of
each interleaved pair (robust when the load of a shared machine drifts during the run). Checked: the
derivative's rows are exactly, in order, the filter + projection of the input in offset order
(computed with pyarrow), and the same multiset of rows as the bare job's output; its offsets are
contiguous from 0. Also shown: how much of A is the engine request (the rest is the coordinator's:
planning, both hashes of the output, the commit), and the CPU-seconds of A and B (this process and the
local Spark JVM, apart): A's CPU-seconds over the core count are the least wall time A could take.

Usage: .venv/bin/python bench/bench_transform.py [--rows N] [--slices S] [--repeat K] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyspark
from machine_info import cpu_seconds, java_version

from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.engine.session import get_session
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.execute import TransformOptions, run_transform

DDL = ["event_time TIMESTAMP", "id BIGINT", "symbol STRING", "price DOUBLE", "qty INT"]
SQL = "SELECT event_time, symbol, price * qty AS notional FROM trades WHERE price > 250"
BASE_MS = int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
T0 = Timestamp.parse("2024-01-01T00:00:00Z")
T = TypeVar("T")


def write_trades_parquet(path: Path, start: int, rows: int, seed: int) -> None:
    """Rows `start..start+rows-1` of the trades table, in event-time order (a second per 3 rows)."""
    rnd = np.random.default_rng(seed)
    ids = np.arange(start, start + rows, dtype=np.int64)
    symbols = np.array([f"SYM{i:03d}" for i in range(500)], dtype=object)
    table = pa.table(
        {
            "event_time": pa.array(BASE_MS + ids // 3 * 1000, pa.timestamp("ms", tz="UTC")),
            "id": ids,
            "symbol": pa.array(symbols[rnd.integers(0, 500, rows)], pa.string()),
            "price": np.round(rnd.uniform(1, 500, rows), 2),
            "qty": rnd.integers(1, 1000, rows).astype(np.int32),
        }
    )
    pq.write_table(table, path)


def build_root(work: Path, rows: int, slices: int, runner: LocalSparkRunner) -> tuple[Repository, list[str]]:
    """The root dataset `trades` with `rows` rows in `slices` slices; returns the slice files in order.

    A repository left in `work` by an earlier run with `--dir` is reused as it is.
    """
    if (work / "repo").exists():
        repo = Repository.open(work / "repo")
        return repo, _slice_files(repo, "trades", model.AddData)
    repo = Repository.init(work / "repo")
    source = model.AddPushSource(
        source_name="default", read=model.ReadStepParquet(ddl_schema=DDL), merge=model.MergeStrategyAppend()
    )
    repo.add(
        model.DatasetSnapshot(name="trades", kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
    )
    dataset = repo.dataset("trades")
    options = IngestOptions(work_dir=work / "cache", log=lambda _line: None)
    per_slice = -(-rows // slices)
    for index, start in enumerate(range(0, rows, per_slice)):
        path = work / f"in-{index}.parquet"
        write_trades_parquet(path, start, min(per_slice, rows - start), seed=index)
        push_ingest(dataset, "trades", runner, [path], options, system_time=T0)
        path.unlink()
    return repo, _slice_files(repo, "trades", model.AddData)


def _slice_files(repo: Repository, name: str, kind: type) -> list[str]:
    """The dataset's data files in chain order (= offset order)."""
    dataset = repo.dataset(name)
    events = [block.event for _, block in reversed(list(dataset.iter_blocks()))]
    data = [e.new_data for e in events if isinstance(e, kind) and e.new_data is not None]
    return [str(dataset.store.local_path(f"data/{s.physical_hash}")) for s in data]


def add_derivative(repo: Repository, name: str) -> None:
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref="trades")],
        transform=model.TransformSql(engine="spark", query=SQL),
    )
    snapshot = model.DatasetSnapshot(name=name, kind=model.DatasetKind.DERIVATIVE, metadata=[transform])
    repo.add(snapshot, system_time=T0)


def expected_rows(slice_files: list[str]) -> pa.Table:
    """The query's result computed with pyarrow over the input in offset order."""
    table = pa.concat_tables(pq.read_table(f) for f in slice_files)
    table = table.sort_by("offset")
    table = table.filter(pc.greater(table["price"], 250))
    notional = pc.multiply(table["price"], pc.cast(table["qty"], pa.float64()))
    return pa.table({"event_time": table["event_time"], "symbol": table["symbol"], "notional": notional})


def check(repo: Repository, name: str, bare_dir: Path, expected: pa.Table) -> None:
    [path] = _slice_files(repo, name, model.ExecuteTransform)
    table = pq.read_table(path)
    assert table["offset"].to_pylist() == list(range(table.num_rows)), "offsets are not 0..n-1 in order"
    data = table.select(["event_time", "symbol", "notional"])
    assert data.num_rows == expected.num_rows, (data.num_rows, expected.num_rows)
    assert data.equals(expected.cast(data.schema)), "the derivative's rows differ from the expected, in order"
    bare = pq.read_table(bare_dir).select(["event_time", "symbol", "notional"])
    assert bare.num_rows == data.num_rows, (bare.num_rows, data.num_rows)
    keys = [("event_time", "ascending"), ("symbol", "ascending"), ("notional", "ascending")]
    assert bare.cast(data.schema).sort_by(keys).equals(data.sort_by(keys)), "bare job and derivative differ"


def bare_job(spark: object, slice_files: list[str], out: Path) -> None:
    spark.read.parquet(*slice_files).createOrReplaceTempView("trades")  # type: ignore[attr-defined]
    spark.sql(SQL).write.parquet(str(out))  # type: ignore[attr-defined]


def timed_call(call: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float, float, float]:
    """`call(*args, **kwargs)`'s result, wall seconds, CPU-seconds of this process and of the local
    Spark JVM."""
    t0, (python0, jvm0) = time.perf_counter(), cpu_seconds()
    result = call(*args, **kwargs)
    wall, (python1, jvm1) = time.perf_counter() - t0, cpu_seconds()
    return result, wall, python1 - python0, jvm1 - jvm0


class TimedRunner:
    """The in-process runner, timing its engine requests (the rest of run_transform is the coordinator's:
    planning, the request, both hashes of the output, the commit)."""

    def __init__(self, runner: LocalSparkRunner) -> None:
        self.runner, self.elapsed = runner, 0.0

    def run(self, request_json: str, work_dir: Path) -> str:
        t0 = time.perf_counter()
        try:
            return self.runner.run(request_json, work_dir)
        finally:
            self.elapsed += time.perf_counter() - t0


def machine() -> str:
    return (
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
        f"CPython {platform.python_version()}, PySpark {pyspark.__version__}, pyarrow {pa.__version__}, "
        f"Java: {java_version()}; date {datetime.now(timezone.utc):%Y-%m-%d}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--slices", type=int, default=5, help="input slices (one push ingest each)")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions of each (after a warm-up)")
    parser.add_argument("--dir", help="scratch directory (default: a temporary one)")
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    print(machine())
    work = Path(args.dir or tempfile.mkdtemp(prefix="odf-bench-transform-"))
    conf = {"spark.driver.memory": "6g"}
    runner = LocalSparkRunner(args.master, conf)
    spark = get_session(args.master, conf)
    try:
        t0 = time.perf_counter()
        repo, slice_files = build_root(work, args.rows, args.slices, runner)
        size = sum(Path(f).stat().st_size for f in slice_files) / 1e6
        print(
            f"set-up: {args.rows:,} rows in {len(slice_files)} slices ({size:.0f} MB Parquet), "
            f"ingested in {time.perf_counter() - t0:.1f} s"
        )
        print(f"query: {SQL}")
        expected = expected_rows(slice_files)
        print(f"expected output: {expected.num_rows:,} rows")
        keys = ("bare", "provider", "engine", "bare_python", "bare_jvm", "python", "jvm")
        times: dict[str, list[float]] = {k: [] for k in keys}
        for rep in range(args.repeat + 1):
            label = "warm-up" if rep == 0 else f"run {rep}"
            bare_dir = work / f"bare-{rep}"
            _, bare, bare_python, bare_jvm = timed_call(bare_job, spark, slice_files, bare_dir)
            name = f"notional-{time.time_ns()}"
            add_derivative(repo, name)
            options = TransformOptions(work_dir=work / "transform-work", log=lambda _line: None)
            timed = TimedRunner(runner)
            result, provider, python, jvm = timed_call(
                run_transform, repo, name, timed, options, system_time=T0
            )
            assert result.records == expected.num_rows, (result.records, expected.num_rows)
            check(repo, name, bare_dir, expected)
            shutil.rmtree(bare_dir)
            run = dict(
                zip(keys, (bare, provider, timed.elapsed, bare_python, bare_jvm, python, jvm), strict=True)
            )
            if rep > 0:
                for key, value in run.items():
                    times[key].append(value)
            print(
                f"{label}: bare PySpark {bare:.2f} s, provider run_transform {provider:.2f} s "
                f"({provider / bare:.2f}; engine request {timed.elapsed:.2f} s, coordinator "
                f"{provider - timed.elapsed:.2f} s); CPU-seconds: bare {bare_python + bare_jvm:.2f}, "
                f"provider {python + jvm:.2f} (Python {python:.2f}, JVM {jvm:.2f})"
            )
            sys.stdout.flush()
        median = {key: statistics.median(values) for key, values in times.items()}
        ratios = [a / b for a, b in zip(times["provider"], times["bare"], strict=True)]
        print(
            f"median of {args.repeat}: bare {median['bare']:.2f} s, provider {median['provider']:.2f} s "
            f"(engine request {median['engine']:.2f} s), ratio of the medians "
            f"{median['provider'] / median['bare']:.2f}; median of the paired ratios "
            f"{statistics.median(ratios):.2f} "
            f"(range {min(ratios):.2f}-{max(ratios):.2f}); target <= 1.25; outputs checked equal"
        )
        cores = os.cpu_count() or 1
        bare_cpu = statistics.median(
            a + b for a, b in zip(times["bare_python"], times["bare_jvm"], strict=True)
        )
        cpu = statistics.median(a + b for a, b in zip(times["python"], times["jvm"], strict=True))
        print(
            f"CPU-seconds (medians): bare {bare_cpu:.2f} (uses {bare_cpu / median['bare']:.2f} of {cores} "
            f"cores), provider {cpu:.2f} (Python {median['python']:.2f}, JVM {median['jvm']:.2f} against "
            f"the bare job's JVM {median['bare_jvm']:.2f}); the provider's work alone needs at least "
            f"{cpu / cores:.2f} s on {cores} cores, {cpu / cores / median['bare']:.2f} x the bare job"
        )
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

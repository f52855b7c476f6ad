"""Compaction benchmark (issue 27, target 1), with its baseline in the same run and on the same SparkSession.

A root dataset holds S slices of R records each (default 10,000 x 100), built directly in the set-up (not
timed): Parquet slices with the system columns written by pyarrow, their AddData blocks committed through
the core (`tests/unit/test_compaction.build_root`), as 10,000 ingests would leave it. Timed, interleaved
B A B A ... after one warm-up of each:

(A) `run_compaction` with the reference's defaults (10,000 records, 300 MB a slice): the plan (one walk
    of the chain), the engine request (every group's slices read, sorted by offset, one file a group),
    both hashes of every new file, the chain rebuilt on the Seed and committed; after each round the
    dataset's head (and summary) are put back, so that every round compacts the same chain;
(B) a bare PySpark job: `spark.read.parquet(<the same slice files>).orderBy(offset).coalesce(1)`
    written as one Parquet file.

Reported: the median of each, their ratio A/B (target <= 2), and of A the chain rebuild (plan + commit;
target < 10% of A), the engine request and the hashing of the new files. Checked: the compacted chain has
one AddData per 10,000 records, every offset in order, and passes the integrity verification.

Usage: .venv/bin/python bench/bench_compact.py [--slices S] [--records R] [--repeat K] [--dir DIR]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pyspark
from machine_info import java_version

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the chain builder is the tests' (tests/unit/test_compaction.py)

from airflow_odf.engine.local_runner import LocalSparkRunner  # noqa: E402
from airflow_odf.engine.session import get_session  # noqa: E402
from airflow_odf.odf.chain.data_access import iter_slices  # noqa: E402
from airflow_odf.odf.chain.integrity import verify_integrity  # noqa: E402
from airflow_odf.odf.compaction import execute  # noqa: E402
from airflow_odf.odf.compaction.plan import CompactionOptions  # noqa: E402
from airflow_odf.odf.repo.repository import Repository  # noqa: E402
from tests.unit.test_compaction import build_root  # noqa: E402

NAME = "trades"
MASTER = "local[*]"


class Stopwatch:
    """Seconds spent in wrapped functions, by label."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[label] = self.spent.get(label, 0.0) + time.perf_counter() - start

        return timed


def compaction_round(repo: Repository, runner: LocalSparkRunner) -> tuple[float, dict[str, float]]:
    """One compaction of the built chain, timed; the head and summary are put back afterwards."""
    dataset = repo.dataset(NAME)
    head, summary = dataset.store.get("refs/head"), dataset.store.get("info/summary")
    watch = Stopwatch()
    plan, commit = execute.plan_compaction, execute._commit
    execute.plan_compaction = watch.wrap("plan", plan)
    execute._commit = watch.wrap("commit", commit)
    timed_runner = type("TimedRunner", (), {"run": staticmethod(watch.wrap("engine", runner.run))})()
    try:
        start = time.perf_counter()
        result = execute.run_compaction(repo, NAME, timed_runner, CompactionOptions(), log=lambda _: None)
        elapsed = time.perf_counter() - start
    finally:
        execute.plan_compaction, execute._commit = plan, commit
    check(repo, result)
    dataset.store.compare_and_swap("refs/head", dataset.store.get("refs/head"), head)
    dataset.store.put("info/summary", summary)
    return elapsed, watch.spent


def check(repo: Repository, result: execute.CompactionResult) -> None:
    dataset = repo.dataset(NAME)
    state = dataset.state()
    slices = list(reversed(list(iter_slices(dataset))))
    assert result.slices_after == len(slices) == -(-state.num_records // 10_000), result.as_dict()
    starts = [s.offset_interval.start for s in slices]
    assert starts == list(range(0, state.num_records, 10_000)), starts[:5]
    assert verify_integrity(dataset) == []


def baseline_round(spark: Any, paths: list[str], out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    spark.read.parquet(*paths).orderBy("offset").coalesce(1).write.parquet(str(out))
    elapsed = time.perf_counter() - start
    [written] = out.glob("*.parquet")
    assert pq.ParquetFile(written).metadata.num_rows == len(paths) * ARGS.records
    return elapsed


def main() -> None:
    work = Path(ARGS.dir or tempfile.mkdtemp(prefix="bench-compact-"))
    repo = Repository.init(work / "repo")
    start = time.perf_counter()
    build_root(repo, NAME, [ARGS.records] * ARGS.slices)
    dataset = repo.dataset(NAME)
    paths = [str(dataset.store.local_path(f"data/{s.physical_hash}")) for s in iter_slices(dataset)]
    print(f"set-up: {ARGS.slices} slices of {ARGS.records} records in {time.perf_counter() - start:.1f} s")
    spark = get_session(MASTER)
    runner = LocalSparkRunner(MASTER)
    baseline_round(spark, paths, work / "baseline")  # warm-up of each
    compaction_round(repo, runner)
    pairs: list[tuple[float, float, dict[str, float]]] = []
    for _ in range(ARGS.repeat):
        b = baseline_round(spark, paths, work / "baseline")
        a, parts = compaction_round(repo, runner)
        pairs.append((a, b, parts))
        print(
            f"  compaction {a:.2f} s (plan {parts['plan']:.2f}, engine {parts['engine']:.2f}, "
            f"commit {parts['commit']:.2f}), bare Spark {b:.2f} s"
        )
    a = statistics.median(p[0] for p in pairs)
    b = statistics.median(p[1] for p in pairs)
    rebuild = statistics.median((p[2]["plan"] + p[2]["commit"]) / p[0] for p in pairs)
    engine = statistics.median(p[2]["engine"] / p[0] for p in pairs)
    print(f"python {platform.python_version()}, pyspark {pyspark.__version__}, {java_version()}, {MASTER}")
    print(f"compaction (A) median {a:.2f} s; bare Spark (B) median {b:.2f} s")
    print(
        f"ratio A/B {a / b:.2f} (target <= 2); median of pair ratios "
        f"{statistics.median(p[0] / p[1] for p in pairs):.2f}"
    )
    print(
        f"chain rebuild (plan + commit) {rebuild:.1%} of A (target < 10%); engine request {engine:.1%}; "
        f"the rest (hashing the new files, staging) {1 - rebuild - engine:.1%}"
    )
    if not ARGS.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=10_000)
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", help="keep the work here (default: a temporary folder, removed)")
    ARGS = parser.parse_args()
    main()

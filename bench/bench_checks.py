"""Quality checks before the commit (issue 36, item 1): their cost on a large slice, with the baseline in
the same run.

One CSV of N rows (default 5,000,000: event_time, id, symbol, price, qty) is push-ingested into a fresh
Append root on the in-process local engine: (A) without checks; (B) with 5 column checks (`id`
null_check and unique_check, `price` min and max, `symbol` distinct_check) and 2 table checks (a
row-level `qty > 0`, an aggregate `COUNT(*) > 0`), all passing; (C) with as many checks, none a
distinct count (null_check of `id` and `symbol`, min and max of `price`, min of `qty`, the same table
checks): what the checks cost besides the exact distinct counts. The rounds (A, B, C) are interleaved
on one SparkSession after a warm-up ingest of a small file, so that a load that drifts (a shared
machine) weighs on each alike. Each ingest is timed end to end (`push_ingest`: read, sort, write, hash,
commit; with checks also their evaluation on the written slice).

Reported: each round's times and ratios B/A and C/A, the medians and the median of the rounds' ratios
(target <= 1.3); and (D) the checks' own work alone, B's and C's evaluated three times on the slice (A)
wrote, as the engine evaluates them (less at the mercy of a drifting load than whole ingests), and B's
once more with the distinct counts left to Spark's aggregation (how they were counted before
engine/exact_distinct.py).
Checked: every ingest commits N records; B's and C's seven checks passed.

Usage: .venv/bin/python bench/bench_checks.py [--rows N] [--pairs K (rounds)] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import pyspark
from machine_info import java_version

from airflow_odf.engine import exact_distinct
from airflow_odf.engine.checks import evaluate_checks
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.engine.session import get_session
from airflow_odf.odf.checks.request import checks_request
from airflow_odf.odf.checks.spec import CheckSuite, resolve_suite
from airflow_odf.odf.format import model
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository

CHECKS = {
    "columns": {
        "id": {"null_check": {"equal_to": 0}, "unique_check": {"equal_to": 0}},
        "price": {"min": {"geq_to": 0}, "max": {"leq_to": 1_000_000}},
        "symbol": {"distinct_check": {"geq_to": 1}},
    },
    "tables": {
        "positive_qty": {"check_statement": "qty > 0"},
        "not_empty": {"check_statement": "COUNT(*) > 0"},
    },
}
# (C) the same number of checks, none a distinct count: what the checks cost besides that aggregation
CHEAP_CHECKS = {
    "columns": {
        "id": {"null_check": {"equal_to": 0}},
        "symbol": {"null_check": {"equal_to": 0}},
        "price": {"min": {"geq_to": 0}, "max": {"leq_to": 1_000_000}},
        "qty": {"min": {"geq_to": 1}},
    },
    "tables": CHECKS["tables"],
}
SYMBOLS = [f"S{i:03d}" for i in range(500)]


def write_csv(path: Path, rows: int) -> None:
    """`rows` trades with unique ids, positive prices and quantities (deterministic)."""
    rng = random.Random(36)
    with path.open("w", encoding="utf-8") as f:
        f.write("event_time,id,symbol,price,qty\n")
        for start in range(0, rows, 100_000):
            lines = []
            for i in range(start, min(rows, start + 100_000)):
                second = i % 86_400
                lines.append(
                    f"2024-01-02T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z,{i},"
                    f"{rng.choice(SYMBOLS)},{rng.randint(1, 99_999) / 100},{rng.randint(1, 500)}\n"
                )
            f.write("".join(lines))


def ingest(work: Path, name: str, data: Path, runner: LocalSparkRunner, checks: CheckSuite | None) -> float:
    """Seconds of one push ingest of `data` into a new root in its own repository."""
    repo = Repository.init(work / name)
    read = model.ReadStepCsv(
        header=True,
        ddl_schema=["event_time TIMESTAMP", "id BIGINT", "symbol STRING", "price DOUBLE", "qty BIGINT"],
    )
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(model.DatasetSnapshot(name="trades", kind=model.DatasetKind.ROOT, metadata=[source]))
    options = IngestOptions(work_dir=repo.work_dir, checks=checks, log=lambda line: None)
    started = time.perf_counter()
    result = push_ingest(repo.dataset("trades"), "trades", runner, [data], options)
    elapsed = time.perf_counter() - started
    rows = sum(1 for _ in data.open(encoding="utf-8")) - 1 if data.stat().st_size < 10_000_000 else None
    assert rows is None or result.records == rows
    if checks:
        assert result.checks is not None and len(result.checks) == 7
        assert all(c["success"] for c in result.checks), result.checks
    return elapsed


@contextmanager
def spark_distinct_counts(on: bool) -> Iterator[None]:
    """With `on`, distinct counts by Spark's aggregation (the query), as before engine/exact_distinct.py."""
    before = exact_distinct.MAX_ROWS
    exact_distinct.MAX_ROWS = -1 if on else before
    try:
        yield
    finally:
        exact_distinct.MAX_ROWS = before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="odf-bench-checks-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"trades-{args.rows}.csv"
    if not data.exists():
        started = time.perf_counter()
        write_csv(data, args.rows)
        print(f"wrote {data} ({data.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - started:.0f} s")
    small = work / "warm-up.csv"
    write_csv(small, 1000)
    runner = LocalSparkRunner("local[*]")
    suite, cheap = resolve_suite(CHECKS), resolve_suite(CHEAP_CHECKS)
    ingest(work, "warm-up", small, runner, suite)
    rounds = []
    for k in range(args.pairs):
        shutil.rmtree(work / "runs", ignore_errors=True)  # each ingest into a new repository
        a = ingest(work / "runs", "a", data, runner, None)
        b = ingest(work / "runs", "b", data, runner, suite)
        c = ingest(work / "runs", "c", data, runner, cheap)
        rounds.append((a, b, c))
        print(
            f"round {k + 1}: (A) without checks {a:.1f} s, (B) 7 checks {b:.1f} s (B/A {b / a:.2f}), "
            f"(C) 7 checks without distinct counts {c:.1f} s (C/A {c / a:.2f})",
            flush=True,
        )
    print(
        f"\n{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, nproc {os.cpu_count()}, "
        f"load {os.getloadavg()[0]:.1f}, pyspark {pyspark.__version__}, java {java_version()}"
    )
    print(f"{args.rows} rows ({data.stat().st_size / 1e6:.0f} MB CSV), {args.pairs} interleaved rounds")
    med = [statistics.median(r[i] for r in rounds) for i in range(3)]
    print(f"medians: (A) {med[0]:.1f} s, (B) {med[1]:.1f} s, (C) {med[2]:.1f} s")
    for name, i in (("B/A", 1), ("C/A", 2)):
        ratio = statistics.median(r[i] / r[0] for r in rounds)
        print(f"{name}: ratio of the medians {med[i] / med[0]:.2f}, median of the rounds' ratios {ratio:.2f}")
    # (D) the checks' own work, alone: evaluated 3 times on the slice (A) wrote, as the engine does
    slices = sorted(str(p) for p in (work / "runs" / "a" / "datasets").glob("*/data/*"))
    spark = get_session()
    variants = (
        ("B's checks", checks_request(suite), False),
        ("B's checks, distinct counts by Spark's aggregation", checks_request(suite), True),
        ("C's checks", checks_request(cheap), False),
    )
    times: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for _ in range(3):  # interleaved, as the rounds
        for name, plain, spark_counts in variants:
            started = time.perf_counter()
            with spark_distinct_counts(spark_counts):
                results = evaluate_checks(spark, plain, slices)
            times[name].append(time.perf_counter() - started)
            assert all(r["success"] for r in results)
    for name, found in times.items():
        alone = statistics.median(found)
        print(
            f"(D) {name} alone on the written slice: median {alone:.1f} s of 3 "
            f"({', '.join(f'{t:.1f}' for t in found)}); (A + that) / A = {(med[0] + alone) / med[0]:.2f}"
        )
    print("target <= 1.3")


if __name__ == "__main__":
    main()

"""Ingest benchmarks (issue 4), each with its baseline in the same run and the same SparkSession.

(a) Append ingest of a CSV (default 5,000,000 rows) through the whole provider path — engine request,
    read, event-time sort, offsets, Parquet, physical and logical hashes, commit — against a bare
    PySpark job that reads the same CSV with the same schema and writes Parquet. Target ratio <= 1.25.
(o) Append ingest of a CSV already in event-time order (default 5,000,000 rows, three per second: ties),
    which skips the sort (`engine/event_time_order`), against the bare CSV->Parquet job, paired per
    round (median of the ratios); the same ingest with the sort (each read partition sorted) in the same
    round must commit the same SetDataSchema and AddData bytes (hashes included): asserted. The three
    jobs rotate through the round's places (use a multiple of 3 rounds). Target <= 1.3.
(b) Snapshot merge of a 1,000,000-row snapshot with 10 % changes into a dataset whose history is 20
    slices vs one whose history is 1 slice. Target ratio <= 1.3 (the merge reads its checkpointed
    state, not the history). Also shown: the same merge with the state rebuilt from the slices.

Usage: .venv/bin/python bench/bench_ingest.py [--case csv|ordered|snapshot|all] [--rows N] [--snapshot-rows N]
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
from datetime import datetime, timedelta, timezone
from pathlib import Path

from machine_info import cpu_seconds

from airflow_odf.engine import event_time_order
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.engine.session import get_session
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import encode_table
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository

DDL = ["event_time TIMESTAMP", "id BIGINT", "symbol STRING", "price DOUBLE", "qty INT"]
BASE = datetime(2024, 1, 1, tzinfo=timezone.utc)


def write_trades_csv(path: Path, rows: int) -> None:
    rnd = random.Random(42)
    symbols = [f"SYM{i:03d}" for i in range(500)]
    with path.open("w") as f:
        f.write("event_time,id,symbol,price,qty\n")
        step = 1_000_000
        for start in range(0, rows, step):
            lines = []
            for i in range(start, min(rows, start + step)):
                t = BASE + timedelta(seconds=i // 3 + rnd.randrange(0, 60))
                price, qty = rnd.uniform(1, 500), rnd.randrange(1, 1000)
                lines.append(f"{t:%Y-%m-%dT%H:%M:%S}Z,{i},{rnd.choice(symbols)},{price:.2f},{qty}\n")
            f.write("".join(lines))


def write_ordered_csv(path: Path, rows: int) -> None:
    """Trades in event-time order, three per second (ties kept in input order by the offsets)."""
    rnd = random.Random(42)
    symbols = [f"SYM{i:03d}" for i in range(500)]
    with path.open("w") as f:
        f.write("event_time,id,symbol,price,qty\n")
        for start in range(0, rows, 1_000_000):
            lines = []
            for i in range(start, min(rows, start + 1_000_000)):
                t = BASE + timedelta(seconds=i // 3)
                price, qty = rnd.uniform(1, 500), rnd.randrange(1, 1000)
                lines.append(f"{t:%Y-%m-%dT%H:%M:%S}Z,{i},{rnd.choice(symbols)},{price:.2f},{qty}\n")
            f.write("".join(lines))


def _committed_events(dataset: Dataset) -> list[bytes]:
    """The SetDataSchema and AddData events as encoded in their blocks."""
    events = [b.event for _, b in reversed(list(dataset.iter_blocks()))]
    return [encode_table(e) for e in events if isinstance(e, (model.SetDataSchema, model.AddData))]


def bench_ordered(work: Path, rows: int, runner: LocalSparkRunner, rounds: int, csv: Path | None) -> None:
    spark = get_session("local[*]")
    if csv is None:
        csv = work / "ordered.csv"
        t0 = time.perf_counter()
        write_ordered_csv(csv, rows)
        print(f"(o) generated {rows:,} ordered rows in {time.perf_counter() - t0:.1f} s")
    print(f"(o) {csv}: {csv.stat().st_size / 1e6:.0f} MB")
    schema = "event_time TIMESTAMP, id BIGINT, symbol STRING, price DOUBLE, qty INT"
    read = model.ReadStepCsv(header=True, ddl_schema=DDL)
    # the blocks' times are fixed, so that the ingests' blocks can be compared byte for byte
    created, system_time = Timestamp.parse("2024-05-01T00:00:00Z"), Timestamp.parse("2024-06-01T00:00:00Z")
    ratios, sort_ratios, cpu_ratios, reference = [], [], [], None
    labels = ("bare", "skip", "sort")
    for attempt in range(rounds):
        timings, cpu = {}, {}
        # each of the three takes each place in turn: a job that follows another one's writes pays for
        # their write-back, and is timed after a sync so that it does not
        for label in labels[attempt % 3 :] + labels[: attempt % 3]:
            os.sync()
            cpu0 = sum(cpu_seconds())
            if label == "bare":
                out = work / f"bare-{attempt}"
                t0 = time.perf_counter()
                spark.read.csv(str(csv), schema=schema, header=True).write.parquet(str(out))
                timings[label] = time.perf_counter() - t0
                cpu[label] = sum(cpu_seconds()) - cpu0
                shutil.rmtree(out)
                continue
            repo = _repo(work / f"repo-{label}-{attempt}")
            dataset = _push_dataset(repo, "trades", read, model.MergeStrategyAppend(), created)
            options = IngestOptions(work_dir=work / f"cache-{label}-{attempt}", log=lambda _line: None)
            event_time_order.SKIP_SORT = label == "skip"
            try:
                t0 = time.perf_counter()
                result = push_ingest(dataset, "trades", runner, [csv], options, system_time=system_time)
                timings[label] = time.perf_counter() - t0
                cpu[label] = sum(cpu_seconds()) - cpu0
            finally:
                event_time_order.SKIP_SORT = True
            assert result.records == rows, result
            events = _committed_events(dataset)
            reference = reference or events
            assert events == reference, f"{label}: other blocks than the first ingest's"
            shutil.rmtree(repo.root, ignore_errors=True)
        ratios.append(timings["skip"] / timings["bare"])
        sort_ratios.append(timings["sort"] / timings["bare"])
        cpu_ratios.append(cpu["skip"] / cpu["bare"])
        print(
            f"(o) round {attempt + 1}: bare {timings['bare']:.2f} s ({cpu['bare']:.1f} CPU s), ingest "
            f"skipping the sort {timings['skip']:.2f} s ({cpu['skip']:.1f} CPU s; {ratios[-1]:.2f}), with "
            f"the sort {timings['sort']:.2f} s ({cpu['sort']:.1f} CPU s; {sort_ratios[-1]:.2f}), "
            f"load {os.getloadavg()[0]:.1f}"
        )
    print(
        f"(o) median paired ratio to bare: skipping the sort {statistics.median(ratios):.2f} "
        f"(target <= 1.3; CPU seconds {statistics.median(cpu_ratios):.2f}), with the sort "
        f"{statistics.median(sort_ratios):.2f}; SetDataSchema and AddData identical in every ingest"
    )


def write_snapshot_csv(path: Path, rows: int, version: int) -> None:
    """Version 0: rows 0..n-1. Version 1: 10 % changed (4 % updated, 3 % removed, 3 % added)."""
    with path.open("w") as f:
        f.write("id,name,value\n")
        lines = []
        for i in range(rows):
            value = i * 3
            if version == 1:
                if i % 100 < 3:
                    continue  # removed
                if 3 <= i % 100 < 7:
                    value += 1  # updated
            lines.append(f"{i},name-{i % 9973},{value}\n")
        if version == 1:
            lines += [f"{rows + i},new-{i},{i}\n" for i in range(rows * 3 // 100)]
        f.write("".join(lines))


def _repo(root: Path) -> Repository:
    return Repository.init(root)


def _push_dataset(
    repo: Repository, name: str, read: object, merge: object, system_time: Timestamp | None = None
) -> Dataset:
    snapshot = model.DatasetSnapshot(
        name=name,
        kind=model.DatasetKind.ROOT,
        metadata=[model.AddPushSource(source_name="default", read=read, merge=merge)],
    )
    repo.add(snapshot, system_time=system_time)
    return repo.dataset(name)


def bench_csv(work: Path, rows: int, runner: LocalSparkRunner, target_slice_bytes: int) -> None:
    spark = get_session("local[*]")
    csv = work / "trades.csv"
    t0 = time.perf_counter()
    write_trades_csv(csv, rows)
    size_mb = csv.stat().st_size / 1e6
    print(f"(a) generated {rows:,} rows, {size_mb:.0f} MB CSV in {time.perf_counter() - t0:.1f} s")
    schema = "event_time TIMESTAMP, id BIGINT, symbol STRING, price DOUBLE, qty INT"
    results: dict[str, list[float]] = {"bare": [], "sorted": [], "ingest": []}
    for attempt in range(2):
        out = work / f"bare-{attempt}"
        t0 = time.perf_counter()
        spark.read.csv(str(csv), schema=schema, header=True).write.parquet(str(out))
        results["bare"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        frame = spark.read.csv(str(csv), schema=schema, header=True)
        frame.orderBy("event_time").write.parquet(str(out) + "-sorted")
        results["sorted"].append(time.perf_counter() - t0)
        repo = _repo(work / f"repo-{attempt}")
        read = model.ReadStepCsv(header=True, ddl_schema=DDL)
        dataset = _push_dataset(repo, "trades", read, model.MergeStrategyAppend())
        options = IngestOptions(
            work_dir=work / f"cache-{attempt}", target_slice_bytes=target_slice_bytes, log=lambda _line: None
        )
        t0 = time.perf_counter()
        result = push_ingest(dataset, "trades", runner, [csv], options)
        results["ingest"].append(time.perf_counter() - t0)
        assert result.records == rows, result
        print(
            f"(a) attempt {attempt + 1}: bare PySpark CSV->Parquet {results['bare'][-1]:.2f} s, "
            f"bare with a sort by event time {results['sorted'][-1]:.2f} s, "
            f"provider Append ingest {results['ingest'][-1]:.2f} s ({len(result.new_blocks)} blocks)"
        )
        shutil.rmtree(out)
        shutil.rmtree(str(out) + "-sorted")
    bare, ingest, ordered = min(results["bare"]), min(results["ingest"]), min(results["sorted"])
    ratio = ingest / bare
    print(f"(a) best of 2: bare {bare:.2f} s, ingest {ingest:.2f} s, ratio {ratio:.2f} (target <= 1.25)")
    print(f"(a) against the bare job plus the sort by event time that offsets need: {ingest / ordered:.2f}")


def bench_snapshot(work: Path, rows: int, runner: LocalSparkRunner) -> None:
    v0, v1 = work / "snapshot-v0.csv", work / "snapshot-v1.csv"
    write_snapshot_csv(v0, rows, 0)
    write_snapshot_csv(v1, rows, 1)
    read = model.ReadStepCsv(header=True, ddl_schema=["id BIGINT", "name STRING", "value BIGINT"])
    merge = model.MergeStrategySnapshot(primary_key=["id"])
    timings: dict[str, float] = {}
    for label, slice_rows in (("20 slices", -(-rows // 20)), ("1 slice", None)):
        repo = _repo(work / f"repo-{label.replace(' ', '-')}")
        dataset = _push_dataset(repo, "snap", read, merge)
        setup = IngestOptions(work_dir=work / "cache", max_records_per_slice=slice_rows, log=lambda _l: None)
        first = push_ingest(
            dataset, "snap", runner, [v0], setup, system_time=Timestamp.parse("2024-01-01T00:00:00Z")
        )
        options = IngestOptions(work_dir=work / "cache", log=lambda _l: None)
        t0 = time.perf_counter()
        second = push_ingest(
            dataset, "snap", runner, [v1], options, system_time=Timestamp.parse("2024-01-02T00:00:00Z")
        )
        timings[label] = time.perf_counter() - t0
        print(
            f"(b) history of {len(first.new_blocks) - 1} slice(s): merge of the changed snapshot "
            f"{timings[label]:.2f} s, {second.records:,} change records"
        )
    ratio = timings["20 slices"] / timings["1 slice"]
    print(f"(b) ratio 20 slices / 1 slice: {ratio:.2f} (target <= 1.3)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=("csv", "ordered", "snapshot", "all"), default="all")
    parser.add_argument("--rounds", type=int, default=3, help="(o): paired rounds")
    parser.add_argument("--ordered-csv", type=Path, help="(o): an ordered CSV to use instead of generating")
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--snapshot-rows", type=int, default=1_000_000)
    parser.add_argument("--dir", help="scratch directory (default: a temporary one)")
    parser.add_argument("--target-slice-mb", type=int, default=1024, help="(a): input MB per sorted range")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, date {datetime.now(timezone.utc):%Y-%m-%d}"
    )
    work = Path(args.dir or tempfile.mkdtemp(prefix="odf-bench-ingest-"))
    runner = LocalSparkRunner("local[*]", {"spark.driver.memory": "6g"})
    get_session("local[*]", {"spark.driver.memory": "6g"})
    try:
        if args.case in ("csv", "all"):
            bench_csv(work, args.rows, runner, args.target_slice_mb * 1024 * 1024)
        if args.case in ("ordered", "all"):
            bench_ordered(work, args.rows, runner, args.rounds, args.ordered_csv)
        if args.case in ("snapshot", "all"):
            bench_snapshot(work, args.snapshot_rows, runner)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

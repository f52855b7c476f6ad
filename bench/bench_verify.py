"""Verification cost against history (issue 25, item 5), with its baseline in the same run.

A derivative `acme` of a root `trades` grows by transform runs, each one small CSV pushed into the root
and one `run_transform` (one ExecuteTransform), on the in-process local engine. When it has had N = 1,
10 and 50 runs:

- (baseline) the full verification (`verify_dataset(full=True)`, as `odf verify --full`): every block
  and object checked, every transform replayed; it also records the head it verified;
- then, K times: one more transform run and (timed) the default, incremental verification, which checks
  that run's blocks and objects and replays its one transform.

Each N is its own pipeline (own repository, one shared SparkSession); the longest is built first, which
warms the JVM up, and the K incremental rounds go through the pipelines in turn, so that a load that
drifts during the run (a shared machine) weighs on every N alike.

Reported: per N, the full verification's time and replays, the median incremental time, what it checked
(blocks, objects, replays), and the ratio incremental after 50 / incremental after 1 (target <= 1.2),
of the medians and as the median of the interleaved pairs' ratios.
Checked: every verification passes, each incremental one starts after the previous head and replays
exactly one transform.

Usage: .venv/bin/python bench/bench_verify.py [--runs 1,10,50] [--repeat K] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pyspark
from machine_info import java_version

from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.chain.verification import Blocks, VerificationReport, verify_dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.execute import TransformOptions, run_transform
from airflow_odf.odf.transform.verify import ReproducibilityProblem, verify_reproducibility

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
ROOT, DERIVATIVE = "trades", "acme"
SQL = f"SELECT event_time, symbol, price * qty AS notional FROM {ROOT} WHERE price > 10"


def create(work: Path) -> Repository:
    repo = Repository.init(work / "repo")
    read = model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "symbol STRING", "price DOUBLE", "qty INT"]
    )
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(model.DatasetSnapshot(name=ROOT, kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0)
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref=ROOT)],
        transform=model.TransformSql(engine="spark", query=SQL),
    )
    snapshot = model.DatasetSnapshot(name=DERIVATIVE, kind=model.DatasetKind.DERIVATIVE, metadata=[transform])
    repo.add(snapshot, system_time=T0)
    return repo


class Pipeline:
    """The two datasets and the engine; `run()` is one transform run."""

    def __init__(self, work: Path, runner: LocalSparkRunner) -> None:
        self.work = work
        self.repo = create(work)
        self.runner = runner
        self.runs = 0

    def run(self) -> None:
        self.runs += 1
        path = self.work / "in.csv"
        rows = "".join(
            f"2024-01-{1 + self.runs // 24:02d}T{self.runs % 24:02d}:{i:02d}:00Z,SYM{i},{10 + i},{i + 1}\n"
            for i in range(20)
        )
        path.write_text("event_time,symbol,price,qty\n" + rows)
        quiet = IngestOptions(work_dir=self.repo.work_dir, log=lambda _line: None)
        push_ingest(self.repo.dataset(ROOT), ROOT, self.runner, [path], quiet)
        result = run_transform(
            self.repo, DERIVATIVE, self.runner, TransformOptions(work_dir=self.repo.work_dir)
        )
        assert result.new_blocks, "the transform run committed nothing"

    def verify(self, *, full: bool) -> tuple[VerificationReport, float]:
        def replay(since: ChainState, blocks: Blocks) -> list[ReproducibilityProblem]:
            return verify_reproducibility(
                self.repo,
                DERIVATIVE,
                self.runner,
                self.repo.work_dir,
                log=lambda _line: None,
                since=since,
                blocks=blocks,
            )

        t0 = time.perf_counter()
        report = verify_dataset(self.repo.dataset(DERIVATIVE), full=full, replay=replay, engine="local")
        elapsed = time.perf_counter() - t0
        assert report.ok, [str(p) for p in [*report.problems, *report.not_reproducible]]
        return report, elapsed


def machine() -> str:
    return (
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
        f"CPython {platform.python_version()}, PySpark {pyspark.__version__}, Java: {java_version()}; "
        f"date {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", default="1,10,50", help="the transform runs before each measurement")
    parser.add_argument("--repeat", type=int, default=5, help="incremental verifications timed at each point")
    parser.add_argument("--dir", help="scratch directory (default: a temporary one)")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    points = sorted(int(n) for n in args.runs.split(","))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    print(machine())
    work = Path(args.dir or tempfile.mkdtemp(prefix="odf-bench-verify-"))
    runner = LocalSparkRunner(args.master, {"spark.sql.shuffle.partitions": "2"})
    pipelines = {n: Pipeline(work / f"runs-{n}", runner) for n in points}
    full: dict[int, tuple[VerificationReport, float]] = {}
    for n in reversed(points):  # the longest first: it also warms the JVM up
        while pipelines[n].runs < n:
            pipelines[n].run()
        full[n] = pipelines[n].verify(full=True)
    times: dict[int, list[float]] = {n: [] for n in points}
    last: dict[int, VerificationReport] = {}
    for _ in range(args.repeat):  # interleaved, so that a drifting load weighs on every point alike
        for n in points:
            before = pipelines[n].repo.dataset(DERIVATIVE).existing_head()
            pipelines[n].run()
            last[n], elapsed = pipelines[n].verify(full=False)
            assert last[n].since == before and last[n].replayed == 1, (
                last[n].since,
                before,
                last[n].replayed,
            )
            times[n].append(elapsed)
    print(
        "| runs | full verify (baseline) | replays | incremental verify (median) | blocks/objects/replays |"
    )
    print("|---|---|---|---|---|")
    for n in points:
        report, full_s = full[n]
        print(
            f"| {n} | {full_s:.2f} s | {report.replayed} | {statistics.median(times[n]):.2f} s "
            f"({', '.join(f'{t:.2f}' for t in times[n])}) | "
            f"{last[n].blocks_checked} / {last[n].objects_checked} / {last[n].replayed} |"
        )
    first, longest = points[0], points[-1]
    ratio = statistics.median(times[longest]) / statistics.median(times[first])
    pairs = statistics.median(b / a for a, b in zip(times[first], times[longest], strict=True))
    print(
        f"incremental verify after {longest} / after {first} runs: {ratio:.2f} (medians; median of the "
        f"interleaved pairs' ratios {pairs:.2f}; target <= 1.2); full verify after {longest}: "
        f"{full[longest][1] / statistics.median(times[longest]):.1f}x the incremental"
    )


if __name__ == "__main__":
    main()

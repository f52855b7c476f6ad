"""Overlapping runs (issue 36): 3 runs of the trades pipeline at once on one repository against one run
alone, each baseline in the same run.

The pipeline is example DAG 1's through the core API with the local engine, in a process of its own per
run (as Airflow runs each task in its own): the two manifests of dags_examples/manifests (a polling
FilesGlob root of trades CSV files, Ledger by trade_id, and its daily derivative), then `pull_polling`
of the root and `run_transform` of the derivative, on `local[2]`. Its data is made bigger than the
example's so that the engine work, not Python's start, is what a run costs: `--files` CSV files of
`--rows` trades each. Each round:

  alone    one run on a fresh repository;
  overlap  three runs started together on another fresh repository (one scratch space, as workers
           of one machine share: the claims of `chain.claims` apply);
  racing   the same with a scratch space per run (as workers sharing none, and as every run did before
           claims): each does the whole engine work, two of them only to lose the race for the head.

The figure is the mean wall time of the three overlapping runs (each from its process's start to its
end) over the wall time of the run alone; target <= 1.5 (issue 36: about 2.4x before). Checked: each
repository holds every trade once, and the daily derivative counts every trade once.

Usage: .venv/bin/python bench/bench_overlap.py [--rounds 2] [--files 2] [--rows 200000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from machine_info import cpu_model

REPO_ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = REPO_ROOT / "dags_examples" / "manifests"
SYMBOLS = ["ACME", "INIT", "GLOB", "UMBR", "WAYN", "STRK", "OSCP", "CYBD"]
RUNS = 3

CHILD = textwrap.dedent(
    """
    import json, sys, time
    started = time.monotonic()
    from pathlib import Path

    from airflow_odf.cli.main import main
    from airflow_odf.engine.local_runner import LocalSparkRunner
    from airflow_odf.odf.ingest.options import IngestOptions
    from airflow_odf.odf.ingest.polling import pull_polling
    from airflow_odf.odf.repo.repository import Repository
    from airflow_odf.odf.transform.execute import TransformOptions, run_transform

    root, source_dir, manifests = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    work_dir = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    for name in ("com.example.trades", "com.example.trades.daily"):  # apply_manifests
        assert main(["add", "--repo", str(root), str(manifests / f"{name}.yaml")]) == 0
    repo = Repository.open(root)
    work_dir = work_dir or repo.work_dir
    runner = LocalSparkRunner("local[2]", {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "2g"})
    ingest = pull_polling(
        repo.dataset("com.example.trades"),
        "com.example.trades",
        runner,
        IngestOptions(work_dir=work_dir, source_dir=source_dir, files_per_batch=1),
    )
    daily = run_transform(
        repo,
        "com.example.trades.daily",
        runner,
        TransformOptions(work_dir=work_dir, pinned_heads={"com.example.trades": ingest.new_head}),
    )
    print("RESULT " + json.dumps({
        "seconds": time.monotonic() - started,
        "ingested": ingest.records,
        "transformed": daily.records,
        "ingest_reconciled": ingest.reconciliation.lost_races,
        "transform_reconciled": daily.reconciliation.lost_races,
    }))
    """
)


def write_trades(folder: Path, files: int, rows: int) -> None:
    """`files` CSV files of `rows` trades each, one day per file, trade ids unique."""
    folder.mkdir(parents=True)
    rng = random.Random(36)
    for day in range(files):
        with (folder / f"trades-2024-01-{day + 2:02d}.csv").open("w") as f:
            f.write("event_time,symbol,trade_id,price,quantity\n")
            for i in range(rows):
                second = i * 20_000 // rows
                price, quantity = rng.uniform(1, 500), rng.randint(1, 1000)
                f.write(
                    f"2024-01-{day + 2:02d}T09:{second // 3600 % 60:02d}:{second % 60:02d}Z,"
                    f"{rng.choice(SYMBOLS)},{day * rows + i},{price:.4f},{quantity}\n"
                )


def fresh_repository(where: Path) -> Path:
    root = where / f"repo-{time.monotonic_ns()}"
    subprocess.run([sys.executable, "-m", "airflow_odf.cli.main", "init", "--repo", str(root)], check=True)
    return root


def runs(root: Path, source_dir: Path, count: int, *, own_scratch: bool = False) -> list[dict[str, float]]:
    """`count` pipeline runs started together on `root` (`own_scratch`: each with a scratch space of its
    own); their results."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONWARNINGS": "ignore"}
    command = [sys.executable, "-c", CHILD, str(root), str(source_dir), str(MANIFESTS)]
    children = [
        subprocess.Popen(
            [*command, *([str(root.parent / f"{root.name}-scratch-{i}")] if own_scratch else [])],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    results = []
    for child in children:
        out, err = child.communicate(timeout=3600)
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        if child.returncode != 0 or not lines:
            raise SystemExit(f"a run failed:\n{err[-4000:]}")
        results.append(json.loads(lines[-1].removeprefix("RESULT ")))
    return results


def check(root: Path, trades: int) -> None:
    """Every trade once in the root; the derivative's rows the same as a run alone gives (per day, symbol)."""
    from airflow_odf.odf.chain.data_access import tail
    from airflow_odf.odf.repo.repository import Repository

    repo = Repository.open(root)
    table = tail(repo.dataset("com.example.trades"), trades + 1)
    assert table is not None and table.num_rows == trades, table
    ids = table.column("trade_id").to_pylist()
    assert len(set(ids)) == trades
    daily = tail(repo.dataset("com.example.trades.daily"), 10_000)
    assert daily is not None and sum(daily.column("trades").to_pylist()) == trades


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args()
    print(f"machine: {cpu_model()}, nproc {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    scratch = Path(tempfile.mkdtemp(prefix="bench-overlap-"))
    try:
        source = scratch / "source"
        write_trades(source / "data", args.files, args.rows)  # the manifest's `path: data/trades-*.csv`
        trades = args.files * args.rows
        ratios, racing_ratios = [], []
        for round_number in range(1, args.rounds + 1):
            alone_root = fresh_repository(scratch)
            [alone] = runs(alone_root, source, 1)
            check(alone_root, trades)
            overlap_root = fresh_repository(scratch)
            overlapping = runs(overlap_root, source, RUNS)
            check(overlap_root, trades)
            assert sum(r["ingested"] for r in overlapping) == trades
            racing_root = fresh_repository(scratch)
            racing = runs(racing_root, source, RUNS, own_scratch=True)
            check(racing_root, trades)
            mean = statistics.mean(r["seconds"] for r in overlapping)
            racing_mean = statistics.mean(r["seconds"] for r in racing)
            ratios.append(mean / alone["seconds"])
            racing_ratios.append(racing_mean / alone["seconds"])
            print(
                f"round {round_number}: alone {alone['seconds']:.1f} s; overlapping "
                + ", ".join(f"{r['seconds']:.1f} s" for r in overlapping)
                + f" (mean {mean:.1f} s; records ingested {[r['ingested'] for r in overlapping]}, "
                f"transformed {[r['transformed'] for r in overlapping]}); ratio {ratios[-1]:.2f}x; racing "
                + ", ".join(f"{r['seconds']:.1f} s" for r in racing)
                + f" (mean {racing_mean:.1f} s); ratio {racing_ratios[-1]:.2f}x",
                flush=True,
            )
            for root in (alone_root, overlap_root, racing_root):
                shutil.rmtree(root)
        print(
            f"overlapping / alone: median {statistics.median(ratios):.2f}x (target <= 1.5x); "
            f"racing (no shared scratch space) / alone: median {statistics.median(racing_ratios):.2f}x"
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

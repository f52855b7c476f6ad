"""Example DAG 1 (`odf_trades_pipeline`) through a real deployment, trigger to success, with and without
`airflow_odf.preload` in `airflow_local_settings.py` (issue 25's target: <= 12 s on the warm engine).

The deployment is the real-deployment test's (`tests/deployment`): PostgreSQL, api-server, scheduler,
dag-processor and triggerer as processes, LocalExecutor, every ODF task on one Spark Connect server
(started once, then warmed by a first run of each deployment, untimed). Baseline in the same run: the
deployment without the preload. Each variant gets its own deployment and database (the local settings
are read at start); every run gets a fresh repository, so each ingests the two trade files again.
Checked: every run succeeds and its repository holds the 5 trades.

Usage: .venv/bin/python bench/bench_deployment.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_bench import machine

from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.engine_client.connect_server import ConnectServer
from airflow_odf.odf.repo.repository import Repository
from tests.deployment.airflow_deployment import AirflowDeployment
from tests.deployment.postgres import PostgresServer

DAG = "odf_trades_pipeline"
TASKS = ("apply_manifests", "ingest_trades", "transform_daily", "verify_daily")


def _task_seconds(deployment: AirflowDeployment, run_id: str) -> dict[str, float]:
    """Each task's start to end, from the API."""
    instances = deployment.api("GET", f"dags/{DAG}/dagRuns/{run_id}/taskInstances")["task_instances"]
    return {ti["task_id"]: (_stamp(ti["end_date"]) - _stamp(ti["start_date"])) for ti in instances}


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def measure(connect_url: str, preload: bool, runs: int) -> list[tuple[float, dict[str, float]]]:
    """`runs` timed runs (after one untimed) on a deployment of its own."""
    root = Path(tempfile.mkdtemp(prefix=f"odf-bench-deployment-{'preload' if preload else 'plain'}-"))
    timed = []
    with PostgresServer() as db, AirflowDeployment(root, db.url, connect_url, preload=preload) as airflow:
        airflow.enable(DAG)
        for i in range(runs + 1):
            repo = root / f"repo{i}"
            airflow.set_repository(repo)
            start = time.monotonic()
            run_id = airflow.trigger(DAG)
            state = airflow.wait_for_runs(DAG, [run_id])[run_id]
            seconds = time.monotonic() - start
            if state != "success":
                raise SystemExit(f"run {run_id} ended {state}:\n{airflow.failures(DAG, run_id)[-4000:]}")
            table = tail(Repository.open(repo).dataset("com.example.trades"), 100)
            assert table is not None and table.num_rows == 5, "the run did not store the 5 trades"
            if i:  # the first run of a deployment is its warm-up
                timed.append((seconds, _task_seconds(airflow, run_id)))
            print(f"  {'preload' if preload else 'plain  '} run {i}: {seconds:.2f} s", flush=True)
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    server = ConnectServer("local[2]", port=0, conf={"spark.sql.shuffle.partitions": "4"})
    url = server.start()
    try:
        results = {preload: measure(url, preload, args.runs) for preload in (False, True)}
    finally:
        server.stop()
    print(
        f"\n{'variant':28s} {'median run':>10s}  runs (s)          " + "  ".join(f"{t:>15s}" for t in TASKS)
    )
    medians = {}
    for preload, timed in results.items():
        medians[preload] = statistics.median(s for s, _ in timed)
        tasks = "  ".join(f"{statistics.median(t[task] for _, t in timed):15.2f}" for task in TASKS)
        runs = ", ".join(f"{s:.2f}" for s, _ in timed)
        name = "with airflow_odf.preload" if preload else "without (baseline)"
        print(f"{name:28s} {medians[preload]:10.2f}  {runs:16s}  {tasks}")
    print(
        f"\npreload / baseline: {medians[True] / medians[False]:.2f}; target: the run <= 12 s "
        f"({'met' if medians[True] <= 12 else 'not met'})"
    )


if __name__ == "__main__":
    main()

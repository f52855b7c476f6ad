"""Two runs of the trades pipeline (example DAG 1) at once on one repository: both succeed, every trade
is there once, and the XCom says what each run committed and what the other had already done.

Each run is a `dag.test()` in its own child process with its own Airflow home and SQLite DB (as two
workers of a deployment would be), both on the session's Spark Connect server (a warm engine). The
overlap is made certain: the first answer of each run's ingest engine waits until the other run's
ingest has its own, and likewise for the transform — so both plan from the same head and commit onto
it. One moves the head; the other loses the compare-and-swap and, inside the same task try, plans
again from the winner's head. Each run has a scratch space of its own (as workers sharing no disk):
runs sharing one wait for each other's engine work instead (`chain.claims`,
tests/integration/test_overlapping_writers.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.repo.repository import Repository
from tests.airflow.test_retry_safety import AirflowHome
from tests.paths import REPO

RUNS = 2
TASKS = ("apply_manifests", "ingest_trades", "transform_daily", "verify_daily")

# The child: the engine's first answer to an ingest (a request with `read`) and to a transform (with
# `queries`) waits until every run has had its own; then one dag.test() of the trades pipeline, and
# what its tasks left in this run's DB.
CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from datetime import datetime
    from pathlib import Path

    from airflow_odf.engine.connect_runner import SparkConnectRunner

    meeting, runs = Path(os.environ["ODF_TEST_MEETING"]), int(os.environ["ODF_TEST_RUNS"])
    original = SparkConnectRunner.run
    met = set()

    def run(self, request_json, work_dir):
        response = original(self, request_json, work_dir)
        request = json.loads(request_json)
        phase = "ingest" if "read" in request else "transform" if "queries" in request else None
        if phase is not None and phase not in met:
            met.add(phase)
            folder = meeting / phase
            folder.mkdir(exist_ok=True)
            (folder / str(os.getpid())).touch()
            deadline = time.monotonic() + 300
            while len(list(folder.iterdir())) < runs and time.monotonic() < deadline:
                time.sleep(0.05)
        return response

    SparkConnectRunner.run = run

    from tests.airflow.dag_runs import load_dag, task_states, xcom

    dag = load_dag("odf_trades_pipeline.py", "odf_trades_pipeline")
    when = datetime.fromisoformat(sys.argv[1])
    run = dag.test(logical_date=when, run_after=when)
    tasks = ("apply_manifests", "ingest_trades", "transform_daily", "verify_daily")
    print("RESULT " + json.dumps({"states": task_states(run), "xcom": {t: xcom(run, t) for t in tasks}}))
    """
)


def _blocks_since(dataset: Any, head: Any) -> list[str]:
    return [str(h) for h, _ in reversed(list(dataset.iter_blocks(stop=head)))]


def test_two_overlapping_runs_of_the_trades_pipeline_both_succeed(tmp_path: Path, connect_url: str) -> None:
    homes = [AirflowHome(tmp_path / f"airflow-{i}", connect_url) for i in range(RUNS)]
    root = tmp_path / "repo"
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    children = []
    for i, home in enumerate(homes):
        env = {
            **home.env,
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags_examples"),
            "AIRFLOW_CONN_ODF_DEFAULT": json.dumps({"conn_type": "odf_repo", "host": root.as_uri()}),
            "ODF_TEST_MEETING": str(meeting),
            "ODF_TEST_RUNS": str(RUNS),
            "ODF_WORK_DIR": str(tmp_path / f"scratch-{i}"),  # no shared claims: the race is certain
        }
        children.append(
            subprocess.Popen(
                [sys.executable, "-c", CHILD, f"2024-06-0{i + 1}T00:00:00+00:00"],
                env=env,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [child.communicate(timeout=900) for child in children]
    results = []
    for child, (out, err) in zip(children, outputs, strict=True):
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert child.returncode == 0 and lines, out[-3000:] + err[-5000:]
        results.append(json.loads(lines[-1].removeprefix("RESULT ")))

    # both runs succeeded, every task of them
    for result in results:
        assert result["states"] == dict.fromkeys(TASKS, "success")

    repo = Repository.open(root)
    assert sorted(name for name, _ in repo.list()) == ["com.example.trades", "com.example.trades.daily"]
    trades, daily = repo.dataset("com.example.trades"), repo.dataset("com.example.trades.daily")
    table = tail(trades, 100)
    assert table is not None
    trade_ids = sorted(table.column("trade_id").to_pylist())
    assert trade_ids == [1001, 1002, 1003, 1004, 1005]  # each trade once (1003 is in both files)

    # the ingests: each file committed once, by one run or the other; both end at the final head
    ingests = [r["xcom"]["ingest_trades"] for r in results]
    created_at = ingests[0]["prev_head"]
    assert all(i["prev_head"] == created_at for i in ingests)
    own = [h for i in ingests for h in i["new_blocks"]]
    assert len(own) == len(set(own)) and sorted(own) == sorted(
        _blocks_since(trades, Multihash.parse(created_at))
    )
    assert all(i["new_head"] == str(trades.head()) for i in ingests)
    assert sum(i["records"] for i in ingests) == len(trade_ids)
    reconciled = [i["reconciled"] for i in ingests if "reconciled" in i]
    assert reconciled and all(r["lost_races"] >= 1 and r["heads_found"] for r in reconciled)
    added = [b.event for _, b in trades.iter_blocks() if isinstance(b.event, model.AddData)]
    assert sorted(a.new_source_state.value for a in added) == [
        "trades-2024-01-02.csv",
        "trades-2024-01-03.csv",
    ]

    # the transforms: one ExecuteTransform; the run that lost found the input processed, up to date
    transforms = [r["xcom"]["transform_daily"] for r in results]
    [winner] = [t for t in transforms if t["new_blocks"]]
    [loser] = [t for t in transforms if not t["new_blocks"]]
    assert loser["up_to_date"] and loser["new_head"] == winner["new_head"] == str(daily.head())
    assert loser["reconciled"] == {"lost_races": 1, "heads_found": [str(daily.head())]}
    assert "reconciled" not in winner
    executes = [b.event for _, b in daily.iter_blocks() if isinstance(b.event, model.ExecuteTransform)]
    assert len(executes) == 1 and str(executes[0].query_inputs[0].new_block_hash) == str(trades.head())

    for result in results:
        assert result["xcom"]["verify_daily"]["ok"]
    assert verify_integrity(trades) == [] and verify_integrity(daily) == []

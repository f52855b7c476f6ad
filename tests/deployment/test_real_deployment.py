"""The provider in a real deployment: api-server, scheduler (LocalExecutor), dag-processor and triggerer
as separate processes on PostgreSQL, runs started through the REST API, every ODF task on the warm engine.

- Example DAG 1 (`odf_trades_pipeline`) runs through the scheduler; its XComs, its assets' events
  (`odf://<dataset id>`) and the repository agree, and its ingest starts the asset-scheduled example
  DAG (`odf_asset_scheduled`) by itself, pinned to the head the ingest committed.
- A deferred sensor, waiting in the triggerer, resumes when `odf ingest` commits from the command line.
- Three runs of example DAG 1 at once all succeed, and every trade is in the dataset exactly once.
- The example DAGs that need only the repository and the warm engine, started through the REST API
  with no logical date (as the UI starts them), succeed.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from tests.deployment.airflow_deployment import AirflowDeployment
from tests.paths import REPO

PIPELINE = "odf_trades_pipeline"
ASSET_SCHEDULED = "odf_asset_scheduled"
SENSOR = "odf_deployment_sensor"
PIPELINE_TASKS = ("apply_manifests", "ingest_trades", "transform_daily", "verify_daily")
TRADE_FILES = sorted((REPO / "dags_examples" / "data").glob("trades-*.csv"))

FILLS_MANIFEST = {
    "kind": "DatasetSnapshot",
    "version": 1,
    "content": {
        "name": "com.example.fills",
        "kind": "Root",
        "metadata": [
            {
                "kind": "AddPushSource",
                "sourceName": "default",
                "read": {
                    "kind": "NdJson",
                    "schema": {
                        "fields": [
                            {"name": "event_time", "type": {"kind": "Timestamp"}},
                            {"name": "fill_id", "type": {"kind": "Int64"}},
                            {"name": "quantity", "type": {"kind": "Int64"}},
                        ]
                    },
                },
                "merge": {"kind": "Append"},
            },
            {"kind": "SetVocab", "eventTimeColumn": "event_time"},
        ],
    },
}
FILLS = [
    {"event_time": "2024-01-04T09:30:00Z", "fill_id": 1, "quantity": 100},
    {"event_time": "2024-01-04T09:31:00Z", "fill_id": 2, "quantity": 40},
]


def _trade_ids(min_quantity: int = 0) -> list[int]:
    """The ids of the trades in the example's files (a trade in two files is one: a Ledger by trade_id)."""
    ids: set[int] = set()
    for path in TRADE_FILES:
        with path.open(newline="", encoding="utf-8") as f:
            ids |= {int(t["trade_id"]) for t in csv.DictReader(f) if int(t["quantity"]) >= min_quantity}
    return sorted(ids)


def _records(dataset: Dataset) -> list[dict[str, Any]]:
    table = tail(dataset, 1000)
    return [] if table is None else sorted(table.to_pylist(), key=lambda r: r["offset"])


def _events(dataset: Dataset) -> list[tuple[str, Any]]:
    """(hash, event) of each block, oldest first."""
    return [(str(h), b.event) for h, b in reversed(list(dataset.iter_blocks()))]


def _uri(dataset: Dataset) -> str:
    return "odf://" + str(dataset.state().dataset_id).removeprefix("did:odf:")


def _odf(*args: str | Path, cwd: Path) -> str:
    """`odf ARGS` in a child process, as a person at a shell would run it; its output."""
    done = subprocess.run(
        [sys.executable, "-m", "airflow_odf.cli", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"odf {' '.join(map(str, args))}: {done.stdout}{done.stderr}"
    return done.stdout


def _run_pipeline(airflow: AirflowDeployment, runs: int) -> tuple[dict[str, str], float]:
    """Starts `runs` runs of example DAG 1 at once: each run's final state, and the seconds from the
    first trigger call until the last run finished."""
    started = time.monotonic()
    run_ids = [airflow.trigger(PIPELINE) for _ in range(runs)]
    states = airflow.wait_for_runs(PIPELINE, run_ids)
    return states, time.monotonic() - started


def test_trades_pipeline_through_the_scheduler_starts_the_asset_scheduled_dag(
    airflow: AirflowDeployment, tmp_path: Path, record_property: Any
) -> None:
    root = tmp_path / "repo"
    airflow.set_repository(root)
    airflow.enable(PIPELINE, ASSET_SCHEDULED)

    states, seconds = _run_pipeline(airflow, 1)
    [(run_id, state)] = states.items()
    record_property("trades_pipeline_seconds", round(seconds, 2))
    print(f"\n{PIPELINE} through the scheduler, trigger to success: {seconds:.1f} s")
    print(airflow.timeline(PIPELINE, run_id))
    assert state == "success", airflow.failures(PIPELINE, run_id)
    assert airflow.task_states(PIPELINE, run_id) == dict.fromkeys(PIPELINE_TASKS, "success")

    # the repository: every trade once, offsets from 0
    repo = Repository.open(root)
    trades, daily = repo.dataset("com.example.trades"), repo.dataset("com.example.trades.daily")
    records = _records(trades)
    assert [r["offset"] for r in records] == list(range(len(_trade_ids())))
    assert sorted(r["trade_id"] for r in records) == _trade_ids()
    added = [e for _, e in _events(trades) if isinstance(e, model.AddData)]
    assert len(added) == len(TRADE_FILES)  # FilesGlob: one block per file

    # XCom: what each task committed, the transform pinned to the ingest's head
    ingested = airflow.xcom(PIPELINE, run_id, "ingest_trades")
    assert ingested["dataset_id"] == str(trades.state().dataset_id)
    assert ingested["new_head"] == str(trades.head()) and ingested["records"] == len(_trade_ids())
    transformed = airflow.xcom(PIPELINE, run_id, "transform_daily")
    assert transformed["new_head"] == str(daily.head()) and transformed["records"] == len(_records(daily))
    execute = daily.block(daily.head()).event
    assert isinstance(execute, model.ExecuteTransform)
    assert str(execute.query_inputs[0].new_block_hash) == ingested["new_head"]
    verified = airflow.xcom(PIPELINE, run_id, "verify_daily")
    assert verified["ok"] and verified["reproducibility"] == "checked"

    # assets: one event per committing task, on odf://<dataset id>, carrying the new head
    events = {e["source_task_id"]: e for e in airflow.asset_events(PIPELINE, run_id)}
    assert set(events) == {"ingest_trades", "transform_daily"}
    assert events["ingest_trades"]["uri"] == _uri(trades)
    assert events["ingest_trades"]["extra"] == {
        "head": ingested["new_head"],
        "prev_head": ingested["prev_head"],
    }
    assert events["transform_daily"]["uri"] == _uri(daily)
    assert events["transform_daily"]["extra"]["head"] == transformed["new_head"]

    # the ingest's event started the asset-scheduled DAG, which processed exactly that head
    def started_run() -> list[dict[str, Any]]:
        [event] = [
            e for e in airflow.asset_events(PIPELINE, run_id) if e["source_task_id"] == "ingest_trades"
        ]
        return event["created_dagruns"]

    [created] = airflow.wait_for(started_run, f"the ingest's event to start {ASSET_SCHEDULED}", timeout=60)
    assert created["dag_id"] == ASSET_SCHEDULED
    follower = created["run_id"]
    assert airflow.wait_for_runs(ASSET_SCHEDULED, [follower]) == {follower: "success"}, airflow.failures(
        ASSET_SCHEDULED, follower
    )
    assert airflow.run(ASSET_SCHEDULED, follower)["run_type"] == "asset_triggered"
    print(airflow.timeline(ASSET_SCHEDULED, follower))
    large = Repository.open(root).dataset("com.example.trades.large")
    assert airflow.xcom(ASSET_SCHEDULED, follower, "transform_large_trades")["new_head"] == str(large.head())
    execute = large.block(large.head()).event
    assert isinstance(execute, model.ExecuteTransform)
    assert str(execute.query_inputs[0].new_block_hash) == ingested["new_head"]
    assert sorted(r["trade_id"] for r in _records(large)) == _trade_ids(min_quantity=100)


def test_a_deferred_sensor_resumes_on_a_commit_from_the_command_line(
    airflow: AirflowDeployment, tmp_path: Path, connect_url: str
) -> None:
    root = tmp_path / "repo"
    airflow.set_repository(root)
    manifest = tmp_path / "com.example.fills.yaml"
    manifest.write_text(json.dumps(FILLS_MANIFEST), encoding="utf-8")  # JSON is YAML
    _odf("init", "--repo", root, cwd=tmp_path)
    _odf("add", "--repo", root, manifest, cwd=tmp_path)
    fills = Repository.open(root).dataset("com.example.fills")
    known = str(fills.head())

    airflow.enable(SENSOR)
    run_id = airflow.trigger(SENSOR, conf={"dataset": "com.example.fills", "known_head": known})
    airflow.wait_for(
        lambda: airflow.task_states(SENSOR, run_id).get("wait_for_head") == "deferred",
        "the sensor to defer to the triggerer",
        timeout=90,
        every=0.5,
    )

    data = tmp_path / "fills.ndjson"
    data.write_text("".join(json.dumps(r) + "\n" for r in FILLS), encoding="utf-8")
    _odf(
        "ingest", "com.example.fills", data, "--repo", root,
        "--engine", "spark-connect", "--remote", connect_url,
        cwd=tmp_path,
    )  # fmt: skip
    head = str(fills.head())
    assert head != known

    assert airflow.wait_for_runs(SENSOR, [run_id], timeout=120) == {run_id: "success"}, airflow.failures(
        SENSOR, run_id
    )
    assert airflow.xcom(SENSOR, run_id, "wait_for_head") == {
        "dataset": "com.example.fills",
        "dataset_id": str(fills.state().dataset_id),
        "head": head,
        "prev_head": known,
    }
    assert [(r["offset"], r["fill_id"]) for r in _records(fills)] == [(0, 1), (1, 2)]


def test_three_concurrent_runs_of_the_trades_pipeline_all_succeed_without_duplicates(
    airflow: AirflowDeployment, tmp_path: Path, record_property: Any
) -> None:
    """Issue 25, item 2: writers that lose the compare-and-swap to another run re-plan and succeed."""
    root = tmp_path / "repo"
    airflow.set_repository(root)
    airflow.pause(ASSET_SCHEDULED)  # only the three runs write this repository
    airflow.enable(PIPELINE)

    states, seconds = _run_pipeline(airflow, 3)
    record_property("three_concurrent_runs_seconds", round(seconds, 2))
    print(f"\nthree concurrent runs of {PIPELINE}, first trigger to last success: {seconds:.1f} s")
    for run_id in states:
        print(airflow.timeline(PIPELINE, run_id))

    repo = Repository.open(root)
    trades, daily = repo.dataset("com.example.trades"), repo.dataset("com.example.trades.daily")
    trade_ids = [r["trade_id"] for r in _records(trades)]
    assert sorted(trade_ids) == _trade_ids()  # each trade once
    assert len([e for _, e in _events(trades) if isinstance(e, model.AddData)]) == len(TRADE_FILES)
    days = [(r["event_time"], r["symbol"]) for r in _records(daily)]
    assert len(days) == len(set(days))  # each input block transformed once

    failed = [airflow.failures(PIPELINE, r) for r, s in states.items() if s != "success"]
    assert not failed, "\n".join(failed)
    # each run's ingest reported what it committed itself: together, every block of the data once
    committed = [h for r in states for h in airflow.xcom(PIPELINE, r, "ingest_trades")["new_blocks"]]
    data_blocks = [h for h, e in _events(trades) if isinstance(e, model.AddData)]
    assert set(data_blocks) <= set(committed) and len(committed) == len(set(committed))


# example DAGs started by hand that need nothing but the repository and the warm engine; the compaction
# runs last, over what the others ingested
STARTED_BY_HAND = ("odf_sql_report", "odf_factory_weather", "odf_warm_engine")
AFTERWARDS = ("odf_compaction",)


def test_example_dags_started_through_the_rest_api_without_a_logical_date_succeed(
    airflow: AirflowDeployment, tmp_path: Path, connect_url: str
) -> None:
    """Issue 36: a run started from the UI or the REST API has no logical date, and `odf_sql_report`'s
    `{{ ds }}` failed every such run (3 tries over 650 s) while `dag.test()`, which sets one, passed."""
    root = tmp_path / "repo"
    airflow.set_repository(root)
    host, port = connect_url.removeprefix("sc://").rsplit(":", 1)
    airflow.set_connection("spark_connect_default", "spark_connect", host=f"sc://{host}", port=int(port))
    airflow.pause(ASSET_SCHEDULED)  # only these runs write this repository
    airflow.enable(*STARTED_BY_HAND, *AFTERWARDS)
    reports = tmp_path / "reports"

    runs: dict[str, str] = {}
    for batch in (STARTED_BY_HAND, AFTERWARDS):
        started = {
            dag_id: airflow.trigger(
                dag_id, conf={"report_dir": str(reports)} if dag_id == "odf_sql_report" else None
            )
            for dag_id in batch
        }
        for dag_id, run_id in started.items():
            states = airflow.wait_for_runs(dag_id, [run_id], timeout=600)
            assert states == {run_id: "success"}, airflow.failures(dag_id, run_id)
        runs.update(started)

    report_run = airflow.run("odf_sql_report", runs["odf_sql_report"])
    assert report_run["logical_date"] is None
    day = datetime.fromisoformat(report_run["run_after"]).strftime("%Y-%m-%d")
    with (reports / f"trades-{day}.csv").open(newline="", encoding="utf-8") as f:
        assert sorted(int(r["quantity"]) for r in csv.DictReader(f)) == sorted(
            int(r["quantity"]) for r in _records(Repository.open(root).dataset("com.example.trades"))
        )
    # the compaction merged the slices the ingests left (one per file) and checked every record
    compacted = airflow.xcom("odf_compaction", runs["odf_compaction"], "compact_trades")
    assert compacted["verified"] and compacted["slices_after"] < compacted["slices_before"]
    # enabled, the weekly compaction also scheduled a run of its own: none may outlive this test
    airflow.pause_and_settle(*STARTED_BY_HAND, *AFTERWARDS)

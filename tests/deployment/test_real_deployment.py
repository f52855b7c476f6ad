"""The provider in a real deployment: api-server, scheduler (LocalExecutor), dag-processor and triggerer
as separate processes on PostgreSQL, runs started through the REST API, every ODF task on the warm engine.

- Example DAG 1 (`odf_trades_pipeline`) runs through the scheduler; its XComs, its assets' events
  (`odf://<dataset id>`) and the repository agree, and its ingest starts the asset-scheduled example
  DAG (`odf_asset_scheduled`) by itself, pinned to the head the ingest committed.
- A deferred sensor, waiting in the triggerer, resumes when `odf ingest` commits from the command line.
- Three runs of example DAG 1 at once all succeed, and every trade is in the dataset exactly once.
- The example DAGs that need only the repository and the warm engine, started through the REST API
  with no logical date (as the UI starts them), succeed.
- Quality gate (issue 36): a push whose checks pass commits, its XCom and its OpenLineage COMPLETE
  event carry the checks' results, and its asset event starts the follower DAG; a push whose checks fail
  fails at once (try 1 of 3), leaves the head where it was, emits no asset event, so the follower gets
  no run, the failing rows are in the task log read through the REST API, and its FAIL event carries the
  failed assertions without an output version.
- A Spark Connect server restarted while a task's request runs on it: the first try fails in one line
  naming the server, Airflow retries it, and the retry commits the data exactly once.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.engine_client.connect_server import ConnectServer, free_port
from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import load_manifests
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.operators.base import RUN_EXTRA_KEY
from tests.deployment.airflow_deployment import AirflowDeployment, DeploymentError
from tests.integration.test_connect_failures import STOPPED_PROBLEMS
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
        try:
            events = airflow.asset_events(PIPELINE, run_id)
        except DeploymentError:  # Airflow 3.3's endpoint fails (500) while a created run has not started
            return []
        [event] = [e for e in events if e["source_task_id"] == "ingest_trades"]
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


GATE, GATE_FOLLOWER = "odf_deployment_gate", "odf_deployment_gate_follower"
RESTART = "odf_deployment_restart"


def _csv_root(name: str, columns: list[str]) -> dict[str, Any]:
    """The manifest of a root dataset with a CSV push source of `columns` (DDL)."""
    source = {"kind": "Csv", "header": True, "ddlSchema": columns}
    return {
        "kind": "DatasetSnapshot",
        "version": 1,
        "content": {
            "name": name,
            "kind": "Root",
            "metadata": [
                {
                    "kind": "AddPushSource",
                    "sourceName": "default",
                    "read": source,
                    "merge": {"kind": "Append"},
                }
            ],
        },
    }


def _new_repository(root: Path, manifest: dict[str, Any]) -> Dataset:
    """A repository at `root` holding the dataset of `manifest` (JSON is YAML)."""
    repo = Repository.init(root)
    [snapshot] = load_manifests(json.dumps(manifest))
    repo.add(snapshot.content)
    return repo.dataset(manifest["content"]["name"])


def _assertions(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The dataQualityAssertions of a task's `checks` (docs/lineage.md), as the file transport writes them."""
    return [
        {
            "assertion": c["check"],
            "success": c["success"],
            **({"column": c["column"]} if c["column"] else {}),
            "severity": "error",
            "name": c["name"],
            "expected": c["expected"],
            "actual": json.dumps(c["observed"]),
            "params": {},
        }
        for c in checks
    ]


def test_a_failing_check_stops_the_slice_and_the_follower_and_a_passing_one_reports_its_checks(
    airflow: AirflowDeployment, tmp_path: Path
) -> None:
    """Issue 36, quality gates in a real deployment."""
    root = tmp_path / "repo"
    readings = _new_repository(
        root, _csv_root("com.example.gate.readings", ["meter_id STRING", "kwh DOUBLE"])
    )
    airflow.set_repository(root)
    airflow.enable(GATE, GATE_FOLLOWER)
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text("meter_id,kwh\nM-001,12.5\nM-002,7.25\n", encoding="utf-8")
    bad.write_text("meter_id,kwh\nM-003,-4.0\n,3.5\nM-004,1.0\n", encoding="utf-8")
    job = f"{GATE}.push"

    # the passing push: committed, its checks in the XCom and in OpenLineage, the follower started
    run_id = airflow.trigger(GATE, conf={"file": str(good)})
    assert airflow.wait_for_runs(GATE, [run_id]) == {run_id: "success"}, airflow.failures(GATE, run_id)
    pushed = airflow.xcom(GATE, run_id, "push")
    head = str(readings.head())
    assert pushed["new_head"] == head and pushed["records"] == 2 == readings.state().num_records
    assert [(c["name"], c["column"], c["success"], c["observed"]) for c in pushed["checks"]] == [
        ("meter_id.null_check", "meter_id", True, 0),
        ("kwh.min", "kwh", True, 7.25),
        ("not_empty", None, True, 1),
    ]
    [complete] = airflow.wait_for(lambda: airflow.openlineage_events(job, "COMPLETE"), "the COMPLETE event")
    [output] = complete["outputs"]
    assert (output["namespace"], output["name"]) == ("odf", _uri(readings).removeprefix("odf://"))
    assert output["facets"]["version"]["datasetVersion"] == head
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 2
    assert output["facets"]["dataQualityAssertions"]["assertions"] == _assertions(pushed["checks"])

    def follower_runs() -> list[dict[str, Any]]:
        # (not the event's created_dagruns: Airflow 3.3's endpoint fails on a run not yet started)
        return airflow.api("GET", f"dags/{GATE_FOLLOWER}/dagRuns")["dag_runs"]

    [created] = airflow.wait_for(follower_runs, f"the push's event to start {GATE_FOLLOWER}", timeout=60)
    follower = created["dag_run_id"]
    assert created["run_type"] == "asset_triggered"
    assert airflow.wait_for_runs(GATE_FOLLOWER, [follower]) == {follower: "success"}
    assert airflow.xcom(GATE_FOLLOWER, follower, "heads_seen") == [head]
    [event] = airflow.asset_events(GATE, run_id)  # once the run it started has started
    assert (event["uri"], event["extra"]["head"]) == (_uri(readings), head)
    assert [r["run_id"] for r in event["created_dagruns"]] == [follower]

    # the failing push: try 1 of 3 failed for good, nothing committed, no event, no follower run
    run_id = airflow.trigger(GATE, conf={"file": str(bad), "event_time": "2024-02-03T00:00:00Z"})
    assert airflow.wait_for_runs(GATE, [run_id]) == {run_id: "failed"}
    ti = airflow.task_instance(GATE, run_id, "push")
    assert (ti["state"], ti["try_number"], ti["max_tries"]) == ("failed", 1, 2)  # retries left, none made
    assert str(readings.head()) == head and readings.state().num_records == 2
    assert airflow.asset_events(GATE, run_id) == []
    assert airflow.queued_asset_events(GATE_FOLLOWER) == []  # nothing for the scheduler to start
    runs = airflow.api("GET", f"dags/{GATE_FOLLOWER}/dagRuns")["dag_runs"]
    assert [r["dag_run_id"] for r in runs] == [follower]

    log = airflow.task_log_through_the_api(GATE, run_id, "push", 1)
    for line in (
        "com.example.gate.readings: 2 of 3 check(s) failed; nothing was committed",
        "check 'meter_id.null_check' (null_check of meter_id) failed: observed 1, expected equal_to 0; "
        "1 failing row(s) shown",
        "check 'kwh.min' (min of kwh) failed: observed -4.0, expected geq_to 0; 1 failing row(s) shown",
        "failing rows of 'meter_id.null_check':",
        "failing rows of 'kwh.min':",
    ):
        assert line in log, log[-4000:]
    rows = [json.loads(line) for line in log.splitlines() if line.startswith("  {")]
    assert [(r["offset"], r["meter_id"], r["kwh"]) for r in rows] == [(3, None, 3.5), (2, "M-003", -4.0)]

    [fail] = airflow.wait_for(lambda: airflow.openlineage_events(job, "FAIL"), "the FAIL event")
    [output] = fail["outputs"]
    assert "version" not in output["facets"] and "outputStatistics" not in output.get("outputFacets", {})
    assertions = output["facets"]["dataQualityAssertions"]["assertions"]
    assert [(a["name"], a["success"], a["actual"]) for a in assertions] == [
        ("meter_id.null_check", False, "1"),
        ("kwh.min", False, "-4.0"),
        ("not_empty", True, "1"),
    ]
    airflow.pause_and_settle(GATE, GATE_FOLLOWER)


RESTART_ROWS = 200_000  # enough work that the request still runs when the server is restarted


def test_a_connect_server_restarted_during_a_task_is_retried_to_success(
    airflow: AirflowDeployment, tmp_path: Path
) -> None:
    """Issue 36: restarting the warm engine failed every task in flight for good, with a Java stack. The
    server here is this test's own (restarting the session's would disturb the other tests), its Spark
    UI on so that the test sees the first try's job running before it restarts the server."""
    root = tmp_path / "repo"
    rows = _new_repository(root, _csv_root("com.example.restart.rows", ["id BIGINT", "name STRING"]))
    data = tmp_path / "rows.csv"
    with data.open("w", encoding="utf-8") as f:
        f.write("id,name\n")
        f.writelines(f"{i},name-{i % 1000}\n" for i in range(RESTART_ROWS))
    ui = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    server = ConnectServer(
        "local[2]",
        port=free_port("127.0.0.1"),
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "true",
            "spark.ui.port": ui.rsplit(":", 1)[1],
        },
    )
    server.start()
    try:
        airflow.set_repository(root)
        airflow.set_connection("odf_restart_connect", "spark_connect", host="127.0.0.1", port=server.port)
        airflow.enable(RESTART)
        run_id = airflow.trigger(RESTART, conf={"file": str(data)})

        def job_running() -> bool:
            try:
                [app] = httpx.get(f"{ui}/api/v1/applications", timeout=5).json()
                jobs = httpx.get(f"{ui}/api/v1/applications/{app['id']}/jobs", timeout=5).json()
            except (httpx.HTTPError, ValueError):
                return False
            return any(j["status"] == "RUNNING" for j in jobs)

        airflow.wait_for(job_running, "the first try's job on the server", timeout=300)
        server.stop()  # SIGTERM, as a restart stops it
        server.start()  # on the same port: the connection's URL
        assert airflow.wait_for_runs(RESTART, [run_id], timeout=600) == {run_id: "success"}, airflow.failures(
            RESTART, run_id
        )
    finally:
        server.stop()
        airflow.pause(RESTART)

    # try 1 failed in one line naming the server; a retry that came while the server was still
    # starting failed at once, naming it too; the last one succeeded
    tries = airflow.task_instance(RESTART, run_id, "push")["try_number"]
    print(f"\n{RESTART}: {tries} tries")
    prefix = f"AirflowException: com.example.restart.rows: Spark Connect server {re.escape(server.url)}: "
    for try_number in range(1, tries):
        log = airflow.task_log_through_the_api(RESTART, run_id, "push", try_number)
        problem = STOPPED_PROBLEMS if try_number == 1 else "no server answered within 5 s; .*"
        failures = [line for line in log.splitlines() if line.startswith("AirflowException: ")]
        assert len(failures) == 1 and re.fullmatch(prefix + problem, failures[0]), log[-4000:]
        assert "java.lang." not in log  # no Java stack
    assert 2 <= tries <= 4

    # committed exactly once, by the retry: one AddData of every row, marked with this task run
    pushed = airflow.xcom(RESTART, run_id, "push")
    added = [e for _, e in _events(rows) if isinstance(e, model.AddData)]
    assert len(added) == 1 and added[0].new_data is not None
    assert added[0].new_data.offset_interval == model.OffsetInterval(start=0, end=RESTART_ROWS - 1)
    assert added[0].extra[RUN_EXTRA_KEY] == f"{RESTART}/{run_id}/push"
    assert pushed["records"] == RESTART_ROWS and pushed["new_head"] == str(rows.head())


# example DAGs that fail one task on purpose (a check, a schema change): started through the REST API with
# no logical date, they must fail there and only there, at the first try, for the reason they show
FAILING_ON_PURPOSE = {"odf_quality_gate": "push_negative", "odf_schema_violation": "push_renamed"}
DATASET_OF = {"odf_quality_gate": "com.example.readings", "odf_schema_violation": "com.example.meters"}


def test_example_dags_that_fail_on_purpose_fail_only_there_without_a_logical_date(
    airflow: AirflowDeployment, tmp_path: Path
) -> None:
    root = tmp_path / "repo"
    airflow.set_repository(root)
    airflow.pause(ASSET_SCHEDULED)  # only these runs write this repository
    airflow.enable(*FAILING_ON_PURPOSE)
    runs = {dag_id: airflow.trigger(dag_id) for dag_id in FAILING_ON_PURPOSE}
    for dag_id, run_id in runs.items():
        assert airflow.wait_for_runs(dag_id, [run_id], timeout=600) == {run_id: "failed"}
        assert airflow.run(dag_id, run_id)["logical_date"] is None
        failing = FAILING_ON_PURPOSE[dag_id]
        states = airflow.task_states(dag_id, run_id)
        assert states == {"apply_manifests": "success", "push_readings": "success", failing: "failed"}, (
            airflow.failures(dag_id, run_id)
        )
        assert airflow.task_instance(dag_id, run_id, failing)["try_number"] == 1  # no retry: bad data
        # the first push committed, the refused one nothing
        dataset = Repository.open(root).dataset(DATASET_OF[dag_id])
        assert airflow.xcom(dag_id, run_id, "push_readings")["new_head"] == str(dataset.head())
    airflow.pause_and_settle(*FAILING_ON_PURPOSE)


def test_the_sharing_example_started_without_a_logical_date_publishes_pulls_and_verifies(
    airflow: AirflowDeployment, tmp_path: Path, moto_endpoint: str, s3_bucket: str
) -> None:
    """Example DAG 6 through the REST API: published to an S3 repository (moto), pulled into a replica
    with every head's signature required, and the replica's transform replayed."""
    from tests.sharing.conftest import ACCESS_KEY, REGION, SECRET_KEY

    root, replica_root = tmp_path / "repo", tmp_path / "replica"
    airflow.set_repository(root)
    extra = {
        "endpoint_url": moto_endpoint,
        "aws_access_key_id": ACCESS_KEY,
        "aws_secret_access_key": SECRET_KEY,
        "region_name": REGION,
    }
    airflow.set_connection("odf_s3", "odf_repo", host=f"s3://{s3_bucket}/odf", extra=json.dumps(extra))
    airflow.set_connection("odf_replica", "odf_repo", host=replica_root.as_uri())
    airflow.pause(ASSET_SCHEDULED)  # only this run writes these repositories
    airflow.enable("odf_sharing")
    run_id = airflow.trigger("odf_sharing")
    states = airflow.wait_for_runs("odf_sharing", [run_id], timeout=600)
    assert states == {run_id: "success"}, airflow.failures("odf_sharing", run_id)
    assert airflow.run("odf_sharing", run_id)["logical_date"] is None
    origin, replica = Repository.open(root), Repository.open(replica_root)
    for name in ("com.example.trades", "com.example.trades.daily"):
        assert replica.dataset(name).head() == origin.dataset(name).head()
        assert _records(replica.dataset(name)) == _records(origin.dataset(name))
    verified = airflow.xcom("odf_sharing", run_id, "verify_replica")
    assert verified["ok"] and verified["reproducibility"] == "checked"
    airflow.pause_and_settle("odf_sharing")

"""A killed-and-retried task adds no duplicate data.

Real crashes, real retries: Airflow runs in child processes (their own AIRFLOW_HOME, SQLite DB and
DAGS_FOLDER holding a small DAG: apply manifests >> polling ingest >> push ingest >> transform), and a
worker dies by SIGKILL the instant the chosen dataset's head has moved — the commit landed, nothing was
reported (no XCom, the task instance still `running`). The crash is injected into the repository's
object store,
the only place that knows the head moved. The next child does what the scheduler does with a task
whose worker vanished (it becomes `up_for_retry`) and carries on with the same DAG run: the killed
task gets its next try with the same dag / run / task ids, then its downstream runs.

- Polling ingest: the retry finds the earlier commit through the run marker in the AddData `extra`,
  pulls on from the source state it recorded (only what was not ingested) and reports both parts.
- Push ingest: the retry finds its first try's commit the same way and returns exactly that commit;
  the data is there once and the transform pins to it.
- Transform: the retry, pinned to the same input heads, finds them consumed and adds nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.operators.base import RUN_EXTRA_KEY
from tests.airflow_db import fresh_db
from tests.connections import spark_connect_conn
from tests.paths import REPO

DAG_ID = "odf_retry_safety"
LOGICAL_DATE = "2024-03-01T00:00:00+00:00"

DAG_FILE = textwrap.dedent(
    '''
    """Written by tests/airflow/test_retry_safety.py: apply >> polling ingest >> push ingest >> transform."""
    from __future__ import annotations

    import os
    from datetime import datetime, timedelta

    from airflow.sdk import dag

    from airflow_odf.operators.ingest import OdfIngestOperator, OdfPushIngestOperator
    from airflow_odf.operators.manifest import OdfApplyManifestOperator
    from airflow_odf.operators.transform import OdfTransformOperator


    @dag(
        schedule=None,
        start_date=datetime(2024, 1, 1),
        catchup=False,
        default_args={"retries": 3, "retry_delay": timedelta(0)},
    )
    def odf_retry_safety() -> None:
        apply = OdfApplyManifestOperator(
            task_id="apply", manifests=os.environ["ODF_TEST_MANIFESTS"], create_repository=True
        )
        poll = OdfIngestOperator(
            task_id="poll", dataset="retry.polled", source_dir=os.environ["ODF_TEST_SOURCE_DIR"]
        )
        push = OdfPushIngestOperator(
            task_id="push", dataset="retry.events", files=[os.environ["ODF_TEST_FILE"]]
        )
        doubled = OdfTransformOperator(task_id="transform", dataset="retry.doubled")
        apply >> poll >> push >> doubled


    odf_retry_safety()
    '''
)


def _root_manifest(name: str, source: dict[str, Any]) -> str:
    """A root of NDJSON (event_time, city, amount) records, appended, through the given source event."""
    read = {
        "kind": "NdJson",
        "schema": {
            "fields": [
                {"name": "event_time", "type": {"kind": "Timestamp"}},
                {"name": "city", "type": {"kind": "String"}},
                {"name": "amount", "type": {"kind": "Int64"}},
            ]
        },
    }
    metadata = [
        {**source, "read": read, "merge": {"kind": "Append"}},
        {"kind": "SetVocab", "eventTimeColumn": "event_time"},
    ]
    snapshot = {
        "kind": "DatasetSnapshot",
        "version": 1,
        "content": {"name": name, "kind": "Root", "metadata": metadata},
    }
    return json.dumps(snapshot, indent=2)  # JSON is YAML


ROOT_MANIFEST = _root_manifest("retry.events", {"kind": "AddPushSource", "sourceName": "default"})
POLLED_MANIFEST = _root_manifest(
    "retry.polled",
    {
        "kind": "SetPollingSource",
        "fetch": {"kind": "FilesGlob", "path": "polled-*.ndjson", "order": "ByName"},
    },
)

DERIVATIVE_MANIFEST = textwrap.dedent(
    """
    kind: DatasetSnapshot
    version: 1
    content:
      name: retry.doubled
      kind: Derivative
      metadata:
      - kind: SetTransform
        inputs:
        - datasetRef: retry.events
          alias: events
        transform:
          kind: Sql
          engine: spark
          query: SELECT event_time, city, amount * 2 AS doubled FROM events
      - kind: SetVocab
        eventTimeColumn: event_time
    """
)

ROWS = [
    {"event_time": "2024-03-01T10:00:00Z", "city": "Oslo", "amount": 3},
    {"event_time": "2024-03-01T11:00:00Z", "city": "Lima", "amount": 5},
    {"event_time": "2024-03-01T12:00:00Z", "city": "Pune", "amount": 7},
]

# The child: optionally arm the crash, then either start the DAG run of LOGICAL_DATE with dag.test(),
# or resume that run as the scheduler would after its worker died, and print what the DB holds.
# (dag.test() cannot retry: it deletes an existing run of the same logical date and starts afresh.)
CHILD = textwrap.dedent(
    """
    import importlib.util, json, os, signal, sys
    from datetime import datetime

    kill_alias, mode = sys.argv[1], sys.argv[2]

    if kill_alias:
        from airflow_odf.odf.storage.local import LocalObjectStore

        original = LocalObjectStore.compare_and_swap

        def compare_and_swap_then_die(self, key, expected, new):
            original(self, key, expected, new)
            if key == "refs/head" and self.get_or_none("info/alias") == kill_alias.encode():
                os.kill(os.getpid(), signal.SIGKILL)  # the worker dies: head moved, nothing reported

        LocalObjectStore.compare_and_swap = compare_and_swap_then_die

    from airflow.models.dagrun import DagRun
    from airflow.sdk import timezone
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState

    from tests.airflow.dag_runs import xcom

    path = os.path.join(os.environ["AIRFLOW__CORE__DAGS_FOLDER"], "odf_retry_safety.py")
    spec = importlib.util.spec_from_file_location("odf_retry_safety_dag", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = module.odf_retry_safety()
    when = datetime.fromisoformat(os.environ["ODF_TEST_LOGICAL_DATE"])

    if mode == "first":
        run = dag.test(logical_date=when, run_after=when)
    else:
        with create_session() as session:
            run = session.query(DagRun).filter(DagRun.dag_id == dag.dag_id).one()
            run.dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
            # the scheduler's verdict on a running task whose worker stopped heart-beating
            for ti in run.get_task_instances(session=session):
                if ti.state == TaskInstanceState.RUNNING:
                    ti.state, ti.end_date = TaskInstanceState.UP_FOR_RETRY, timezone.utcnow()
            session.commit()
            # then the loop of dag.test() over this run: schedule what is ready (a retry is the
            # next try number), run each through the same in-process task runner
            while run.state == DagRunState.RUNNING:
                session.expire_all()
                schedulable, _ = run.update_state(session=session)
                for ti in schedulable:
                    ti.try_number += 1
                    ti.state = TaskInstanceState.SCHEDULED
                session.commit()
                for ti in run.get_task_instances(session=session):
                    if ti.state == TaskInstanceState.SCHEDULED:
                        _run_task(ti=ti, task=dag.task_dict[ti.task_id])
    with create_session() as session:
        tis = {
            ti.task_id: {"state": str(ti.state), "try_number": ti.try_number}
            for ti in run.get_task_instances(session=session)
        }
    out = {"run_id": run.run_id, "tis": tis, "xcom": {t: xcom(run, t) for t in ("poll", "push", "transform")}}
    print("RESULT " + json.dumps(out))
    """
)


class AirflowHome:
    """An isolated Airflow deployment for the child processes: home, SQLite DB, DAGS_FOLDER. Its tasks
    run their engine requests in their own local SparkSession, or on the Spark Connect server at
    `connect_url` (the `spark_default` connection; a JVM start per child process spared)."""

    def __init__(self, root: Path, connect_url: str | None = None) -> None:
        self.root = root
        self.dags = root / "dags"
        self.dags.mkdir(parents=True)
        (self.dags / "odf_retry_safety.py").write_text(DAG_FILE, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ODF_TEST"))}
        self.env = {
            **env,
            "AIRFLOW_HOME": str(root / "home"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "ODF_TEST_LOGICAL_DATE": LOGICAL_DATE,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        if connect_url is None:
            self.env["AIRFLOW__ODF__DEFAULT_ENGINE"] = "local"
        else:
            self.env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(spark_connect_conn(connect_url))
        fresh_db(root / "home" / "airflow.db")  # what `airflow db migrate` makes, copied

    def dag_run(self, repo: Path, data: Path, *, kill: str = "", retry: bool = False) -> Any:
        """One `dag.test()` of the DAG run in a child process; its result, or the CompletedProcess."""
        manifests = repo.parent / "manifests"
        manifests.mkdir(exist_ok=True)
        (manifests / "retry.events.yaml").write_text(ROOT_MANIFEST, encoding="utf-8")
        (manifests / "retry.doubled.yaml").write_text(DERIVATIVE_MANIFEST, encoding="utf-8")
        (manifests / "retry.polled.yaml").write_text(POLLED_MANIFEST, encoding="utf-8")
        env = {
            **self.env,
            "AIRFLOW_CONN_ODF_DEFAULT": json.dumps({"conn_type": "odf_repo", "host": repo.as_uri()}),
            "ODF_TEST_MANIFESTS": str(manifests),
            "ODF_TEST_FILE": str(data),
            "ODF_TEST_SOURCE_DIR": str(data.parent),
        }
        done = subprocess.run(
            [sys.executable, "-c", CHILD, kill, "retry" if retry else "first"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if kill:
            return done
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
        return json.loads(lines[-1].removeprefix("RESULT "))


def _input_file(tmp_path: Path) -> Path:
    """The pushed file; beside it the two files of the polling source (one AddData each)."""
    data = tmp_path / "events.ndjson"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    (tmp_path / "polled-1.ndjson").write_text("".join(json.dumps(r) + "\n" for r in ROWS[:2]))
    (tmp_path / "polled-2.ndjson").write_text(json.dumps(ROWS[2]) + "\n")
    return data


def _chain(repo: Path, name: str) -> list[tuple[str, Any]]:
    """(hash, event) of the dataset's blocks, oldest first."""
    dataset = Repository.open(repo).dataset(name)
    return [(str(h), b.event) for h, b in reversed(list(dataset.iter_blocks()))]


def _rows(repo: Path, name: str) -> list[tuple[Any, ...]]:
    table = tail(Repository.open(repo).dataset(name), 100)
    assert table is not None
    rows = table.to_pylist()
    keys = [k for k in ("city", "amount", "doubled") if k in rows[0]]
    return sorted((r["offset"], *(r[k] for k in keys)) for r in rows)


def _killed(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == -signal.SIGKILL, done.stdout[-3000:] + done.stderr[-5000:]
    assert "RESULT " not in done.stdout


def test_killed_ingests_and_transform_are_retried_without_duplicates(
    tmp_path: Path, connect_url: str
) -> None:
    """One DAG run, four worker processes, each killed right after a commit of the next task:
    the polling ingest (after the first of its two files), the push ingest, the transform. The
    engine is the session's Spark Connect server, which outlives the killed workers (as a warm
    engine does): what is proven is the core's, the same on every engine."""
    airflow_home = AirflowHome(tmp_path / "airflow", connect_url)
    repo, data = tmp_path / "repo", _input_file(tmp_path)

    # 1. the polling ingest commits its first file; the worker dies before anything is reported
    _killed(airflow_home.dag_run(repo, data, kill="retry.polled"))
    polled_first = _chain(repo, "retry.polled")
    added = [e for _, e in polled_first if isinstance(e, model.AddData)]
    assert len(added) == 1 and added[0].new_source_state.value == "polled-1.ndjson"
    poll_marker = added[0].extra[RUN_EXTRA_KEY]
    assert poll_marker.startswith(f"{DAG_ID}/") and poll_marker.endswith("/poll")
    poll_schema = next(i for i, (_, e) in enumerate(polled_first) if isinstance(e, model.SetDataSchema))

    # 2. its retry pulls on from the recorded source state: the second file only; then the push ingest
    # commits and its worker dies
    _killed(airflow_home.dag_run(repo, data, kill="retry.events", retry=True))
    polled = _chain(repo, "retry.polled")
    assert polled[: len(polled_first)] == polled_first
    [(_, second)] = polled[len(polled_first) :]
    assert second.new_source_state.value == "polled-2.ndjson" and second.extra[RUN_EXTRA_KEY] == poll_marker
    assert _rows(repo, "retry.polled") == [(0, "Oslo", 3), (1, "Lima", 5), (2, "Pune", 7)]
    landed = _chain(repo, "retry.events")
    added = [e for _, e in landed if isinstance(e, model.AddData)]
    assert len(added) == 1 and added[0].new_data is not None
    marker = added[0].extra[RUN_EXTRA_KEY]
    assert marker.startswith(f"{DAG_ID}/") and marker.endswith("/push")
    first_try_head = landed[-1][0]
    schema_block = next(i for i, (_, e) in enumerate(landed) if isinstance(e, model.SetDataSchema))
    assert len(_chain(repo, "retry.doubled")) == 3  # seed, SetTransform, SetVocab: not fed yet

    # 3. the push's retry adds nothing; the transform runs, commits, and its worker dies in turn
    _killed(airflow_home.dag_run(repo, data, kill="retry.doubled", retry=True))
    assert _chain(repo, "retry.events") == landed
    assert _rows(repo, "retry.events") == [(0, "Oslo", 3), (1, "Lima", 5), (2, "Pune", 7)]
    derived = _chain(repo, "retry.doubled")
    executes = [(h, e) for h, e in derived if isinstance(e, model.ExecuteTransform)]
    assert len(executes) == 1 and derived[-1][0] == executes[0][0]
    assert str(executes[0][1].query_inputs[0].new_block_hash) == first_try_head  # pinned by XCom

    # 4. the transform's retry, pinned to the same input head, finds it consumed
    result = airflow_home.dag_run(repo, data, retry=True)
    assert marker == f"{DAG_ID}/{result['run_id']}/push"  # one task run, retried
    assert result["tis"] == {
        "apply": {"state": "success", "try_number": 1},
        "poll": {"state": "success", "try_number": 2},
        "push": {"state": "success", "try_number": 2},
        "transform": {"state": "success", "try_number": 2},
    }
    assert _chain(repo, "retry.polled") == polled
    assert _chain(repo, "retry.events") == landed
    assert _chain(repo, "retry.doubled") == derived
    # the polling ingest reported both tries' commits as one: from the head before its SetDataSchema
    pulled = result["xcom"]["poll"]
    assert pulled["prev_head"] == polled[poll_schema - 1][0] and pulled["new_head"] == polled[-1][0]
    assert pulled["new_blocks"] == [h for h, _ in polled[poll_schema:]] and pulled["records"] == 3
    # the push's retry reported the first try's commit: SetDataSchema + AddData, from the head before
    pushed = result["xcom"]["push"]
    assert pushed["new_head"] == first_try_head
    assert pushed["prev_head"] == landed[schema_block - 1][0]
    assert pushed["new_blocks"] == [h for h, _ in landed[schema_block:]]
    assert pushed["records"] == 3 and not pushed["up_to_date"]
    transformed = result["xcom"]["transform"]
    assert transformed["up_to_date"] and transformed["new_blocks"] == []
    assert transformed["new_head"] == executes[0][0]
    assert _rows(repo, "retry.events") == [(0, "Oslo", 3), (1, "Lima", 5), (2, "Pune", 7)]
    assert _rows(repo, "retry.doubled") == [(0, "Oslo", 6), (1, "Lima", 10), (2, "Pune", 14)]

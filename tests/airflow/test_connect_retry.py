"""A Spark Connect server that is down or dies, through Airflow's own retries (issue 24, failure behaviour).

One push-ingest task on a `spark_connect` connection, `retries=1`, `retry_delay` 1 s, on a server of
this test's own (its port fixed: the connection names it):

- A: no server listens; the first try fails at once, retryably, naming the URL and `odf engine serve`;
  the server is started; the retry commits the data once.
- B: the server is killed (SIGKILL) a few seconds into the first try's request; nothing is committed;
  it is restarted on the same port; the retry commits exactly once.
- C: the same with the server stopped as a restart stops it (SIGTERM): the try fails retryably, in one
  line naming the server, no Java stack (issue 36).

How the tries run: `dag.test()` of Airflow 3.3 runs retries itself. A try that fails with retries left
becomes `up_for_retry` (the task instance history keeps it, as failed), its
`on_retry_callback` runs in the task's process, and the loop of `dag.test()` schedules the next try
number once `retry_delay` has passed: Airflow's real retry state, in the metadata DB. `dag.test()` needs
the DAG parsed from the DAGS_FOLDER, so it runs in a child process with its own AIRFLOW_HOME, SQLite DB
and DAGS_FOLDER (`AirflowHome` of test_retry_safety.py). This process owns the server: the failed
try's `on_retry_callback` (set by the child) hands over the exception and waits until the server is
back; a patched Connect runner tells when a request's job starts on the server (B's kill is timed from
that moment).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_odf.engine.connect_runner import CONNECT_TIMEOUT_SECONDS
from airflow_odf.exceptions import airflow_error
from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.integrity import reachable_keys
from airflow_odf.odf.engine_client.connect_server import ConnectServer, free_port
from airflow_odf.odf.engine_client.contract import ENGINE_STOPPED
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.operation import IngestError
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.operators.base import RUN_EXTRA_KEY
from tests.airflow.test_retry_safety import AirflowHome
from tests.integration.test_connect_failures import KILL_AFTER_SECONDS, ROWS, STOPPED_PROBLEMS
from tests.paths import REPO

DAG_ID = "odf_connect_retry"
SIGNAL_TIMEOUT_SECONDS = 300.0  # a bound for a hung child, not a duration under test

DAG_FILE = textwrap.dedent(
    '''
    """Written by tests/airflow/test_connect_retry.py: one push ingest on the warm engine, retried once."""
    from __future__ import annotations

    import os
    from datetime import datetime, timedelta

    from airflow.sdk import dag

    from airflow_odf.operators.ingest import OdfPushIngestOperator


    @dag(schedule=None, start_date=datetime(2024, 1, 1), catchup=False)
    def odf_connect_retry() -> None:
        OdfPushIngestOperator(
            task_id="push",
            dataset=os.environ["ODF_TEST_DATASET"],
            files=[os.environ["ODF_TEST_FILE"]],
            event_time="2024-01-01T00:00:00Z",
            engine="spark-connect",
            spark_conn_id="odf_connect",
            retries=1,
            retry_delay=timedelta(seconds=1),
        )


    odf_connect_retry()
    '''
)

# The child: runs the DAG with dag.test(), telling the test through files in ODF_TEST_SIGNALS when an
# engine request starts its job on the server ("request-N") and when a try failed ("failed-try": its
# exception), and letting the retry wait until the test says the server is back ("server-back").
# Prints what the DB holds.
CHILD = textwrap.dedent(
    """
    import importlib.util, json, os, time
    from pathlib import Path

    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.utils.session import create_session

    from airflow_odf.engine import deadline
    from tests.airflow.dag_runs import xcom

    signals = Path(os.environ["ODF_TEST_SIGNALS"])
    requests = []
    run_request = deadline.run_request  # what the Connect runner calls within the request's deadline

    def run_and_tell(spark, request):  # the session on the server is open: the job starts
        requests.append(request)
        (signals / f"request-{len(requests)}").touch()
        return run_request(spark, request)

    deadline.run_request = run_and_tell

    def wait_for_the_server(context):
        error, written = context["exception"], signals / ".failed-try"
        written.write_text(f"{type(error).__name__}: {error}")
        written.rename(signals / "failed-try")  # whole, or not there
        deadline = time.monotonic() + float(os.environ["ODF_TEST_SIGNAL_TIMEOUT"])
        while not (signals / "server-back").exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    path = os.path.join(os.environ["AIRFLOW__CORE__DAGS_FOLDER"], "odf_connect_retry.py")
    spec = importlib.util.spec_from_file_location("odf_connect_retry_dag", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = module.odf_connect_retry()
    dag.task_dict["push"].on_retry_callback = [wait_for_the_server]
    run = dag.test()
    with create_session() as session:
        [ti] = run.get_task_instances(session=session)
        tries = session.query(TaskInstanceHistory).filter(TaskInstanceHistory.run_id == run.run_id).all()
        out = {
            "run_id": run.run_id,
            "tries": sorted([h.try_number, str(h.state)] for h in tries) + [[ti.try_number, str(ti.state)]],
            "xcom": xcom(run, "push"),
        }
    print("RESULT " + json.dumps(out))
    """
)


class DedicatedServer:
    """This test's own Connect server on a fixed port (the connection names it): started, crashed by
    SIGKILL, started again. Not the session's `connect_url` server: this one gets killed."""

    def __init__(self) -> None:
        port = free_port("127.0.0.1")
        self.server = ConnectServer("local[2]", port=port, conf={"spark.sql.shuffle.partitions": "2"})
        self.running = False

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> None:
        self.server.start()
        self.running = True

    def crash(self) -> None:
        """SIGKILL to the server's process group (spark-submit and its JVM), as a crash."""
        process = self.server._process
        assert process is not None
        os.killpg(process.pid, signal.SIGKILL)
        self.server.stop()  # reaps the killed process
        self.running = False

    def stop(self) -> None:
        self.server.stop()
        self.running = False


@pytest.fixture(scope="module")
def dedicated_server() -> Iterator[DedicatedServer]:
    server = DedicatedServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> AirflowHome:
    home = AirflowHome(tmp_path_factory.mktemp("airflow"))
    (home.dags / "odf_retry_safety.py").unlink()  # that test's DAG: this deployment runs its own
    (home.dags / "odf_connect_retry.py").write_text(DAG_FILE, encoding="utf-8")
    return home


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repository:
    return Repository.init(tmp_path_factory.mktemp("connect-retry") / "repo")


def _push_dataset(repo: Repository, name: str, rows: int) -> tuple[Dataset, Path]:
    """A root dataset with a CSV push source (id, name), and a CSV file of `rows` records for it."""
    read = model.ReadStepCsv(header=True, ddl_schema=["id BIGINT", "name STRING"])
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    snapshot = model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=[source])
    repo.add(snapshot, system_time=Timestamp.parse("2024-01-01T00:00:00Z"))
    data = Path(repo.root).parent / f"{name}.csv"
    with data.open("w") as f:
        f.write("id,name\n")
        f.writelines(f"{i},name-{i % 1000}\n" for i in range(rows))
    return repo.dataset(name), data


class ChildRun:
    """One `dag.test()` of the DAG in a child process, and the files through which it signals; a child
    still running at the end of its `with` block (a failed test) is killed."""

    def __init__(
        self, home: AirflowHome, repo: Repository, server: DedicatedServer, name: str, data: Path
    ) -> None:
        self.signals = Path(repo.root).parent / f"signals-{name}"
        self.signals.mkdir()
        env = {
            **home.env,
            "AIRFLOW_CONN_ODF_DEFAULT": json.dumps(
                {"conn_type": "odf_repo", "host": Path(repo.root).as_uri()}
            ),
            "AIRFLOW_CONN_ODF_CONNECT": json.dumps(  # the DAG's spark_conn_id
                {"conn_type": "spark_connect", "host": "127.0.0.1", "port": server.port}
            ),
            "ODF_TEST_DATASET": name,
            "ODF_TEST_FILE": str(data),
            "ODF_TEST_SIGNALS": str(self.signals),
            "ODF_TEST_SIGNAL_TIMEOUT": str(SIGNAL_TIMEOUT_SECONDS),
        }
        self.log = self.signals.parent / f"child-{name}.log"  # a file: a full pipe would stall the child
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", CHILD], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT
            )

    def __enter__(self) -> ChildRun:
        return self

    def __exit__(self, *_: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def wait_for(self, name: str) -> Path:
        """The signal file `name`, once the child wrote it (fails if the child ended without)."""
        path, deadline = self.signals / name, time.monotonic() + SIGNAL_TIMEOUT_SECONDS
        while not path.exists():
            assert self.process.poll() is None, f"the child ended before {name}: {self.output()[-8000:]}"
            assert time.monotonic() < deadline, f"no {name} from the child"
            time.sleep(0.1)
        return path

    def failed_try(self) -> str:
        """The exception of the failed try, as its `on_retry_callback` received it."""
        return self.wait_for("failed-try").read_text()

    def server_back(self) -> None:
        (self.signals / "server-back").touch()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def result(self) -> dict[str, Any]:
        self.process.wait(timeout=SIGNAL_TIMEOUT_SECONDS)
        out = self.output()
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert self.process.returncode == 0 and lines, out[-8000:]
        return json.loads(lines[-1].removeprefix("RESULT "))


def _objects(dataset: Dataset) -> set[str]:
    """The dataset's data and checkpoint files, hidden ones (half-written) included."""
    return {
        f"{prefix}/{f.name}"
        for prefix in ("data", "checkpoints")
        if (folder := dataset.store.local_path(prefix)) is not None and folder.is_dir()
        for f in folder.iterdir()
        if not f.name.endswith(".lock")
    }


def _left_nothing(repo: Repository, dataset: Dataset, before: Multihash | None) -> None:
    """After a failed try: the head did not move, no data file landed, no staging folder was left."""
    assert dataset.head() == before
    assert _objects(dataset) == set()
    operations = repo.work_dir / "operations"
    assert not operations.exists() or list(operations.iterdir()) == []


def _committed_once(dataset: Dataset, result: dict[str, Any], records: int) -> None:
    """Tries 1 (failed; its on_retry_callback ran, so it was up for retry) and 2 (success); one AddData of
    `records` rows, offsets 0..n-1, marked with this task run; every data file referenced by a block."""
    assert result["tries"] == [[1, "failed"], [2, "success"]]
    added = [b.event for _, b in dataset.iter_blocks() if isinstance(b.event, model.AddData)]
    assert len(added) == 1
    assert added[0].new_data is not None
    assert added[0].new_data.offset_interval == model.OffsetInterval(start=0, end=records - 1)
    assert added[0].extra[RUN_EXTRA_KEY] == f"{DAG_ID}/{result['run_id']}/push"
    pushed = result["xcom"]
    assert pushed["records"] == records and pushed["new_head"] == str(dataset.head())
    table = tail(dataset, records)
    assert table is not None and sorted(table.column("offset").to_pylist()) == list(range(records))
    assert _objects(dataset) <= reachable_keys(dataset)  # no half-written or orphaned objects


def _connect_failure(dataset: str, url: str, problem: str) -> str:
    """How a failed try's exception reads: retryable (AirflowException), naming the URL and the remedy."""
    return (
        f"AirflowException: {dataset}: Spark Connect server {url}: {problem}; start one with "
        "`odf engine serve` (it prints its sc:// URL), or point the connection at a running server"
    )


def test_an_unreachable_server_fails_the_try_and_the_retry_commits_once_it_is_started(
    airflow_home: AirflowHome, repo: Repository, dedicated_server: DedicatedServer
) -> None:
    dataset, data = _push_dataset(repo, "connect.small", 3)
    before = dataset.head()
    with ChildRun(airflow_home, repo, dedicated_server, "connect.small", data) as child:
        failure = child.failed_try()
        assert failure == _connect_failure(
            "connect.small", dedicated_server.url, f"no server answered within {CONNECT_TIMEOUT_SECONDS:g} s"
        )
        _left_nothing(repo, dataset, before)
        dedicated_server.start()
        child.server_back()
        result = child.result()
    _committed_once(dataset, result, 3)


def test_a_server_killed_during_the_try_commits_nothing_and_the_retry_commits_once(
    airflow_home: AirflowHome, repo: Repository, dedicated_server: DedicatedServer
) -> None:
    if not dedicated_server.running:  # when run without the test above
        dedicated_server.start()
    dataset, data = _push_dataset(repo, "connect.big", ROWS)
    before = dataset.head()
    with ChildRun(airflow_home, repo, dedicated_server, "connect.big", data) as child:
        child.wait_for("request-1")
        time.sleep(KILL_AFTER_SECONDS)  # the server is busy with the request: kill it mid-job
        dedicated_server.crash()
        failure = child.failed_try()
        assert failure == _connect_failure(
            "connect.big", dedicated_server.url, "stopped answering during the request"
        ), "the server was not killed during the request's job"
        _left_nothing(repo, dataset, before)
        dedicated_server.start()
        child.server_back()
        result = child.result()
    _committed_once(dataset, result, ROWS)


def test_a_server_stopped_during_the_try_fails_it_retryably_in_one_line_and_the_retry_commits_once(
    airflow_home: AirflowHome, repo: Repository, dedicated_server: DedicatedServer
) -> None:
    """Issue 36: restarting the warm engine (SIGTERM: Spark stops its context while the server still
    answers) used to fail the task for good with `AirflowFailException: (java.lang.IllegalStateException)
    Cannot call methods on a stopped SparkContext` and a Java stack, despite its retries."""
    if not dedicated_server.running:
        dedicated_server.start()
    dataset, data = _push_dataset(repo, "connect.stopped", ROWS)
    before = dataset.head()
    with ChildRun(airflow_home, repo, dedicated_server, "connect.stopped", data) as child:
        child.wait_for("request-1")
        time.sleep(KILL_AFTER_SECONDS)
        dedicated_server.stop()  # what `odf engine serve` gets from a restart: SIGTERM
        failure = child.failed_try()
        prefix = (
            f"AirflowException: connect.stopped: Spark Connect server {re.escape(dedicated_server.url)}: "
        )
        assert re.fullmatch(prefix + STOPPED_PROBLEMS, failure), failure  # one line, retryable
        _left_nothing(repo, dataset, before)
        dedicated_server.start()
        child.server_back()
        result = child.result()
    _committed_once(dataset, result, ROWS)


def test_an_engine_stopped_response_is_retried_and_bad_input_is_not() -> None:
    stopped = IngestError(
        ENGINE_STOPPED, "big: the engine stopped during the request (its SparkContext was stopped)"
    )
    assert type(airflow_error("big", stopped)) is AirflowException  # the task's retries apply
    assert str(airflow_error("big", stopped)) == str(stopped)
    assert (
        type(airflow_error("big", IngestError("bad-input", "big: cannot read a.csv"))) is AirflowFailException
    )

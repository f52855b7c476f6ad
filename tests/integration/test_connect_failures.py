"""A Spark Connect server killed during a job: the request fails, nothing is committed, and the retry on
the restarted server commits exactly once (issue 24, failure behaviour)."""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.cli.errors import EXIT_BAD_INPUT
from airflow_odf.cli.main import main
from airflow_odf.engine.connect_runner import SparkConnectRunner
from airflow_odf.engine.errors import ConnectUnreachableError
from airflow_odf.odf.engine_client.connect_server import ConnectServer
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
ROWS = 2_000_000  # enough work that the server is still busy when it is killed
# after the request's session opened: well inside the job, which now writes these rows as read (a push's
# event time keeps them in order: no sort) in a few seconds on a quiet machine
KILL_AFTER_SECONDS = 1.0


class KillingRunner:
    """Runs a request on `server`, killing the server (SIGKILL, as a crash) a few seconds into it."""

    def __init__(self, server: ConnectServer) -> None:
        self.server = server
        self.killed = threading.Event()

    def run(self, request_json: str, work_dir: Path) -> str:
        def kill() -> None:
            process = self.server._process  # the server's process group: spark-submit and its JVM
            if process is not None:
                os.killpg(process.pid, signal.SIGKILL)
                self.killed.set()

        timer = threading.Timer(KILL_AFTER_SECONDS, kill)
        timer.start()
        try:
            return SparkConnectRunner(self.server.url).run(request_json, work_dir)
        finally:
            timer.cancel()


def _server() -> ConnectServer:
    return ConnectServer("local[2]", port=0, conf={"spark.sql.shuffle.partitions": "2"})


def test_a_server_killed_during_a_job_commits_nothing_and_the_retry_commits_once(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "repo")
    read = model.ReadStepCsv(header=True, ddl_schema=["id BIGINT", "name STRING"])
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    snapshot = model.DatasetSnapshot(name="big", kind=model.DatasetKind.ROOT, metadata=[source])
    repo.add(snapshot, system_time=T0)
    data = tmp_path / "big.csv"
    with data.open("w") as f:
        f.write("id,name\n")
        f.writelines(f"{i},name-{i % 1000}\n" for i in range(ROWS))
    dataset = repo.dataset("big")
    before = dataset.head()
    options = IngestOptions(work_dir=tmp_path / "work")

    server = _server()
    server.start()
    runner = KillingRunner(server)
    try:
        with pytest.raises(ConnectUnreachableError) as failed:  # the CLI and the operators map it
            push_ingest(dataset, "big", runner, [data], options, event_time=T0)
    finally:
        server.stop()
    assert runner.killed.is_set(), "the job ended before the server was killed: make ROWS larger"
    # a dying JVM either drops the connection or answers its last calls with gRPC's UNAVAILABLE (on a busy
    # machine): either way the one line names the server and says nothing was committed or how to go on
    message = str(failed.value)
    assert re.fullmatch(f"Spark Connect server {re.escape(server.url)}: {STOPPED_PROBLEMS}", message), message
    assert dataset.head() == before  # nothing committed
    assert list((Path(repo.root) / "datasets").glob("*/data/*")) == []

    with _server() as restarted:
        result = push_ingest(
            dataset, "big", SparkConnectRunner(restarted.url), [data], options, event_time=T0
        )
    assert result.records == ROWS
    assert result.prev_head == str(before) and len(result.new_blocks) == 2  # SetDataSchema, AddData
    events = [b.event for _, b in dataset.iter_blocks()]
    assert sum(isinstance(e, model.AddData) for e in events) == 1


# A graceful stop (SIGTERM, as `odf engine serve` gets from a restart): the server's JVM stops its
# SparkContext first and its gRPC service answers a moment longer, with Java errors ("Cannot call methods
# on a stopped SparkContext") or gRPC's own ("Application error processing RPC") — issue 36. A killed
# server's connection drops, or, on a busy machine, its last calls end with gRPC's UNAVAILABLE.
STOPPED_PROBLEMS = (
    r"(stopped answering during the request; start one with `odf engine serve` \(it prints its sc:// URL\), "
    r"or point the connection at a running server"
    r"|the engine stopped during the request \([a-zA-Z' ]+\); nothing was committed: run it again once the "
    r"server is back \(Airflow retries the task; `odf engine serve` starts a server\))"
)


def _stop_during_requests(
    server: ConnectServer, after: float, stopped: threading.Event
) -> Callable[[], None]:
    """Makes every Connect request stop `server` the way a restart does (SIGTERM) once its job has run
    `after` seconds on it; returns what undoes it."""
    from airflow_odf.engine import deadline

    run_request = deadline.run_request

    def stop() -> None:
        stopped.set()
        server.stop()

    def stop_during(spark: Any, request: dict[str, Any]) -> dict[str, Any]:
        threading.Timer(after, stop).start()  # the session is open: the job starts now
        return run_request(spark, request)

    deadline.run_request = stop_during
    return lambda: setattr(deadline, "run_request", run_request)


@pytest.mark.parametrize("via", ["core", "cli"])
def test_a_server_stopped_during_a_job_fails_it_in_one_retryable_line_naming_the_server(
    tmp_path: Path, via: str, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = Repository.init(tmp_path / "repo")
    read = model.ReadStepCsv(header=True, ddl_schema=["id BIGINT", "name STRING"])
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(
        model.DatasetSnapshot(name="big", kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
    )
    data = tmp_path / "big.csv"
    with data.open("w") as f:
        f.write("id,name\n")
        f.writelines(f"{i},name-{i % 1000}\n" for i in range(ROWS))
    dataset = repo.dataset("big")
    before = dataset.head()

    server, stopped = _server(), threading.Event()
    server.start()
    # early in the job (reading) through the core, late (merging, writing) through the `odf` command
    undo = _stop_during_requests(server, 1.0 if via == "core" else 6.0, stopped)
    try:
        if via == "core":
            with pytest.raises(ConnectUnreachableError) as failed:  # the operators make it retryable
                options = IngestOptions(work_dir=tmp_path / "work")
                push_ingest(dataset, "big", SparkConnectRunner(server.url), [data], options, event_time=T0)
            message = str(failed.value)
        else:
            capsys.readouterr()
            args = [
                "ingest",
                "--repo",
                str(repo.root),
                "big",
                str(data),
                "--event-time",
                "2024-01-01T00:00:00Z",
            ]
            assert main([*args, "--engine", "spark-connect", "--remote", server.url]) == EXIT_BAD_INPUT
            message = capsys.readouterr().err.rstrip("\n")
    finally:
        undo()
        server.stop()
    assert stopped.is_set(), "the job ended before the server was stopped: make ROWS larger"
    assert re.fullmatch(f"Spark Connect server {re.escape(server.url)}: {STOPPED_PROBLEMS}", message), message
    assert dataset.head() == before  # nothing committed
    assert list((Path(repo.root) / "datasets").glob("*/data/*")) == []

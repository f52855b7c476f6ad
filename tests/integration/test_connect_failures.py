"""A Spark Connect server that stops during a job (issue 24, failure behaviour; issue 36): the `odf`
command fails in one retryable line naming the server, and nothing is committed.

A server killed (SIGKILL) or stopped (SIGTERM) during a request and restarted for the retry, which then
commits exactly once, goes through the same core path (`push_ingest` on a `SparkConnectRunner`, its
`ConnectUnreachableError`) in tests/airflow/test_connect_retry.py, there through Airflow's own retries;
the constants below are shared with it and with the real deployment's restart test."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.cli.errors import EXIT_BAD_INPUT
from airflow_odf.cli.main import main
from airflow_odf.odf.engine_client.connect_server import ConnectServer
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.repo.repository import Repository

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
ROWS = 2_000_000  # enough work that the server is still busy when it is killed
# after the request's session opened: well inside the job, which now writes these rows as read (a push's
# event time keeps them in order: no sort) in a few seconds on a quiet machine
KILL_AFTER_SECONDS = 1.0


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


def test_a_server_stopped_during_a_job_fails_it_in_one_retryable_line_naming_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
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

    server = ConnectServer("local[2]", port=0, conf={"spark.sql.shuffle.partitions": "2"})
    stopped = threading.Event()
    server.start()
    undo = _stop_during_requests(server, 3.0, stopped)  # well inside the job (a few seconds quiet)
    try:
        capsys.readouterr()
        args = ["ingest", "--repo", str(repo.root), "big", str(data), "--event-time", "2024-01-01T00:00:00Z"]
        assert main([*args, "--engine", "spark-connect", "--remote", server.url]) == EXIT_BAD_INPUT
        message = capsys.readouterr().err.rstrip("\n")
    finally:
        undo()
        server.stop()
    assert stopped.is_set(), "the job ended before the server was stopped: make ROWS larger"
    assert re.fullmatch(f"Spark Connect server {re.escape(server.url)}: {STOPPED_PROBLEMS}", message), message
    assert dataset.head() == before  # nothing committed
    assert list((Path(repo.root) / "datasets").glob("*/data/*")) == []

"""An engine that stops under a request (issue 36): told apart from the request's own errors, answered as
the error kind `engine-stopped` in one line (which the Airflow layer retries: tests/airflow/
test_connect_retry.py) — never reported as bad input with a Java stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
import pytest
from pyspark.errors.exceptions.connect import SparkConnectGrpcException
from pyspark.sql import SparkSession

from airflow_odf.engine.errors import ENGINE_STOPPED, EngineInputError
from airflow_odf.engine.readers import read_input
from airflow_odf.engine.spark_errors import CONTEXT_STOPPED, engine_stopped
from tests.paths import REPO

RENDEZVOUS = """<_MultiThreadedRendezvous of RPC that terminated with:
\tstatus = StatusCode.UNKNOWN
\tdetails = "Application error processing RPC"
\tdebug_error_string = "UNKNOWN:Application error processing RPC"
>"""


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        # what a Connect server answers while its JVM shuts down (the texts seen in issue 36)
        (
            SparkConnectGrpcException(
                "Cannot call methods on a stopped SparkContext.\nThis stopped SparkContext was created at:",
                reason="java.lang.IllegalStateException",
                grpc_status_code=grpc.StatusCode.INTERNAL,
            ),
            CONTEXT_STOPPED,
        ),
        (SparkConnectGrpcException(RENDEZVOUS), "the connection to it broke"),
        (
            SparkConnectGrpcException("failed to connect", grpc_status_code=grpc.StatusCode.UNAVAILABLE),
            "it became unavailable",
        ),
        (
            SparkConnectGrpcException(
                "session changed", errorClass="INVALID_HANDLE.SESSION_CHANGED", messageParameters={}
            ),
            "it was restarted",
        ),
        # the request's own errors: an S3 endpoint refusing the server's connection is the source's problem
        (
            SparkConnectGrpcException(
                "Connection refused",
                reason="java.net.ConnectException",
                grpc_status_code=grpc.StatusCode.INTERNAL,
            ),
            None,
        ),
        (ValueError("Connection refused"), None),
    ],
)
def test_what_says_the_engine_stopped(error: BaseException, reason: str | None) -> None:
    assert engine_stopped(error) == reason


def test_a_real_spark_error_is_the_requests_own(spark: SparkSession, tmp_path: Path) -> None:
    """A file Spark cannot read stays bad input, named, on a session that runs."""
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet")
    with pytest.raises(EngineInputError) as failed:
        read_input(spark, {"kind": "Parquet"}, [str(broken)], None).records.count()  # type: ignore[union-attr]
    assert failed.value.kind == "bad-input"


# The local engine's SparkContext stopped during a request (what stopping a worker's session does): in a
# child process of its own, as stopping the tests' shared session would end every other engine test.
CHILD = textwrap.dedent(
    """
    import json, sys, threading
    from pathlib import Path

    from airflow_odf.engine import deadline
    from airflow_odf.engine.local_runner import LocalSparkRunner
    from airflow_odf.odf.format import model
    from airflow_odf.odf.format.timestamps import Timestamp
    from airflow_odf.odf.ingest.options import IngestOptions
    from airflow_odf.odf.ingest.push import push_ingest
    from airflow_odf.odf.operation import IngestError
    from airflow_odf.odf.repo.repository import Repository

    tmp, after = Path(sys.argv[1]), float(sys.argv[2])
    t0 = Timestamp.parse("2024-01-01T00:00:00Z")
    repo = Repository.init(tmp / "repo")
    read = model.ReadStepCsv(header=True, ddl_schema=["id BIGINT", "name STRING"])
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    snapshot = model.DatasetSnapshot(name="big", kind=model.DatasetKind.ROOT, metadata=[source])
    repo.add(snapshot, system_time=t0)
    data = tmp / "big.csv"
    with data.open("w") as f:
        f.write("id,name\\n")
        f.writelines(f"{i},name-{i % 1000}\\n" for i in range(2_000_000))
    run_request = deadline.run_request

    def stop_during(spark, request):
        threading.Timer(after, spark.stop).start()
        return run_request(spark, request)

    deadline.run_request = stop_during
    dataset = repo.dataset("big")
    before = dataset.head()
    try:
        runner, options = LocalSparkRunner("local[1]"), IngestOptions(work_dir=tmp / "w")
        push_ingest(dataset, "big", runner, [data], options, event_time=t0)
        out = {"error": None}
    except IngestError as e:
        out = {"kind": e.kind, "message": str(e)}
    out["head_unchanged"] = dataset.head() == before
    print("RESULT " + json.dumps(out))
    """
)


# at once: while the job still plans (PySpark's calls then fail in any way); after 2 s: in its Spark jobs
@pytest.mark.parametrize("after", [0.0, 2.0])
def test_a_local_session_stopped_during_a_request_answers_engine_stopped_in_one_line(
    tmp_path: Path, after: float
) -> None:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), str(after)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result == {
        "kind": ENGINE_STOPPED,
        "message": f"big: the engine stopped during the request ({CONTEXT_STOPPED})",
        "head_unchanged": True,
    }

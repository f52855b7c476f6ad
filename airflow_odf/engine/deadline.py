"""The deadline of a request the engine runs from this process (the local and Spark Connect runners):
at its end the request's Spark jobs are cancelled, and the request is answered with a `timeout` error,
while the session (local) or the server (Connect) goes on serving the next requests.

Which jobs are the request's: on Spark Connect, every operation of the request's own session
(`interruptAll`); on the local session, every job of the process's SparkContext (`cancelAllJobs`), as
the local runner runs one request at a time. A thread-local job tag or group would miss the jobs the
engine starts from helper threads (a transform plans and checks while it writes), whose pool the
request then waits for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from airflow_odf.engine.job import CONTRACT_VERSION, engine_info, run_request
from airflow_odf.engine.session import is_connect
from airflow_odf.utils.engine_deadline import Deadline, timeout_error

CANCEL_AGAIN_SECONDS = 1.0
"""After the deadline, how often jobs the request still starts are cancelled (until it returns)."""


def run_within(spark: SparkSession, request: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The response of `request` (`run_request`), or a `timeout` error when it still ran after
    `seconds`: its Spark jobs are cancelled, and what it wrote is left to the core, which commits nothing
    and removes the operation's folder."""
    with Deadline(seconds, _canceller(spark), again=CANCEL_AGAIN_SECONDS) as deadline:
        response = run_request(spark, request)
    if deadline.passed:  # whatever the cancelled jobs made the request answer
        return {"version": CONTRACT_VERSION, "engine": engine_info(), "error": timeout_error(seconds)}
    return response


def _canceller(spark: SparkSession) -> Callable[[], object]:
    """What cancels the running jobs of a request on `spark` (see the module's docstring)."""
    if is_connect(spark):
        return spark.interruptAll
    return spark.sparkContext.cancelAllJobs

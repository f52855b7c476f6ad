"""The in-process engine runner: one local SparkSession for the life of the process (tests, the CLI)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from airflow_odf.engine.deadline import run_within
from airflow_odf.engine.job import CONTRACT_VERSION, engine_info
from airflow_odf.engine.session import SessionWithoutJars, get_session
from airflow_odf.utils.engine_deadline import resolve_engine_timeout

_ONE_AT_A_TIME = threading.Lock()


class LocalSparkRunner:
    """Runs engine requests on this process's SparkSession (a JVM start costs seconds; it is paid once).

    One request at a time per process: the session's temporary views (transform inputs, named by alias)
    and its cache are process-wide, so concurrent requests (e.g. `odf pull --recursive` running a level
    in threads) would read each other's inputs. Fetching, planning and committing still overlap.

    A request still running `timeout` seconds after it started (default $ODF_ENGINE_TIMEOUT, else one
    hour) has its Spark jobs cancelled and is answered with a `timeout` error; the session serves on.
    """

    def __init__(
        self, master: str = "local[*]", conf: dict[str, str] | None = None, *, timeout: float | None = None
    ) -> None:
        self.master = master
        self.conf = conf
        self.timeout = resolve_engine_timeout(timeout)

    def run(self, request_json: str, work_dir: Path) -> str:
        """The response; a session that cannot serve the request (it started without the jars the
        request needs) is an `engine-setup` error in it, which a retry in this process would not cure."""
        with _ONE_AT_A_TIME:
            try:
                spark = get_session(self.master, self.conf)
            except SessionWithoutJars as e:
                error = {"kind": "engine-setup", "message": str(e)}
                return json.dumps({"version": CONTRACT_VERSION, "engine": engine_info(), "error": error})
            return json.dumps(run_within(spark, json.loads(request_json), self.timeout))

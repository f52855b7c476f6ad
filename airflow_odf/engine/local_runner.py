"""The in-process engine runner: one local SparkSession for the life of the process (tests, the CLI)."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_odf.engine.job import run_request
from airflow_odf.engine.session import get_session


class LocalSparkRunner:
    """Runs engine requests on this process's SparkSession (a JVM start costs seconds; it is paid once)."""

    def __init__(self, master: str = "local[*]", conf: dict[str, str] | None = None) -> None:
        self.master = master
        self.conf = conf

    def run(self, request_json: str, work_dir: Path) -> str:
        spark = get_session(self.master, self.conf)
        return json.dumps(run_request(spark, json.loads(request_json)))

"""Airflow set-up shared by the benchmarks that run DAGs with `dag.test()` (imported by the scripts beside
it): a fresh Airflow home on SQLite, a temporary DAGS_FOLDER, connections from the environment, the
one-time class archive of the spark-submit engine's fast start, and a warm Spark Connect server."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from machine_info import cpu_model, java_version

SPARK_MASTER = "local[2]"
"""The master of `spark_default` and of the warm engine's server: the same for every engine compared."""
CONNECT_CONN_ID = "spark_connect_bench"


def airflow_environment(work: Path, dags: Path, repo: Path) -> dict[str, str]:
    """The environment Airflow reads at import: a home in `work`, `dags` as DAGS_FOLDER, `odf_default`
    on `repo`, `spark_default` on SPARK_MASTER, and PATH leading to this environment's `spark-submit`."""
    return {
        "AIRFLOW_HOME": str(work / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",  # the task logs (Spark's output) are not the point
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": SPARK_MASTER}),
        "AIRFLOW_CONN_ODF_DEFAULT": json.dumps({"conn_type": "odf_repo", "host": repo.as_uri()}),
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        # the Spark provider runs `spark-submit` from PATH: the one of this environment's PySpark
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }


def build_class_archive(cache: Path) -> Path:
    """The fast start's class archive, made once in `cache` as `odf engine warm-up` does per machine."""
    from airflow_odf.odf.engine_client.warm_up import build_class_archive as build

    os.environ["ODF_CACHE_DIR"] = str(cache)
    started = time.perf_counter()
    archive = build(SPARK_MASTER, log=lambda line: None)
    print(f"set-up: class archive made in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return archive


@contextmanager
def warm_engine() -> Iterator[Any]:
    """A Spark Connect server on SPARK_MASTER, as `odf engine serve` runs next to the workers, and the
    `spark_connect` connection CONNECT_CONN_ID pointing at it."""
    from airflow_odf.odf.engine_client.connect_server import ConnectServer

    started = time.perf_counter()
    with ConnectServer(master=SPARK_MASTER, port=0, conf={"spark.ui.enabled": "false"}) as server:
        up = time.perf_counter() - started
        print(f"set-up: Connect server {server.url} up in {up:.1f} s", file=sys.stderr)
        connection = {"conn_type": "spark_connect", "host": f"sc://{server.host}", "port": server.port}
        os.environ[f"AIRFLOW_CONN_{CONNECT_CONN_ID.upper()}"] = json.dumps(connection)
        yield server


def load_dag(path: Path, name: str) -> Any:
    """The DAG that `name()` of the DAG file `path` returns."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)()


def task_durations(dag: Any) -> tuple[float, dict[str, float]]:
    """Runs `dag` once (`dag.test()`): the run's duration and each task's, as Airflow recorded them.
    Any task that did not succeed ends the benchmark."""
    from airflow.utils.session import create_session

    run = dag.test()
    with create_session() as session:
        tis = run.get_task_instances(session=session)
        failed = [f"{ti.task_id}: {ti.state}" for ti in tis if str(ti.state) != "success"]
        if failed:
            raise SystemExit(f"{dag.dag_id}: " + ", ".join(failed))
        durations = {ti.task_id: (ti.end_date - ti.start_date).total_seconds() for ti in tis}
        return (max(ti.end_date for ti in tis) - min(ti.start_date for ti in tis)).total_seconds(), durations


def machine() -> str:
    """The machine and the versions, for the results."""
    import airflow
    import pyspark
    from airflow.providers.apache.spark import __version__ as spark_provider

    return (
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs ({cpu_model()})\n"
        f"CPython {platform.python_version()}, Airflow {airflow.__version__}, "
        f"Spark provider {spark_provider}, PySpark {pyspark.__version__}, {java_version()}\n"
        f"date {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    )

"""Engine tests share one local SparkSession (a JVM start costs seconds)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.engine.session import get_session
from airflow_odf.odf.engine_client.fast_start import fast_start_conf


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    """The process's running session, else a new one. Looked up per module, not kept for the session: a
    module that needs other jars (tests/sharing's s3a modules) stops the shared session and its JVM, and
    whichever module runs next (in any order, on any worker of `pytest -n N`) must get a live one. The
    process's default session (`get_session`), never merely the active one: a test may have left one of
    its own sessions (`newSession()`, other settings) active. A new one loads Spark's classes from the
    environment's class archive, as the CLI's local session does."""
    conf = {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "2g"}
    return get_session("local[2]", fast_start_conf(conf, "local[2]", None))


@pytest.fixture
def runner(spark: SparkSession) -> LocalSparkRunner:
    """The in-process engine runner, on the shared session."""
    return LocalSparkRunner("local[2]")

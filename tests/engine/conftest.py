"""Engine tests share one local SparkSession (a JVM start costs seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.engine.session import get_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = get_session("local[2]", {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "2g"})
    yield session


@pytest.fixture
def runner(spark: SparkSession) -> LocalSparkRunner:
    """The in-process engine runner, on the shared session."""
    return LocalSparkRunner("local[2]")

"""The engine's query requests (being built)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from airflow_odf.engine.errors import EngineInputError


def query(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    raise EngineInputError("contract", "query requests are not supported yet")

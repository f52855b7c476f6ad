"""The engine's compact requests (being built)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from airflow_odf.engine.errors import EngineInputError


def compact(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    raise EngineInputError("contract", "compact requests are not supported yet")

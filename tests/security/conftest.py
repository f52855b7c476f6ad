"""The security tests share the engine tests' local SparkSession and the session's Connect server."""

from __future__ import annotations

from tests.engine.conftest import runner, spark  # noqa: F401  (the shared SparkSession fixtures)

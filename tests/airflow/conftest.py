"""The Airflow-layer tests: a migrated SQLite metadata DB (`airflow_db`, tests/conftest.py), repositories
through `odf_repo` connections given as environment variables, and the shared local SparkSession."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.conftest import spark  # noqa: F401  (the shared SparkSession fixture)


@pytest.fixture
def odf_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A repository folder behind the default `odf_repo` connection `odf_default` (created by the DAG)."""
    root = tmp_path / "repo"
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_DEFAULT", json.dumps({"conn_type": "odf_repo", "host": root.as_uri()})
    )
    monkeypatch.setenv("AIRFLOW__ODF__DEFAULT_ENGINE", "local")
    yield root

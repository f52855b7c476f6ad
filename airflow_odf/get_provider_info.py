"""Provider metadata read by Airflow's ProvidersManager through the `apache_airflow_provider` entry point."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-odf",
        "name": "Open Data Fabric",
        "description": "Run verifiable, reproducible Open Data Fabric (ODF) pipelines on PySpark.",
        "versions": ["0.1.0"],
    }

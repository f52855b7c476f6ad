"""Airflow connections the tests give their tasks as `AIRFLOW_CONN_*` environment variables."""

from __future__ import annotations

from typing import Any


def spark_connect_conn(url: str, **extra: Any) -> dict[str, Any]:
    """A `spark_connect` connection (the fields of its JSON form) to the server at `sc://HOST:PORT`."""
    host, port = url.removeprefix("sc://").rsplit(":", 1)
    return {"conn_type": "spark_connect", "host": host, "port": int(port), **extra}

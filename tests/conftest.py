"""Process-wide test settings. Airflow reads its environment once, at its first import: set it here,
before any test module imports airflow (the Airflow-layer tests live in tests/airflow)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="odf-airflow-home-"))
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(_ROOT / "dags_examples")
os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# no class archive from an earlier `odf engine warm-up` on this machine: jobs start as on a fresh one
os.environ["ODF_CACHE_DIR"] = tempfile.mkdtemp(prefix="odf-cache-")

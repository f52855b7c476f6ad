"""Whether a cluster's executors see the folder where the engine reads and writes a request's local
files. On a cluster whose executors run on other machines (or in another mount namespace) they do not:
Spark then fails on an input the driver listed (a long Java error) or writes the output into the
executors' own copy of the folder, where the driver finds nothing. Asked before any work, it is one line
that says what to do.

A file with a name nobody else can know is put in the request's operation folder and read back by the
executors (a read of its text runs as a task on them); only for a master other than `local*` and a
request whose output goes to a local folder (an `s3a://` output is seen by all).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.py4j_errors import Py4JJavaError
from airflow_odf.engine.remote_files import is_uri

_NOT_SEEN = ("FILE_NOT_EXIST", "FileNotFoundException")
"""How Spark says an executor could not open a file the driver listed."""


def require_executors_see(spark: SparkSession, request: dict[str, Any]) -> None:
    """Raises EngineInputError `engine-setup` when the cluster's executors cannot see the request's
    local operation folder; does nothing on a local master or for an output in a store."""
    master = spark.conf.get("spark.master", "local") or "local"
    out_dir = request.get("out_dir")
    if master.startswith("local") or not out_dir or is_uri(out_dir):
        return
    folder = os.path.dirname(os.path.abspath(out_dir.removeprefix("file:").rstrip("/")))
    os.makedirs(folder, exist_ok=True)
    token = uuid.uuid4().hex
    probe = os.path.join(folder, f".odf-executors-see-{token}")
    with open(probe, "w", encoding="utf-8") as f:
        f.write(token)
    try:
        seen = [row.value for row in spark.read.text(probe).collect()]  # a task on an executor
    except (PySparkException, Py4JJavaError) as e:
        if not any(mark in str(e) for mark in _NOT_SEEN):
            raise
        seen = []
    finally:
        os.remove(probe)
    if seen != [token]:
        raise EngineInputError(
            "engine-setup",
            f"the executors of the Spark cluster {master} cannot see this process's folder {folder}: they "
            "read the request's inputs and write its output there. Use an `s3://` repository with s3a "
            "(`--spark-s3a`, the `spark_s3a` extra of the odf_repo connection), or a volume the executors "
            "mount at the same path for the repository and its work directory (ODF_WORK_DIR)",
        )

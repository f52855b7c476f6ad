"""The SparkSession the engine runs in, configured for ODF data.

Timestamps are written as Parquet TIMESTAMP_MILLIS (ODF data columns are Timestamp(ms, UTC)), the session
time zone is UTC, identifiers are case-sensitive (as the reference's SQL engines), and the UI and console
progress bars are off. One session per process: a JVM start costs seconds, so it is reused.
"""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

ODF_SPARK_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS",
    "spark.sql.caseSensitive": "true",
    "spark.sql.parquet.compression.codec": "snappy",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.sources.partitionOverwriteMode": "static",
    "spark.sql.legacy.timeParserPolicy": "CORRECTED",
}


def apply_odf_conf(spark: SparkSession) -> None:
    """Sets the runtime options an ODF job relies on, also on a session made by spark-submit."""
    for key, value in ODF_SPARK_CONF.items():
        if not key.startswith("spark.ui."):
            spark.conf.set(key, value)


def get_session(master: str | None = None, extra_conf: dict[str, str] | None = None) -> SparkSession:
    """The process's SparkSession, created on first use; `master=None` keeps what spark-submit set."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName("airflow-odf")
    if master:
        builder = builder.master(master)
    for key, value in {**ODF_SPARK_CONF, **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    apply_odf_conf(spark)
    return spark

"""The Spark options an ODF engine session needs, in one neutral place: the engine applies them to its
own sessions, and `odf engine serve` (the core, which may not import the engine) passes them as `--conf`
to the Spark Connect server it starts."""

from __future__ import annotations

# What keeps a query inside its tables: with `runSQLOnFiles` on, ``SELECT * FROM csv.`/etc/passwd` ``
# reads any file the JVM can; with `variable.substitute` on, `${env:NAME}`, `${system:NAME}` and
# `${sparkconf:KEY}` in any SQL text are replaced by the environment's, the JVM's and Spark's values.
# Every ODF session (local, spark-submit, the Connect server and its clients) has both off, and the JVM
# guard (`airflow_odf.utils.jvm_guard`) refuses any query of a session where they were turned back on.
SQL_LOCKDOWN: dict[str, str] = {
    "spark.sql.runSQLOnFiles": "false",
    "spark.sql.variable.substitute": "false",
}

# Timestamps are written as Parquet TIMESTAMP_MILLIS (ODF data columns are Timestamp(ms, UTC)), the
# session time zone is UTC, identifiers are case-sensitive (as the reference's SQL engines), and the UI
# and console progress bars are off.
ODF_SPARK_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS",
    "spark.sql.caseSensitive": "true",
    "spark.sql.parquet.compression.codec": "snappy",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.sources.partitionOverwriteMode": "static",
    "spark.sql.legacy.timeParserPolicy": "CORRECTED",
    **SQL_LOCKDOWN,
}

# Spark's own log level for engine jobs: its INFO lines would bury the task's own in the log.
SPARK_LOG_LEVEL = "spark.log.level"
DEFAULT_SPARK_LOG_LEVEL = "WARN"

"""The Spark options an ODF engine session needs, in one neutral place: the engine applies them to its
own sessions, and `odf engine serve` (the core, which may not import the engine) passes them as `--conf`
to the Spark Connect server it starts."""

from __future__ import annotations

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
}

# Spark's own log level for engine jobs: its INFO lines would bury the task's own in the log.
SPARK_LOG_LEVEL = "spark.log.level"
DEFAULT_SPARK_LOG_LEVEL = "WARN"

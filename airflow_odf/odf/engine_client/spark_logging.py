"""How loud Spark is in an engine job's log: `WARN` by default, so that a task log holds the task's own
lines and Spark's warnings and errors, not hundreds of Spark INFO lines.

Spark applies `spark.log.level` when the SparkContext starts (on any cluster manager); the lines the
driver JVM logs before that (the JVM's own start) follow a log4j2 configuration at the same level,
given to the driver JVM when it runs on this machine (client deploy mode, `local` masters).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_odf.odf.engine_client.fast_start import java_option, with_driver_java_options
from airflow_odf.odf.errors import OdfError
from airflow_odf.utils.spark_conf import DEFAULT_SPARK_LOG_LEVEL, SPARK_LOG_LEVEL

LOG_LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")
LOG_CONFIG_FILE = "log4j2.properties"

# Spark's log4j2-defaults.properties (console layout on stderr, quieted third parties), at the chosen level
_LOG4J2_CONFIG = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.jetty2.name = org.sparkproject.jetty.util.component.AbstractLifeCycle
logger.jetty2.level = error
logger.parquet.name = org.apache.parquet.CorruptStatistics
logger.parquet.level = error
"""


def spark_log_level(text: str | None) -> str:
    """The log4j level `text` names (any case; empty: `WARN`); OdfError naming the levels otherwise."""
    level = (text or DEFAULT_SPARK_LOG_LEVEL).strip().upper()
    if level not in LOG_LEVELS:
        raise OdfError(f"Spark log level {text!r}: expected one of {', '.join(LOG_LEVELS)}")
    return level


def with_log_level(
    conf: Mapping[str, Any], level: str, work_dir: Path, *, local_driver: bool
) -> dict[str, Any]:
    """`conf` with Spark's log level: `spark.log.level` of `conf` if set (checked), else `level`; and,
    with `local_driver`, a log4j2 configuration at that level written to `work_dir` for the driver JVM
    (the user's own driver Java options come after it and win)."""
    chosen = spark_log_level(str(conf.get(SPARK_LOG_LEVEL) or level))
    out = {**conf, SPARK_LOG_LEVEL: chosen}
    if not local_driver:
        return out
    config = work_dir / LOG_CONFIG_FILE
    config.write_text(_LOG4J2_CONFIG.format(level=chosen), encoding="utf-8")
    return with_driver_java_options(out, [java_option("-Dlog4j2.configurationFile", config)])

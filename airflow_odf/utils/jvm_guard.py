"""The JVM guard of an ODF engine session: the second wall behind the SQL policy, inside Spark itself.

The policy checks SQL text before it reaches Spark; a query that slips past it, or SQL sent to a Spark
Connect server by any of its clients, meets the guard: a Spark check rule (`spark.sql.extensions`) that
refuses reflection, script transformation, directory writes, tables and views over paths, added jars
and functions, and any query of a session whose `SQL_LOCKDOWN` settings were turned back on; and, on
the Connect server, a gRPC interceptor that redacts conf answers (`spark.conf.get`) as `SET` does. Its
Java sources are beside this module (`jvm/`); `scripts/jvm-guard-jar` compiles them against the
installed Spark into the jar cache (`s3a.jars_dir`), named by the sources' hash, so a changed source
is never served by an old jar. The jar goes on `spark.jars` (the submit class loader), not the driver's
class path, so the fast-start class archive stays valid. Without the jar, sessions run unguarded (said
once in the log) and the SQL policy is the only wall.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from airflow_odf.utils.s3a import jars_dir
from airflow_odf.utils.spark_conf import SQL_LOCKDOWN

_log = logging.getLogger(__name__)

SOURCES_DIR = Path(__file__).with_name("jvm")
GUARD_EXTENSION = "airflow_odf.guard.OdfSqlGuard"
CONF_REDACTION = "airflow_odf.guard.OdfConfRedaction"
JARS = "spark.jars"
EXTENSIONS = "spark.sql.extensions"
INTERCEPTORS = "spark.connect.grpc.interceptor.classes"
#: The first words of every refusal of the guard (the engine's errors keep the line that has them).
REFUSAL_PREFIX = "ODF_SQL_GUARD: "


def guard_jar_name() -> str:
    """`odf-sql-guard-<hash>.jar`: the first 16 hex digits of the SHA-256 of the sources, concatenated in
    name order (what `scripts/jvm-guard-jar` computes)."""
    digest = hashlib.sha256()
    for source in sorted(SOURCES_DIR.glob("*.java"), key=lambda path: path.name.encode()):
        digest.update(source.read_bytes())
    return f"odf-sql-guard-{digest.hexdigest()[:16]}.jar"


def guard_jar() -> Path | None:
    """The guard's jar for these sources, if `scripts/jvm-guard-jar` built it on this machine."""
    jar = jars_dir() / guard_jar_name()
    return jar.absolute() if jar.is_file() else None


def with_sql_guard(conf: Mapping[str, str], *, connect_server: bool = False) -> dict[str, str]:
    """`conf` with `SQL_LOCKDOWN` (over any value of its own) and, when the jar is built, the guard: the
    jar appended to `spark.jars` and the check rule to `spark.sql.extensions` (a Connect server also gets
    the conf redaction among its interceptors). Static settings: they take effect when a session starts."""
    guarded = {**conf, **SQL_LOCKDOWN}
    jar = guard_jar()
    if jar is None:
        _say_missing(jars_dir())
        return guarded
    guarded[JARS] = _appended(conf.get(JARS), str(jar))
    guarded[EXTENSIONS] = _appended(conf.get(EXTENSIONS), GUARD_EXTENSION)
    if connect_server:
        guarded[INTERCEPTORS] = _appended(conf.get(INTERCEPTORS), CONF_REDACTION)
    return guarded


def _appended(listed: str | None, item: str) -> str:
    """`item` after the comma-separated entries of `listed` (once)."""
    entries = [entry.strip() for entry in (listed or "").split(",") if entry.strip()]
    return ",".join(entries if item in entries else [*entries, item])


@cache
def _say_missing(folder: Path) -> None:
    """Once per process: the sessions run without the guard."""
    _log.warning(
        "the ODF SQL guard jar (%s) is not in %s: Spark sessions start without the JVM guard, the SQL "
        "policy is the only wall (scripts/jvm-guard-jar builds it)",
        guard_jar_name(),
        folder,
    )


__all__ = ["REFUSAL_PREFIX", "guard_jar", "guard_jar_name", "with_sql_guard"]

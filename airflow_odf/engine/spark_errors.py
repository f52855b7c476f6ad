"""Spark's errors made readable: the condition and message a user can act on, without the JVM stack trace."""

from __future__ import annotations

import re

from pyspark.errors import PySparkException

from airflow_odf.engine.py4j_errors import Py4JJavaError

_MAX_LINES = 12
_POSITION = re.compile(r"; line (\d+) pos (\d+)")


def spark_error_summary(exc: BaseException) -> str:
    """The first meaningful lines of a Spark error: `[CONDITION] message`, the SQL position and snippet."""
    if isinstance(exc, PySparkException):
        text = str(exc)
        try:
            message = (exc.getMessage() or text).strip()
        except Py4JJavaError:  # an error without a condition (the JVM guard's): its first line, not the plan
            return (text.strip().splitlines() or [type(exc).__name__])[0].rstrip(";")
        position = _POSITION.search(text)
        if position:
            message += f" (line {position.group(1)}, position {position.group(2)})"
        snippet_at = text.find("== SQL")
        if snippet_at >= 0:
            snippet = text[snippet_at:].split("JVM stacktrace:")[0].strip()
            message += "\n" + "\n".join(snippet.splitlines()[:_MAX_LINES])
        return message
    if isinstance(exc, Py4JJavaError):
        return str(exc.java_exception.getMessage() or exc.java_exception.toString()).strip()
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def spark_error_condition(exc: BaseException) -> str | None:
    """Spark's stable error condition (e.g. `PATH_NOT_FOUND`), if the error has one."""
    if not isinstance(exc, PySparkException):
        return None
    try:
        return exc.getCondition()
    except Py4JJavaError:  # no condition to look up
        return None

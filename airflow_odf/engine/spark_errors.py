"""Spark's errors made readable: the condition and message a user can act on, without the JVM stack trace
— and told apart from an engine that stopped under the request (`engine_stopped`), which is no fault of
the request's input and is worth trying again once the engine is back."""

from __future__ import annotations

import re

from pyspark.errors import PySparkException

from airflow_odf.engine.errors import EngineStoppedError
from airflow_odf.engine.py4j_errors import Py4JJavaError

_MAX_LINES = 12
_POSITION = re.compile(r"; line (\d+) pos (\d+)")

CONTEXT_STOPPED = "its SparkContext was stopped"
_CONTEXT_STOPPED_SIGNS = (
    "Cannot call methods on a stopped SparkContext",
    "SparkContext was shut down",
    "SparkContext has been shutdown",
)
_SESSION_LOST = {  # a Connect server that restarted, or is stopping, no longer knows the request's session
    "INVALID_HANDLE.SESSION_CHANGED": "it was restarted",
    "INVALID_HANDLE.SESSION_NOT_FOUND": "it no longer knows the request's session",
    "INVALID_HANDLE.SESSION_CLOSED": "it closed the request's session",
    "INVALID_HANDLE.OPERATION_NOT_FOUND": "it no longer knows the request's operation",
}
_TRANSPORT_SIGNS = (  # gRPC's own text of a call the server never answered as a Spark error
    "Application error processing RPC",
    "Socket closed",
    "Connection reset",
    "Connection refused",
    "failed to connect to all addresses",
    "Broken pipe",
)


def engine_stopped(exc: BaseException) -> str | None:
    """Why `exc` says the engine went away under the request, or None when it is the request's own error.

    The signs: Spark's SparkContext was stopped (a Connect server or local session shutting down: its gRPC
    service still answers, with `IllegalStateException`s), the server no longer knows the request's
    session (restarted), or the gRPC call itself failed — `UNAVAILABLE` (refused, reset), or gRPC's text
    of a call the server dropped. An error the server raised about the request (a file, the SQL, an S3
    endpoint refusing a connection) comes as a Spark error with its Java class, not as one of these."""
    if isinstance(exc, EngineStoppedError):
        return exc.reason
    text = str(exc)
    if any(sign in text for sign in _CONTEXT_STOPPED_SIGNS):
        return CONTEXT_STOPPED
    condition = spark_error_condition(exc)
    if condition in _SESSION_LOST:
        return _SESSION_LOST[condition]
    status = _grpc_status(exc)
    if status == "UNAVAILABLE":
        return "it became unavailable"
    if status is not None and "debug_error_string" in text and any(s in text for s in _TRANSPORT_SIGNS):
        return "the connection to it broke"
    return None


def _grpc_status(exc: BaseException) -> str | None:
    """The gRPC status name of a Spark Connect client error or of a raw gRPC error (duck-typed: a local
    install may have no grpc), else None."""
    status = getattr(exc, "getGrpcStatusCode", None) or getattr(exc, "code", None)
    if not callable(status):
        return None
    try:
        return getattr(status(), "name", None)
    except Exception:  # not a gRPC error after all
        return None


def spark_error_summary(exc: BaseException) -> str:
    """The first meaningful lines of a Spark error: `[CONDITION] message`, the SQL position and snippet.
    Raises EngineStoppedError instead when the error says the engine stopped (`engine_stopped`): every
    caller would otherwise report it as bad input ("cannot read x.csv"), which is not retried."""
    stopped = engine_stopped(exc)
    if stopped is not None:
        raise EngineStoppedError(stopped) from exc
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

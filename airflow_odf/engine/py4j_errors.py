"""py4j's error classes, or stand-ins where py4j is not installed.

A worker that only talks to a Spark Connect server may install the light `pyspark-client` alone: no JVM
jars, no py4j. The engine catches py4j's errors on its JVM paths (local Spark, `spark-submit`); with
these stand-ins, which nothing raises, `except Py4JJavaError` and `isinstance(e, Py4JError)` still work
there and simply never match.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from py4j.protocol import Py4JError, Py4JJavaError
else:
    try:
        from py4j.protocol import Py4JError, Py4JJavaError
    except ImportError:  # a Connect-only install (pyspark-client)

        class Py4JError(Exception):
            """Stands in for py4j's base error; never raised."""

        class Py4JJavaError(Py4JError):
            """Stands in for py4j's error of a Java exception; never raised."""

            java_exception: Any


__all__ = ["Py4JError", "Py4JJavaError"]

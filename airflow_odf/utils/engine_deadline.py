"""The deadline of every engine request: how long it may run before its Spark work is stopped, and the
one-line `timeout` error it is then answered with (docs/engine-contract.md, "Deadline").

The runners enforce it, each the way its engine can be stopped: the local and Spark Connect runners
cancel the request's Spark jobs and keep their session or server, the spark-submit runners kill the
application. Both sides of the contract use this module, so it imports neither the core nor Spark.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from contextlib import suppress

from airflow_odf.utils.background import BackgroundWork

ENGINE_TIMEOUT_VARIABLE = "ODF_ENGINE_TIMEOUT"
DEFAULT_ENGINE_TIMEOUT = 3600.0
"""One hour: over ten times what the largest request we measure needs (bench/RESULTS.md: a 1 GB ingest
takes under 4 minutes on two cores), while a runaway query holds the engine's cores at most that long."""
TIMEOUT = "timeout"
"""The response's error kind of a request stopped at its deadline."""
JOBS_CANCELLED = "its Spark jobs were cancelled"
APPLICATION_KILLED = "its Spark application was killed"


def resolve_engine_timeout(value: float | str | None = None, source: str = "engine timeout") -> float:
    """The deadline in seconds: `value` (given as `source`), else $ODF_ENGINE_TIMEOUT, else
    DEFAULT_ENGINE_TIMEOUT. A ValueError (one line, naming where the value came from) unless it is a
    number above 0: a deadline that is off, or already past, would make every request run unbounded or
    fail."""
    if value is None or (isinstance(value, str) and not value.strip()):
        value = os.environ.get(ENGINE_TIMEOUT_VARIABLE, "").strip()
        if not value:
            return DEFAULT_ENGINE_TIMEOUT
        source = f"${ENGINE_TIMEOUT_VARIABLE}"
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        given = f"{source} {value!r}" if source else repr(value)
        raise ValueError(f"{given}: expected a number of seconds above 0")
    return seconds


def timeout_error(seconds: float, stopped: str = JOBS_CANCELLED) -> dict[str, str]:
    """The response's `error` of a request stopped at its deadline: one line, saying how to raise it."""
    message = (
        f"the engine request exceeded its deadline of {seconds:g} s (ODF_ENGINE_TIMEOUT, --engine-timeout, "
        f"the operators' engine_timeout); {stopped}"
    )
    return {"kind": TIMEOUT, "message": message}


class Deadline(BackgroundWork):
    """Calls `expire` if the `with` body still runs `seconds` after it started, then every `again`
    seconds until the body ends (`again=None`: once). `passed` says whether it came to that.

    Cancelling is repeated because a cancelled Spark job fails only that job: the request's code may
    start another (a fallback, the next step), which must not run unbounded either. The body's end
    waits for a call of `expire` under way, so nothing is cancelled after the request is over."""

    def __init__(self, seconds: float, expire: Callable[[], object], *, again: float | None = None) -> None:
        super().__init__("odf-engine-deadline", join=True)
        self.seconds = seconds
        self.passed = False
        self._expire = expire
        self._again = again

    def _run(self) -> None:
        wait = self.seconds
        while not self._stop.wait(wait):
            self.passed = True
            with suppress(Exception):  # a session or process already gone: nothing left to stop
                self._expire()
            if self._again is None:
                return
            wait = self._again

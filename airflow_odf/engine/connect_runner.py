"""The Spark Connect engine runner: every request on its own session of a long-running Spark Connect
server (`odf engine serve`), so that a task costs seconds instead of a JVM start.

A session per request: its temporary views (transform inputs, named by alias) and its settings are its
own, and it is released at the end, so several requests run at once on one server, from threads or
processes, and leave nothing behind (the frames a request persists are unpersisted by the job: the
server's cache is one for all sessions). The server's Spark reads and writes the request's paths itself:
it must see the files where this process does (the same machine or a shared volume).

pyspark builds columns, functions and windows for Spark Connect only while the process is in Connect mode
(`SPARK_CONNECT_MODE_ENABLED`, which its own `builder.remote(...)` sets for good): `connect_mode` sets it
while Connect requests run and takes it away after the last, so that the in-process local engine works in
the same process before and after (not during: one engine kind at a time per process).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import grpc
from pyspark.errors import PySparkValueError
from pyspark.sql.connect.client import DefaultChannelBuilder
from pyspark.sql.connect.client.retries import DefaultPolicy
from pyspark.sql.connect.session import SparkSession as ConnectSession

from airflow_odf.engine.errors import ConnectUnreachableError
from airflow_odf.engine.job import run_request
from airflow_odf.engine.session import runtime_conf

CONNECT_TIMEOUT_SECONDS = 5.0
"""How long a server may take to accept the connection before the request fails unstarted."""
_RETRIES = 4
"""Retries of a failed call (50 ms, then 4 times longer each: about 4 s in all), where the client's
default waits 10 minutes for a server that is gone."""


class SparkConnectRunner:
    """Runs engine requests on the Spark Connect server at `remote` (`sc://HOST:PORT[/;params]`), with
    the ODF session options and `conf` (those a running server takes per session; others are skipped)."""

    def __init__(self, remote: str, conf: dict[str, str] | None = None) -> None:
        self.remote = remote
        self.conf = conf

    def run(self, request_json: str, work_dir: Path) -> str:
        with connect_mode():
            spark = open_session(self.remote, self.conf)
            try:
                response = run_request(spark, json.loads(request_json))
            except Exception:
                _fail_if_gone(self.remote)
                raise
            finally:
                with contextlib.suppress(Exception):  # a server that went away has nothing to release
                    spark.stop()  # releases the session on the server: its views, settings and state
            if "error" in response:  # e.g. "cannot read x.csv": perhaps only because the server went away
                _fail_if_gone(self.remote)
            return json.dumps(response)


class _ConnectMode:
    """pyspark's Connect mode, on while any body of `connect_mode()` runs (bodies may overlap); a mode that
    was on before is left on."""

    _VARIABLE = "SPARK_CONNECT_MODE_ENABLED"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bodies = 0
        self._set_here = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._bodies == 0:
                self._set_here = self._VARIABLE not in os.environ
                os.environ[self._VARIABLE] = "1"
            self._bodies += 1
        try:
            yield
        finally:
            with self._lock:
                self._bodies -= 1
                if self._bodies == 0 and self._set_here:
                    del os.environ[self._VARIABLE]


connect_mode = _ConnectMode()


def open_session(remote: str, conf: dict[str, str] | None = None) -> ConnectSession:
    """A new session on the server at `remote`, with the ODF options; ConnectUnreachableError when the
    URL is none or no server accepts a connection within CONNECT_TIMEOUT_SECONDS."""
    shown = _without_params(remote)
    if not _answers(remote):
        raise ConnectUnreachableError(shown, f"no server answered within {CONNECT_TIMEOUT_SECONDS:g} s")
    spark = ConnectSession.builder.remote(remote).config(map=runtime_conf(conf)).create()
    spark.client.set_retry_policies([DefaultPolicy(max_retries=_RETRIES)])
    return spark


def _answers(remote: str) -> bool:
    """Does a server accept a connection at `remote` within CONNECT_TIMEOUT_SECONDS?
    ConnectUnreachableError when `remote` is no Spark Connect URL."""
    try:
        channel = DefaultChannelBuilder(remote).toChannel()
    except PySparkValueError:
        raise ConnectUnreachableError(
            _without_params(remote), "not a Spark Connect URL (sc://HOST:PORT[/;params])"
        ) from None
    try:
        grpc.channel_ready_future(channel).result(timeout=CONNECT_TIMEOUT_SECONDS)
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()
    return True


def _fail_if_gone(remote: str) -> None:
    """After a failed request: ConnectUnreachableError when the server no longer answers, so the failure
    is reported as the server's (and retried), not as the request's (a "broken" input file)."""
    if not _answers(remote):
        raise ConnectUnreachableError(_without_params(remote), "stopped answering during the request")


def _without_params(remote: str) -> str:
    """The URL as messages show it: `sc://HOST:PORT`, without parameters (a token among them)."""
    parsed = urlparse(remote)
    return f"{parsed.scheme}://{parsed.netloc}" if parsed.netloc else remote.split(";")[0]

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
import ipaddress
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import grpc
from pyspark.errors import AnalysisException, PySparkValueError
from pyspark.errors.exceptions.connect import SparkConnectGrpcException
from pyspark.sql.connect.client import DefaultChannelBuilder
from pyspark.sql.connect.client.retries import DefaultPolicy
from pyspark.sql.connect.session import SparkSession as ConnectSession

from airflow_odf.engine.deadline import run_within
from airflow_odf.engine.errors import (
    ENGINE_STOPPED,
    RUN_AGAIN,
    ConnectTokenRefusedError,
    ConnectUnreachableError,
    EngineStoppedError,
)
from airflow_odf.engine.job import CONTRACT_VERSION
from airflow_odf.engine.session import quiet_query_context_logs, runtime_conf
from airflow_odf.engine.spark_errors import engine_stopped
from airflow_odf.utils.engine_deadline import resolve_engine_timeout

CONNECT_TIMEOUT_SECONDS = 5.0
"""How long a server may take to accept the connection before the request fails unstarted."""
_RETRIES = 4
"""Retries of a failed call (50 ms, then 4 times longer each: about 4 s in all), where the client's
default waits 10 minutes for a server that is gone."""


class SparkConnectRunner:
    """Runs engine requests on the Spark Connect server at `remote` (`sc://HOST:PORT[/;params]`), with
    the ODF session options and `conf` (those a running server takes per session; others are skipped).

    A request still running `timeout` seconds after it started (default $ODF_ENGINE_TIMEOUT, else one
    hour) has its session's operations interrupted and is answered with a `timeout` error; the server
    serves on."""

    def __init__(
        self, remote: str, conf: dict[str, str] | None = None, *, timeout: float | None = None
    ) -> None:
        self.remote = remote
        self.conf = conf
        self.timeout = resolve_engine_timeout(timeout)

    def run(self, request_json: str, work_dir: Path) -> str:
        with connect_mode():
            spark = open_session(self.remote, self.conf)
            try:
                try:
                    unseen = _unseen_work_dir(spark, self.remote, work_dir)
                    response = unseen or run_within(spark, json.loads(request_json), self.timeout)
                except Exception as e:
                    _fail_if_gone(self.remote, spark, _stopped(e))
                    raise
                if "error" in response:  # e.g. "cannot read x.csv": perhaps only because the server went away
                    error = response["error"]
                    _fail_if_gone(
                        self.remote, spark, error["message"] if error["kind"] == ENGINE_STOPPED else None
                    )
            finally:
                with contextlib.suppress(Exception):
                    spark.stop()  # releases the session on the server: its views, settings and state
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


class _ChannelBuilder(DefaultChannelBuilder):
    """pyspark's channel builder, which sends a token over a plain connection to `localhost` only (to any
    other host over TLS); this one also to a loopback address (`odf engine serve` prints 127.0.0.1), with
    gRPC's local credentials, which refuse any peer but this machine."""

    @property
    def tls_for_token(self) -> bool:
        """Is it TLS only because of the token (to another machine, without `use_ssl=true`)?"""
        return self.token is not None and not self.use_ssl and not _is_loopback(self.url.hostname or "")

    def toChannel(self) -> grpc.Channel:
        if self.token is None or self.use_ssl or self.tls_for_token:
            return super().toChannel()
        token = grpc.access_token_call_credentials(self.token)
        return self._secure_channel(
            self.endpoint, grpc.composite_channel_credentials(grpc.local_channel_credentials(), token)
        )


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _channel_builder(remote: str) -> _ChannelBuilder:
    """The channel builder of `remote`; ConnectUnreachableError when it is no Spark Connect URL."""
    try:
        return _ChannelBuilder(remote)
    except PySparkValueError:
        raise ConnectUnreachableError(
            _without_params(remote), "not a Spark Connect URL (sc://HOST:PORT[/;params])"
        ) from None


def open_session(remote: str, conf: dict[str, str] | None = None) -> ConnectSession:
    """A new session on the server at `remote`, with the ODF options; ConnectUnreachableError when the
    URL is none or no server accepts a connection within CONNECT_TIMEOUT_SECONDS, and its kind
    ConnectTokenRefusedError when the server refuses the URL's token (or its absence)."""
    shown = _without_params(remote)
    quiet_query_context_logs()
    channel_builder = _channel_builder(remote)
    if not _answers(remote):
        problem = f"no server answered within {CONNECT_TIMEOUT_SECONDS:g} s"
        if channel_builder.tls_for_token:
            problem += " over TLS (a client with a token uses TLS to any host but this machine)"
        raise ConnectUnreachableError(shown, problem)
    try:  # the first call to the server: the session's options
        spark = ConnectSession.builder.channelBuilder(channel_builder).config(map=runtime_conf(conf)).create()
    except SparkConnectGrpcException as e:
        _stop_unopened_session(channel_builder)
        if e.getGrpcStatusCode() == grpc.StatusCode.UNAUTHENTICATED:
            raise ConnectTokenRefusedError(shown, token_sent=channel_builder.token is not None) from None
        stopped = _stopped(e)  # a server stopping as the request came: it answers, without a SparkContext
        if stopped is not None:
            raise ConnectUnreachableError(shown, stopped, RUN_AGAIN) from None
        raise
    spark.client.set_retry_policies([DefaultPolicy(max_retries=_RETRIES)])
    return spark


def _unseen_work_dir(spark: ConnectSession, remote: str, work_dir: Path) -> dict[str, Any] | None:
    """An error response when the server cannot see `work_dir` (another machine, a volume mounted
    elsewhere): the server's Spark reads the staged inputs and writes the output there. A file with a
    name nobody else can know is put there and the server is asked to resolve it."""
    probe = work_dir / f".odf-server-sees-{uuid.uuid4().hex}"
    probe.write_bytes(b"")
    try:
        spark.read.text(str(probe)).schema  # noqa: B018  (resolving the read lists the file, on the server)
    except AnalysisException as e:
        if e.getCondition() != "PATH_NOT_FOUND":
            raise
        message = (
            f"the Spark Connect server {_without_params(remote)} cannot see this process's work directory "
            f"{work_dir}: its Spark reads and writes the request's files at the same paths. Run the server "
            "on this machine, or put the work directory on a volume both see at the same path (the "
            "`work_dir` extra of the odf_repo connection, or ODF_WORK_DIR)"
        )
        return {"version": CONTRACT_VERSION, "error": {"kind": "engine-setup", "message": message}}
    finally:
        probe.unlink(missing_ok=True)
    return None


def _stop_unopened_session(channel_builder: _ChannelBuilder) -> None:
    """Stops the session whose `create()` failed at its first call: pyspark has already made it the
    process's default and this thread's active session, which its helpers (DDL parsing, ...) use, so
    later requests would fail on it."""
    for session in (ConnectSession.getActiveSession(), ConnectSession._get_default_session()):
        if session is not None and session.client._builder is channel_builder:
            session.release_session_on_close = False  # the server has none to release
            session.stop()


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""A client's HTTP/2 connection preface (an empty SETTINGS frame after the magic string)."""
_SETTINGS_FRAME = 4


def _answers(remote: str) -> bool:
    """Does a server accept a connection at `remote` and speak gRPC's HTTP/2 within
    CONNECT_TIMEOUT_SECONDS? ConnectUnreachableError when `remote` is no Spark Connect URL.

    A refused connection says it at once (gRPC would keep trying until the timeout). Over plain TCP the
    server's answer to the HTTP/2 preface — its own SETTINGS frame — is the proof, in a round trip;
    over TLS gRPC's channel is asked, which polls its state every 0.2 s."""
    builder = _channel_builder(remote)
    deadline = time.monotonic() + CONNECT_TIMEOUT_SECONDS
    address = (builder.url.hostname, builder.url.port or builder.default_port())
    try:
        with socket.create_connection(address, CONNECT_TIMEOUT_SECONDS) as sock:
            if builder.use_ssl or builder.tls_for_token:
                return _channel_ready(builder, deadline)
            sock.sendall(_HTTP2_PREFACE)
            header = b""
            while len(header) < 9:  # a frame header: length (3), type (1), flags (1), stream (4)
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                chunk = sock.recv(9 - len(header))
                if not chunk:
                    return False
                header += chunk
            return header[3] == _SETTINGS_FRAME
    except OSError:  # refused, unreachable, or silent until the deadline
        return False


def _channel_ready(builder: _ChannelBuilder, deadline: float) -> bool:
    channel = builder.toChannel()
    try:
        grpc.channel_ready_future(channel).result(timeout=max(deadline - time.monotonic(), 0.001))
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()
    return True


def _fail_if_gone(remote: str, spark: ConnectSession, stopped: str | None) -> None:
    """After a failed request: ConnectUnreachableError when the server no longer answers, or when the
    engine stopped under the request (`stopped`, the one line saying so: a stopping server's SparkContext
    is gone while its gRPC service still answers, a restarted one lost the session), so the failure is
    reported as the server's, in one line naming it (and retried), not as the request's (a "broken"
    input file, a Java stack). A server that is gone or going keeps no session to release: stopping
    `spark` then only closes its channel."""
    if not _answers(remote):
        error = ConnectUnreachableError(_without_params(remote), "stopped answering during the request")
    elif stopped is not None:
        error = ConnectUnreachableError(_without_params(remote), stopped, RUN_AGAIN)
    else:
        return
    spark.release_session_on_close = False
    raise error from None


def _stopped(e: BaseException) -> str | None:
    """The one line of an error that says the engine stopped under the request, else None."""
    reason = engine_stopped(e)
    return None if reason is None else str(EngineStoppedError(reason))


def _without_params(remote: str) -> str:
    """The URL as messages show it: `sc://HOST:PORT`, without parameters (a token among them)."""
    parsed = urlparse(remote)
    return f"{parsed.scheme}://{parsed.netloc}" if parsed.netloc else remote.split(";")[0]

"""A Spark Connect server for the `spark-connect` engine (`odf engine serve`, and the tests' fixture).

The server is Spark's own `SparkConnectServer` (in the connect jar of the full pyspark or of
$SPARK_HOME), run by that installation's `spark-submit` in a child JVM with the ODF session options
(`airflow_odf.utils.spark_conf`) as defaults for every client session. The core never imports pyspark:
the installation is found on disk (`fast_start.spark_home`).

We choose the port (a free one for port 0) and forbid Spark to move to another one when it is taken
(`spark.connect.grpc.port.maxRetries=0`), so the server is ready exactly when that port accepts
connections — whatever Spark's log level. Stopping sends SIGTERM to the server's process group (Spark
stops its context in its shutdown hook) and SIGKILL if it has not exited after `STOP_TIMEOUT`.

A server with a token requires it of every client (Spark's pre-shared bearer token). The token goes to
the server as its conf `spark.connect.authenticate.token` in a properties file only its owner can read
(mode 0600 in a 0700 folder), removed as soon as the server accepts connections: never on its command
line, which `ps` shows to every user of the machine, and never in its environment, which a query could
read (`reflect('java.lang.System', 'getenv', ...)`) and which no process can take back from a running
JVM. In the server, Spark's redaction (`spark.redaction.regex`: names with "token") hides it from
`SET`, the JVM guard's interceptor hides it from a client's `spark.conf.get`, and the guard refuses the
reflection that reads the JVM's system properties, where spark-submit copies every conf
(`airflow_odf.utils.jvm_guard`). S3 keys in its conf (`S3A_SECRET_KEYS`, `odf engine serve --s3a`) go
in the same file.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from airflow_odf.odf.engine_client.fast_start import (
    fast_start_conf,
    is_local_master,
    java_executable,
    local_spark_problem,
    spark_home,
)
from airflow_odf.odf.errors import OdfError
from airflow_odf.utils.jvm_guard import with_sql_guard
from airflow_odf.utils.s3a import split_secrets, with_executor_keys, write_secret_properties
from airflow_odf.utils.spark_conf import ODF_SPARK_CONF

_log = logging.getLogger(__name__)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
START_TIMEOUT = 120.0  # a JVM start costs 8-13 s here; a cluster master may take longer to grant executors
STOP_TIMEOUT = 30.0
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")
_PORT_IN_USE_SIGNS = ("BindException", "Address already in use")
TOKEN_VARIABLE = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
"""Where Spark's Connect server reads its token when its conf has none, and where pyspark's client reads
it when the URL has no `;token=`: kept out of the server's environment (a query could read it there)."""
TOKEN_CONF = "spark.connect.authenticate.token"
"""The server's token as its conf, read from the properties file (`ConnectServer.start`)."""


class ConnectServerError(OdfError):
    """The server cannot start (no pyspark, Java or connect jar; port in use) or stopped by itself."""


def connect_jar(home: Path) -> Path | None:
    """The Spark Connect server jar of a Spark installation, if it has one."""
    return next(iter(sorted((home / "jars").glob("spark-connect_*.jar"))), None)


def free_port(host: str) -> int:
    """A port on `host` that nothing listens on now."""
    with socket.socket(_family(host)) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(_family(host)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds it
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _accepts_connections(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


class ConnectServer:
    """One Spark Connect server process on `host:port` (port 0: a free one) with Spark master `master`.

    `conf` comes after the ODF session options, so it can change any of them. With a `token`, clients
    must send it (`sc://HOST:PORT/;token=TOKEN`); without, the server requires none, whatever this
    process's environment says. `log` receives each line the server writes (its stdout and stderr); the
    last lines explain a failed start."""

    def __init__(
        self,
        master: str = "local[*]",
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        conf: Mapping[str, str] | None = None,
        log: Callable[[str], None] = _log.debug,
        token: str | None = None,
    ) -> None:
        self.master = master
        self.host = host
        self.port = port
        # the S3 keys also for the executors' Arrow client: clients read them back redacted
        self.conf, self._secrets = split_secrets(with_executor_keys(dict(conf or {})))
        self._secrets_dir: Path | None = None
        self.token = token
        self.log = log
        self._process: subprocess.Popen[str] | None = None
        self._pump: threading.Thread | None = None
        self._tail: deque[str] = deque(maxlen=40)

    @property
    def url(self) -> str:
        """The `sc://HOST:PORT` URL clients connect to (a wildcard address is advertised by host name)."""
        host = socket.getfqdn() if self.host in _WILDCARD_HOSTS else self.host
        return f"sc://[{host}]:{self.port}" if ":" in host else f"sc://{host}:{self.port}"

    def command(self, home: Path, jar: Path, secrets_file: Path | None = None) -> list[str]:
        """The `spark-submit` command line that runs the server; `secrets_file` holds the conf that must
        not be on it (read in addition to spark-defaults.conf)."""
        # on a local master the server's JVM is the engine: it loads Spark's classes from the machine's
        # class archive (`odf engine warm-up`) when there is one, as the CLI's local session does
        conf = {
            **fast_start_conf(
                with_sql_guard({**ODF_SPARK_CONF, **self.conf}, connect_server=True), self.master, None
            ),
            "spark.connect.grpc.binding.address": self.host or "0.0.0.0",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.connect.grpc.port.maxRetries": "0",
        }
        cmd = [str(home / "bin" / "spark-submit"), "--master", self.master, "--name", "odf-engine-serve"]
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        if secrets_file is not None:
            cmd += ["--properties-file", str(secrets_file), "--load-spark-defaults"]
        return [*cmd, "--class", SERVER_CLASS, str(jar)]

    def start(self, timeout: float = START_TIMEOUT, cancel: threading.Event | None = None) -> str:
        """Starts the server and returns its URL once it accepts connections (or as soon as `cancel` is
        set). Fails with one line naming the problem; a server that did not come up is stopped."""
        home = self._check_installation()
        if self.port == 0:
            self.port = free_port(self.host or "0.0.0.0")
        elif _port_in_use(self.host or "0.0.0.0", self.port):
            raise ConnectServerError(self._port_taken())
        env = {  # no variable that holds the token (`odf engine serve`'s $ODF_ENGINE_TOKEN, a URL with it)
            key: value
            for key, value in os.environ.items()
            if key != TOKEN_VARIABLE and not (self.token and self.token in value)
        }
        if is_local_master(self.master):  # executors elsewhere must reach a cluster driver: no loopback
            env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        jar = connect_jar(home)
        assert jar is not None  # checked by _check_installation
        secrets = {**self._secrets, **({TOKEN_CONF: self.token} if self.token else {})}
        secrets_file = None
        if secrets:
            self._secrets_dir = Path(tempfile.mkdtemp(prefix="odf-engine-serve-"))  # mode 0700
            secrets_file = write_secret_properties(self._secrets_dir / "secrets.properties", secrets)
        self._process = subprocess.Popen(
            self.command(home, jar, secrets_file),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # a terminal's Ctrl-C reaches us; we stop the server in order
        )
        self._pump = threading.Thread(target=self._pump_output, name="connect-server-log", daemon=True)
        self._pump.start()
        try:
            self._wait_ready(timeout, cancel)
        except BaseException:
            self.stop()
            raise
        self._remove_secrets()  # read when the server started: no copy outlives its start
        return self.url

    def _check_installation(self) -> Path:
        """The Spark installation to run, after checking it has Spark's jars, the connect jar and Java."""
        problem = local_spark_problem()
        if problem is not None:
            raise ConnectServerError(f"cannot start a Spark Connect server: {problem}")
        home = spark_home()
        assert home is not None  # local_spark_problem found its jars
        if connect_jar(home) is None:
            raise ConnectServerError(
                f"cannot start a Spark Connect server: {home / 'jars'} has no spark-connect_*.jar "
                "(pyspark >= 4 has it; for a Spark installation in SPARK_HOME, use one built with Connect)"
            )
        java = java_executable()
        if java is None or not java.exists():
            raise ConnectServerError(
                "cannot start a Spark Connect server: no Java found (install Java 17 or 21, and put it "
                "on PATH or set JAVA_HOME)"
            )
        return home

    def _pump_output(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            self._tail.append(line.rstrip())
            self.log(line.rstrip())

    def _wait_ready(self, timeout: float, cancel: threading.Event | None) -> None:
        deadline = time.monotonic() + timeout
        probe_host = "127.0.0.1" if self.host in _WILDCARD_HOSTS else self.host
        while not _accepts_connections(probe_host, self.port):
            code = self.exit_code()
            if code is not None:
                assert self._pump is not None
                self._pump.join(timeout=5.0)  # the server's last lines explain why
                raise ConnectServerError(self._start_failure(code))
            if cancel is not None and cancel.is_set():
                return
            if time.monotonic() > deadline:
                raise ConnectServerError(
                    f"the Spark Connect server for {self.url} did not accept connections within "
                    f"{timeout:.0f} s; its last output: {self._last_error()}"
                )
            time.sleep(0.2)

    def _start_failure(self, code: int) -> str:
        if any(sign in line for line in self._tail for sign in _PORT_IN_USE_SIGNS):
            return self._port_taken()
        return f"the Spark Connect server stopped while starting (exit code {code}): {self._last_error()}"

    def _port_taken(self) -> str:
        return (
            f"port {self.port} on {self.host} is in use: stop what listens there or choose another "
            "port (--port, 0 picks a free one)"
        )

    def _last_error(self) -> str:
        """The server's last line that names an error (else its last line): what a user needs to see."""
        lines = [line for line in self._tail if line.strip()]
        errors = [line for line in lines if "Exception" in line or "Error" in line]
        return (errors or lines or ["(no output)"])[-1].strip()

    def _remove_secrets(self) -> None:
        """Removes the properties file of the token and S3 keys (spark-submit reads it as it starts)."""
        if self._secrets_dir is not None:
            shutil.rmtree(self._secrets_dir, ignore_errors=True)
            self._secrets_dir = None

    def exit_code(self) -> int | None:
        """The server process's exit code, or None while it runs (or before it started)."""
        return None if self._process is None else self._process.poll()

    def stop(self) -> None:
        """Stops the server and its JVM: SIGTERM to its process group, SIGKILL after `STOP_TIMEOUT`."""
        process, self._process = self._process, None
        self._remove_secrets()
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            process.wait()

    def __enter__(self) -> ConnectServer:
        self.start()
        return self

    def __exit__(
        self, _type: type[BaseException] | None, _value: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()

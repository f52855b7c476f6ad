"""The engine options shared by the `odf` commands that run Spark (`--engine`, `--master`, `--remote`),
`odf engine warm-up` and `odf engine serve`.

The engine is the in-process local Spark (default), `spark-submit` (`--engine spark-submit --master
URL`) or a Spark Connect server (`--engine spark-connect --remote sc://HOST:PORT`), also chosen with
$ODF_ENGINE, $ODF_SPARK_MASTER and $ODF_SPARK_REMOTE. The runner is created on first use, so a command
that turns out not to need Spark never imports pyspark nor starts a JVM.

`--spark-s3a` (or $ODF_SPARK_S3A=1) lets the local and spark-submit engines reach an `s3://` repository
themselves over `s3a://`, with the jars of `scripts/s3a-jars` and the settings of the environment's
`AWS_*` variables (`spark_s3a_conf`); a Spark Connect server gets them when it starts (`odf engine
serve --s3a`).

`--engine-timeout SECONDS` (or $ODF_ENGINE_TIMEOUT; default one hour) is each engine request's
deadline: a request still running then has its Spark jobs cancelled (its spark-submit application
killed), and the command fails with one line, committing nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_odf.cli.errors import CommandError
from airflow_odf.odf.engine_client.connect_server import (
    DEFAULT_PORT,
    TOKEN_VARIABLE,
    ConnectServer,
    ConnectServerError,
)
from airflow_odf.odf.storage.url import SPARK_S3A_ENV, environment_s3a_conf, spark_s3a_conf
from airflow_odf.utils.engine_deadline import (
    DEFAULT_ENGINE_TIMEOUT,
    ENGINE_TIMEOUT_VARIABLE,
    resolve_engine_timeout,
)
from airflow_odf.utils.s3a import with_s3a_conf

if TYPE_CHECKING:
    from airflow_odf.odf.engine_client.runner import EngineRunner

ENGINES = ("local", "spark-submit", "spark-connect")
SERVE_TOKEN_VARIABLE = "ODF_ENGINE_TOKEN"


def engine_options() -> argparse.ArgumentParser:
    """A parent parser with `--engine`, `--master`, `--remote`, `--spark-s3a` and `--engine-timeout`."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--engine", choices=ENGINES, default=os.environ.get("ODF_ENGINE", "local"))
    parent.add_argument("--master", default=os.environ.get("ODF_SPARK_MASTER"), help="Spark master URL")
    parent.add_argument(
        "--remote",
        default=os.environ.get("ODF_SPARK_REMOTE"),
        help="the Spark Connect server of --engine spark-connect, sc://HOST:PORT (default $ODF_SPARK_REMOTE)",
    )
    parent.add_argument(
        "--spark-s3a",
        action=SparkS3aFlag,
        help="the engine reads and writes an s3:// repository itself over s3a:// (as $ODF_SPARK_S3A=1; "
        "the jars come from scripts/s3a-jars, the settings from the AWS_* variables)",
    )
    parent.add_argument(
        "--engine-timeout",
        type=timeout_seconds,
        default=os.environ.get(ENGINE_TIMEOUT_VARIABLE) or None,  # checked by `timeout_seconds` when used
        metavar="SECONDS",
        help=f"each engine request's deadline: then its Spark jobs are cancelled and the command fails "
        f"(default ${ENGINE_TIMEOUT_VARIABLE}, else {DEFAULT_ENGINE_TIMEOUT:g})",
    )
    return parent


def timeout_seconds(text: str) -> float:
    """An argparse type for `--engine-timeout` (also applied to $ODF_ENGINE_TIMEOUT, its default)."""
    try:
        return resolve_engine_timeout(text, "")
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e} (--engine-timeout, ${ENGINE_TIMEOUT_VARIABLE})") from None


class SparkS3aFlag(argparse.Action):
    """`--spark-s3a`: sets $ODF_SPARK_S3A for this command, which every repository it opens reads
    (`engine_scheme`), whichever of its subcommands opens it."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        os.environ[SPARK_S3A_ENV] = "1"


def connect_remote(remote: str | None) -> str:
    """The `sc://` URL of `--engine spark-connect`, or a clear error when it is missing or malformed."""
    if not remote:
        raise CommandError(
            "--engine spark-connect needs the server's URL: --remote sc://HOST:PORT or $ODF_SPARK_REMOTE "
            "(start a server with `odf engine serve`)"
        )
    if not remote.startswith("sc://"):
        raise CommandError(f"--remote {remote}: expected a Spark Connect URL, sc://HOST:PORT")
    return remote


class LazyRunner:
    """The engine runner the options ask for, created when a request first needs it."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._engine: str = args.engine
        self._master: str = args.master or "local[*]"
        self._remote = connect_remote(args.remote) if self._engine == "spark-connect" else None
        self._repository: str | None = getattr(args, "repo", None)
        self._timeout: float | None = args.engine_timeout
        self._runner: EngineRunner | None = None
        # what the runner raises when it cannot start a request (no Connect server)
        self._start_error: type[Exception] | None = None

    def run(self, request_json: str, work_dir: Path) -> str:
        if self._runner is None:
            self._runner = self._create()
        if self._start_error is None:
            return self._runner.run(request_json, work_dir)
        from airflow_odf.odf.engine_client.runner import EngineRunError

        try:
            return self._runner.run(request_json, work_dir)
        except self._start_error as e:  # an engine error: reported as the core's, in one line
            raise EngineRunError(str(e)) from None

    def _s3a_conf(self) -> dict[str, str]:
        """The s3a jars and settings when the repository is in S3 and s3a is on (`--spark-s3a`)."""
        return spark_s3a_conf(self._repository) if self._repository else {}

    def _create(self) -> EngineRunner:
        if self._remote is not None:
            # pyspark's Connect client warns on every import that it does not yet fully support pandas 3:
            # noise on the command's stderr, whose errors are one line each
            warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
            from airflow_odf.engine.connect_runner import ConnectUnreachableError, SparkConnectRunner

            self._start_error = ConnectUnreachableError
            return SparkConnectRunner(self._remote, timeout=self._timeout)  # the Connect client only
        if self._engine == "spark-submit":
            from airflow_odf.odf.engine_client.runner import SparkSubmitRunner

            return SparkSubmitRunner(
                self._master,
                conf=self._s3a_conf(),
                log=lambda line: print(line, file=sys.stderr),
                timeout=self._timeout,
            )
        from airflow_odf.odf.engine_client.fast_start import fast_start_conf
        from airflow_odf.odf.engine_client.runner import require_local_spark

        require_local_spark()
        from airflow_odf.engine.local_runner import LocalSparkRunner  # imports pyspark: only when needed

        conf = fast_start_conf(self._s3a_conf(), self._master, None)
        return LocalSparkRunner(self._master, conf, timeout=self._timeout)


def cmd_engine_warm_up(args: argparse.Namespace) -> None:
    from airflow_odf.odf.engine_client.warm_up import build_class_archive

    archive = build_class_archive(args.master, log=lambda line: print(line, file=sys.stderr))
    size = archive.stat().st_size / 2**20
    print(f"{archive} ({size:.0f} MiB): used by local spark-submit jobs from now on")


def spark_conf_item(text: str) -> tuple[str, str]:
    """An argparse type for `--conf key=value`."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected key=value, e.g. spark.driver.memory=4g")
    return key.strip(), value


def port_number(text: str) -> int:
    """An argparse type for `--port`: 0 (a free port) to 65535."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a port number, 0 to 65535 (0 picks a free one)")
    return int(text)


def cmd_engine_serve(args: argparse.Namespace) -> None:
    """Runs a Spark Connect server in the foreground: its URL on stdout once it accepts connections (never
    with the token), its log on stderr, until SIGTERM or SIGINT stop it (exit code 0)."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: stop.set())
    token = args.token or os.environ.get(SERVE_TOKEN_VARIABLE) or os.environ.get(TOKEN_VARIABLE) or None
    conf = dict(args.conf)
    if args.s3a:  # keys go to the server in a file only this user can read (`ConnectServer`)
        conf = with_s3a_conf(conf, environment_s3a_conf())
    server = ConnectServer(
        args.master,
        args.host,
        args.port,
        conf,
        log=lambda line: print(line, file=sys.stderr),
        token=token,
    )
    try:
        url = server.start(cancel=stop)
        if not stop.is_set():
            if token:  # logged before the URL is out: whoever reads the URL finds the hint in the log
                print(
                    f"clients must send the server's token: {url}/;token=TOKEN, or the password of the "
                    "spark_connect connection",
                    file=sys.stderr,
                    flush=True,
                )
            print(url, flush=True)
        while not stop.wait(0.5):
            code = server.exit_code()
            if code is not None:
                raise ConnectServerError(
                    f"the Spark Connect server at {url} stopped by itself (exit code {code})"
                )
    finally:
        server.stop()


def register(groups: Any) -> None:
    """Adds `engine warm-up` and `engine serve` to the `odf` parser."""
    engine = groups.add_parser(
        "engine", help="prepare or serve the Spark engine of this machine"
    ).add_subparsers(dest="engine_command", required=True)
    p = engine.add_parser(
        "warm-up", help="make the class archive that lets small local spark-submit jobs start faster"
    )
    p.add_argument("--master", default="local[*]", help="a local Spark master (default local[*])")
    p.set_defaults(func=cmd_engine_warm_up)
    p = engine.add_parser(
        "serve",
        help="run a Spark Connect server for --engine spark-connect: prints its sc:// URL when ready, "
        "stops on SIGTERM",
    )
    p.add_argument("--master", default="local[*]", help="the server's Spark master (default local[*])")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help=f"the port (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    p.add_argument(
        "--conf",
        type=spark_conf_item,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark option of the server (repeatable), e.g. spark.driver.memory=4g",
    )
    p.add_argument(
        "--s3a",
        action="store_true",
        help="give the server Spark's S3 connector (the jars of scripts/s3a-jars) and the settings of the "
        "AWS_* variables (AWS_ENDPOINT_URL, AWS_REGION, keys), for clients working on s3:// repositories",
    )
    p.add_argument(
        "--token",
        help=f"require this token of every client (default ${SERVE_TOKEN_VARIABLE}, then ${TOKEN_VARIABLE}; "
        "the variable keeps it off the command line, which every user of the machine can see)",
    )
    p.set_defaults(func=cmd_engine_serve)

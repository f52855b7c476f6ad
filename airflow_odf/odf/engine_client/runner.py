"""How the core runs an engine request: any object with `run(request_json, work_dir) -> response_json`.

Two runners exist: the in-process `airflow_odf.engine.local_runner.LocalSparkRunner` (tests, CLI) and
`SparkSubmitRunner` here, which builds the `spark-submit` command line — the job script, the
`--py-files` archive of this package (so executors on a real cluster can import it) and the request /
response file arguments. The Airflow layer passes the same pieces to the Spark provider's hook.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import airflow_odf
from airflow_odf.odf.engine_client.contract import CONTRACT_VERSION
from airflow_odf.odf.engine_client.fast_start import fast_start_conf, local_spark_problem
from airflow_odf.odf.engine_client.spark_logging import with_log_level
from airflow_odf.odf.errors import OdfError
from airflow_odf.utils.engine_deadline import (
    APPLICATION_KILLED,
    Deadline,
    resolve_engine_timeout,
    timeout_error,
)
from airflow_odf.utils.jvm_guard import with_sql_guard
from airflow_odf.utils.parent_death import parent_death_preexec
from airflow_odf.utils.s3a import split_secrets, write_secret_properties
from airflow_odf.utils.spark_conf import DEFAULT_SPARK_LOG_LEVEL

_log = logging.getLogger(__name__)
PACKAGE_DIR = Path(airflow_odf.__file__).resolve().parent
STOP_GRACE_SECONDS = 10.0
"""How long a job stopped at its deadline (SIGTERM: its SparkContext stops, the cluster frees its
executors) may take to end before it is killed outright."""


class EngineRunError(OdfError):
    """The engine process failed before it could answer (crash, missing spark-submit, ...)."""


class EngineDeadlineError(EngineRunError):
    """A spark-submit job still ran at its deadline and was stopped (`run` answers it as a `timeout`
    response; `submit` of several requests raises it)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(timeout_error(seconds, APPLICATION_KILLED)["message"])
        self.seconds = seconds


def timeout_response(seconds: float) -> str:
    """The response of a request whose spark-submit application was killed at its deadline."""
    return json.dumps({"version": CONTRACT_VERSION, "error": timeout_error(seconds, APPLICATION_KILLED)})


def require_local_spark() -> None:
    """Fails with what to install when this machine cannot start a local Spark session (called before
    the in-process engine imports pyspark: the Spark Connect client alone has the module, not Spark)."""
    problem = local_spark_problem()
    if problem is not None:
        raise EngineRunError(problem)


class EngineRunner(Protocol):
    def run(self, request_json: str, work_dir: Path) -> str: ...


def job_script() -> Path:
    """The spark-submit application: the engine's job module, run as a script."""
    return PACKAGE_DIR / "engine" / "job.py"


def package_archive(dest_dir: Path) -> Path:
    """A zip of the `airflow_odf` package for `--py-files`, named by its content hash (built once)."""
    files = sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)
    digest = hashlib.sha3_256()
    for path in files:
        digest.update(str(path.relative_to(PACKAGE_DIR)).encode() + b"\0" + path.read_bytes())
    archive = dest_dir / f"airflow_odf-{digest.hexdigest()[:16]}.zip"
    if not archive.exists():
        dest_dir.mkdir(parents=True, exist_ok=True)
        tmp = archive.with_suffix(f".tmp{os.getpid()}")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in files:
                zf.write(path, Path("airflow_odf") / path.relative_to(PACKAGE_DIR))
        os.replace(tmp, archive)
    return archive


class SparkSubmitRunner:
    """Runs the engine job through `spark-submit` (client mode on a cluster, or `local[*]`).

    With `fast_start` (default), small jobs on a local master start their JVM with the options of
    the `fast_start` module (class archive, client JIT), which change how fast the job starts, not what
    it does. Spark logs at WARN unless `conf` sets `spark.log.level`. A job still running `timeout`
    seconds after its submit (default $ODF_ENGINE_TIMEOUT, else one hour; the JVM's start counts) is
    stopped, and its request answered with a `timeout` error."""

    def __init__(
        self,
        master: str = "local[*]",
        *,
        spark_submit: str = "spark-submit",
        conf: dict[str, str] | None = None,
        extra_args: Sequence[str] = (),
        log: Callable[[str], None] = _log.info,
        fast_start: bool = True,
        timeout: float | None = None,
    ) -> None:
        self.master = master
        self.spark_submit = spark_submit
        self.conf = conf or {}
        self.extra_args = list(extra_args)
        self.log = log
        self.fast_start = fast_start
        self.timeout = resolve_engine_timeout(timeout)

    def command(
        self,
        requests: Sequence[tuple[Path, Path]],
        archive: Path,
        conf: Mapping[str, str] | None = None,
        secrets_file: Path | None = None,
    ) -> list[str]:
        """The command line of one job answering each (request, response) pair in turn; `secrets_file`
        holds the conf that must not be on it (read in addition to spark-defaults.conf)."""
        cmd = [self.spark_submit, "--master", self.master, "--name", "airflow-odf-ingest"]
        job_conf = with_sql_guard({"spark.ui.enabled": "false", **(self.conf if conf is None else conf)})
        for key, value in job_conf.items():
            cmd += ["--conf", f"{key}={value}"]
        if secrets_file is not None:
            cmd += ["--properties-file", str(secrets_file), "--load-spark-defaults"]
        cmd += ["--py-files", str(archive), *self.extra_args, str(job_script())]
        for request_path, response_path in requests:
            cmd += ["--request", str(request_path), "--response", str(response_path)]
        return cmd

    def run(self, request_json: str, work_dir: Path) -> str:
        request_path, response_path = work_dir / "request.json", work_dir / "response.json"
        request_path.write_text(request_json, encoding="utf-8")
        conf = with_log_level(self.conf, DEFAULT_SPARK_LOG_LEVEL, work_dir, local_driver=True)
        if self.fast_start:
            conf = fast_start_conf(conf, self.master, request_json)
        try:
            self.submit([(request_path, response_path)], work_dir, conf)
        except EngineDeadlineError as e:
            return timeout_response(e.seconds)
        return response_path.read_text(encoding="utf-8")

    def submit(self, requests: Sequence[tuple[Path, Path]], work_dir: Path, conf: Mapping[str, str]) -> None:
        """Runs one job over the written requests; fails unless every response was written, with
        EngineDeadlineError when the job ran past the deadline. The S3 keys of `conf` go to
        spark-submit in a file only this user can read, never on its command line."""
        public, secrets = split_secrets(dict(conf))
        secrets_file = (
            write_secret_properties(work_dir / "spark-secrets.properties", secrets) if secrets else None
        )
        try:
            self._submit(
                self.command(requests, package_archive(work_dir.parent / "py-files"), public, secrets_file),
                requests,
                work_dir,
            )
        finally:
            if secrets_file is not None:
                secrets_file.unlink(missing_ok=True)

    def _submit(self, cmd: list[str], requests: Sequence[tuple[Path, Path]], work_dir: Path) -> None:
        self.log("spark-submit: " + " ".join(cmd))
        env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
        try:
            proc = subprocess.Popen(  # the job dies with this process, even one killed with SIGKILL
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                cwd=work_dir,
                preexec_fn=parent_death_preexec(),
            )
        except FileNotFoundError:
            raise EngineRunError(
                f"{self.spark_submit} not found: put the virtual environment's bin/ on PATH"
            ) from None
        tail: list[str] = []
        assert proc.stdout is not None
        with Deadline(self.timeout, lambda: stop_process(proc)) as deadline:
            for line in proc.stdout:
                self.log(line.rstrip())
                tail = [*tail[-19:], line.rstrip()]
            code = proc.wait()
        if deadline.passed:
            raise EngineDeadlineError(self.timeout)
        if not all(response_path.exists() for _, response_path in requests):
            raise EngineRunError(
                f"spark-submit exited with code {code} without a response; last output:\n" + "\n".join(tail)
            )


def stop_process(proc: subprocess.Popen[str]) -> None:
    """Stops a spark-submit process: SIGTERM (its shutdown hook stops the SparkContext, so a cluster
    frees the executors), SIGKILL if it has not ended within STOP_GRACE_SECONDS. The job's Python
    driver dies with it (parent-death signal)."""
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()

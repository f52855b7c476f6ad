"""The engine runners of the Airflow layer: engine requests run as `spark-submit` jobs via the Spark
provider, or on the Spark Connect server of a `spark_connect` connection.

The Spark provider's `SparkSubmitHook` builds and runs the command (master and deploy mode from the
Spark connection, default `spark_default`), streams Spark's output into the task log and can kill the
job. We add what the engine contract needs: the job script, this package as `--py-files`, and the
request / response files. A missing Spark connection fails the task clearly — the hook alone would
silently fall back to YARN. On a `local` master, small jobs start with the fast-start JVM options of
`airflow_odf.odf.engine_client.fast_start` (off with `[odf] engine_fast_start = False`). Spark logs at
`[odf] spark_log_level` (default WARN, `spark_logging`). The S3 keys of an s3a conf
(`S3A_SECRET_KEYS`) never reach the command line, which every user of the machine can see: they go to
spark-submit in a properties file only the task's user can read, removed when the job ends. A driver
that runs on this machine (client deploy mode) dies with the task's process, even when that is killed
with SIGKILL (`parent_death`); on a cluster, `on_kill` stops the application the Spark provider's way.
A request still running at its deadline (`timeout`, the operators' `engine_timeout`) is stopped by the
same `on_kill` and answered with a `timeout` error.

A connection of the Spark provider's type `spark_connect` names a long-running Spark Connect server
(`odf engine serve`); its `SparkConnectHook` gives the `sc://` URL with the token (password), user id
(login) and `use_ssl` (extra) as URL parameters, the form Spark Connect clients accept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.exceptions import AirflowNotFoundException
from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook, Connection
from airflow.sdk.configuration import conf as airflow_conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_odf.odf.engine_client.fast_start import fast_start_conf
from airflow_odf.odf.engine_client.runner import (
    STOP_GRACE_SECONDS,
    EngineRunError,
    EngineRunner,
    job_script,
    package_archive,
    timeout_response,
)
from airflow_odf.odf.engine_client.spark_logging import spark_log_level, with_log_level
from airflow_odf.odf.errors import OdfError
from airflow_odf.utils.engine_deadline import Deadline, resolve_engine_timeout
from airflow_odf.utils.jvm_guard import with_sql_guard
from airflow_odf.utils.parent_death import parent_death_preexec
from airflow_odf.utils.s3a import split_secrets, write_secret_properties

SPARK_CONNECT_CONN_TYPE = SparkConnectHook.conn_type


def with_fast_start(conf: dict[str, Any], master: str, request_json: str | None) -> dict[str, Any]:
    """`conf` plus the fast-start JVM options of a job (or, `request_json=None`, of a long-lived local
    session), unless `[odf] engine_fast_start` is off."""
    if not airflow_conf.getboolean("odf", "engine_fast_start", fallback=True):
        return dict(conf)
    return fast_start_conf(conf, master, request_json)


def connection_type(conn_id: str) -> str | None:
    """The type of the Airflow connection `conn_id`, or None when it is not defined."""
    try:
        return BaseHook.get_connection(conn_id).conn_type
    except AirflowNotFoundException:
        return None


class _SubmitHook(SparkSubmitHook):
    """The Spark provider's hook, with a `--properties-file` (the job's secrets) read in addition to
    spark-defaults.conf rather than instead of it (spark-submit's `--load-spark-defaults`, Spark >= 4)."""

    def _build_spark_common_args(self) -> list[str]:
        args = super()._build_spark_common_args()
        return [*args, "--load-spark-defaults"] if self._properties_file else args


class SparkSubmitEngineRunner:
    """Runs engine requests with `SparkSubmitHook` on the cluster of the Spark connection `conn_id`;
    one still running `timeout` seconds after its submit (default $ODF_ENGINE_TIMEOUT, else one hour)
    is killed (`on_kill`) and answered with a `timeout` error."""

    def __init__(
        self,
        conn_id: str = "spark_default",
        *,
        conf: dict[str, Any] | None = None,
        name: str = "odf",
        timeout: float | None = None,
    ) -> None:
        self.conn_id = conn_id
        self.conf = {"spark.ui.enabled": "false", **(conf or {})}
        self.name = name
        self.timeout = resolve_engine_timeout(timeout)
        self._hook: SparkSubmitHook | None = None

    def _connection(self) -> Connection:
        """The Spark connection, as the Spark hook reads it; fails clearly if it is not defined."""
        try:
            return BaseHook.get_connection(self.conn_id)
        except AirflowNotFoundException:
            raise AirflowFailException(
                f"the Spark connection {self.conn_id!r} is not defined: create it (host = the master URL, "
                "e.g. local[*], spark://host:7077, yarn) or pass spark_conn_id"
            ) from None

    def _job_conf(self, connection: Connection, request_json: str, work_dir: Path) -> dict[str, Any]:
        """The job's `--conf`: the task's, Spark's log level (`[odf] spark_log_level`, or the task's
        `spark.log.level`), the fast-start options, the SQL lockdown and the JVM guard (`with_sql_guard`)."""
        host = connection.host or ""
        master = f"{host}:{connection.port}" if connection.port else host
        local_driver = connection.extra_dejson.get("deploy-mode") != "cluster"
        level = airflow_conf.get("odf", "spark_log_level", fallback="")
        try:
            conf = with_log_level(self.conf, spark_log_level(level), work_dir, local_driver=local_driver)
        except OdfError as e:
            raise AirflowFailException(f"[odf] spark_log_level or spark_conf of the task: {e}") from None
        return with_sql_guard(with_fast_start(conf, master, request_json))

    def run(self, request_json: str, work_dir: Path) -> str:
        connection = self._connection()
        request_path, response_path = work_dir / "request.json", work_dir / "response.json"
        request_path.write_text(request_json, encoding="utf-8")
        conf, secrets = split_secrets(self._job_conf(connection, request_json, work_dir))
        secrets_path = work_dir / "spark-secrets.properties"
        self._hook = _SubmitHook(
            conf=conf,
            conn_id=self.conn_id,
            py_files=str(package_archive(work_dir.parent / "py-files")),
            name=self.name,
            application_args=["--request", str(request_path), "--response", str(response_path)],
            properties_file=str(write_secret_properties(secrets_path, secrets)) if secrets else None,
        )
        # again and again: a kill that came before the hook had started spark-submit found nothing to stop
        deadline = Deadline(self.timeout, self.on_kill, again=STOP_GRACE_SECONDS)
        try:  # a local driver dies with this process, also when it is killed with SIGKILL
            with deadline:
                self._hook.submit(str(job_script()), cwd=str(work_dir), preexec_fn=parent_death_preexec())
        except AirflowException as e:
            if not response_path.exists() and not deadline.passed:
                raise EngineRunError(f"the Spark job failed before it answered: {e}") from None
        finally:
            self._hook = None
            secrets_path.unlink(missing_ok=True)
        if deadline.passed:
            return timeout_response(self.timeout)
        if not response_path.exists():
            raise EngineRunError("the Spark job finished without writing its response")
        return response_path.read_text(encoding="utf-8")

    def on_kill(self) -> None:
        """Stops the running job (the Spark provider knows how for each cluster manager)."""
        if self._hook is not None:
            self._hook.on_kill()


class SparkConnectEngineRunner:
    """Runs engine requests on the Spark Connect server of the `spark_connect` connection `conn_id`.

    The server's URL is read when the first request runs (never at parse time); an unreachable server
    fails the task within seconds with a message naming its URL, and the task's retries apply."""

    def __init__(
        self,
        conn_id: str = SparkConnectHook.default_conn_name,
        *,
        conf: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        self.conn_id = conn_id
        self.conf = dict(conf or {})
        self.timeout = resolve_engine_timeout(timeout)
        self._runner: EngineRunner | None = None

    def remote(self) -> str:
        """The server's `sc://` URL with the connection's token, user id and TLS setting."""
        kind = connection_type(self.conn_id)
        if kind != SPARK_CONNECT_CONN_TYPE:
            defined = "is not defined" if kind is None else f"is of type {kind!r}"
            raise AirflowFailException(
                f"engine spark-connect needs a Spark connection of type {SPARK_CONNECT_CONN_TYPE!r}: "
                f"{self.conn_id!r} {defined} (host = the server, e.g. sc://127.0.0.1:15002 of "
                "`odf engine serve`), or pass spark_conn_id"
            )
        try:
            return SparkConnectHook(self.conn_id).get_connection_url()
        except ValueError as e:
            raise AirflowFailException(f"the Spark connection {self.conn_id!r}: {e}") from None

    def run(self, request_json: str, work_dir: Path) -> str:
        from airflow_odf.engine.connect_runner import ConnectUnreachableError, SparkConnectRunner

        if self._runner is None:
            self._runner = SparkConnectRunner(self.remote(), self.conf, timeout=self.timeout)
        try:
            return self._runner.run(request_json, work_dir)
        except ConnectUnreachableError as e:  # retryable: the server may be back by the next try
            raise EngineRunError(str(e)) from None

    def on_kill(self) -> None:
        """Nothing to stop here: a Connect request cannot be cancelled from the client. The server
        finishes it into the killed task's operation folder, and nothing is committed."""

"""The SparkSession the engine runs in, configured for ODF data (`ODF_SPARK_CONF`).

One local session per process: a JVM start costs seconds, so it is reused. A request may also run on a
Spark Connect session (`connect_runner`), which has no SparkContext, RDDs or JVM objects in this process:
the helpers here answer for both kinds.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from functools import cache

from pyspark import StorageLevel
from pyspark.errors import PySparkException
from pyspark.logger import PySparkLogger
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_odf.engine.py4j_errors import Py4JError
from airflow_odf.utils.jvm_guard import with_sql_guard
from airflow_odf.utils.s3a import CLASS_PATH_KEYS, split_secrets
from airflow_odf.utils.spark_conf import DEFAULT_SPARK_LOG_LEVEL, ODF_SPARK_CONF, SPARK_LOG_LEVEL

_HADOOP_PREFIX = "spark.hadoop."
DRIVER_CLASS_PATH = CLASS_PATH_KEYS[0]
_REQUEST_FRAMES: ContextVar[list[DataFrame] | None] = ContextVar("odf_request_frames", default=None)


def runtime_conf(extra_conf: dict[str, str] | None = None) -> dict[str, str]:
    """The ODF options (and `extra_conf`) that a running Spark accepts per session: not the UI's, which
    are fixed when its JVM starts."""
    options = {**ODF_SPARK_CONF, **(extra_conf or {})}
    return {key: value for key, value in options.items() if not key.startswith("spark.ui.")}


class SessionWithoutJars(RuntimeError):
    """The process's SparkSession started without jars a request needs (they load only at its start)."""


QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


@cache  # once per process: every request's session passes here
def quiet_query_context_logs() -> None:
    """PySpark 4 logs each SQL error with a query context as a JSON line on stderr, as the exception is
    made (`PySparkLogger`s of QUERY_CONTEXT_LOGGERS, not propagated). The engine reports every error
    itself, in one line naming where: those lines only repeated it, unasked, in the `odf` command's
    output and the task log."""
    for name in QUERY_CONTEXT_LOGGERS:
        PySparkLogger.getLogger(name).disabled = True


def get_session(master: str | None = None, extra_conf: dict[str, str] | None = None) -> SparkSession:
    """The process's SparkSession, created on first use; `master=None` keeps what spark-submit set.

    The S3 keys of `extra_conf` (`S3A_SECRET_KEYS`) are not given to the builder, which would put them
    on the JVM's command line: like every `spark.hadoop.*` option, they are set on the running session's
    Hadoop configuration (so a reused session gets them too; tasks receive it with their work). A session
    with a `master` gets the JVM guard (`with_sql_guard`, when its jar is built); under spark-submit
    (`master=None`) the runner's command gave it, as a jar loads only when the JVM starts."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    quiet_query_context_logs()
    builder = SparkSession.builder.appName("airflow-odf")
    if master:
        builder = builder.master(master)
    conf = {**ODF_SPARK_CONF, **(extra_conf or {})}
    conf, _ = split_secrets(with_sql_guard(conf) if master else conf)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    _require_jars(spark, conf.get(DRIVER_CLASS_PATH, ""))
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in (extra_conf or {}).items():
        if key.startswith(_HADOOP_PREFIX):
            hadoop.set(key.removeprefix(_HADOOP_PREFIX), value)
    # the level the job was given (spark-submit's --conf, the local engine's conf), else WARN
    spark.sparkContext.setLogLevel(spark.sparkContext.getConf().get(SPARK_LOG_LEVEL, DEFAULT_SPARK_LOG_LEVEL))
    for key, value in runtime_conf().items():  # also on a session spark-submit made
        spark.conf.set(key, value)
    return spark


def _require_jars(spark: SparkSession, wanted: str) -> None:
    """Fails clearly when the session runs without the class path entries of `wanted` (a session
    started earlier in this process without them cannot load them any more)."""
    loaded = set(spark.sparkContext.getConf().get(DRIVER_CLASS_PATH, "").split(os.pathsep))
    missing = [entry for entry in wanted.split(os.pathsep) if entry and entry not in loaded]
    if missing:
        raise SessionWithoutJars(
            f"this process's Spark session started without {', '.join(missing)} (jars load only when a "
            "session starts): run the request in a new process (the odf command, the spark-submit engine)"
        )


@contextmanager
def session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """Sets `conf` on the session for the body (one request's settings), then puts back what was
    there: the session serves later requests with their own."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def is_connect(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect session (the classic session's class is not its base)."""
    return not isinstance(spark, SparkSession)


def context_stopped(spark: SparkSession) -> bool:
    """Whether the SparkContext of a local session has stopped (then any error of the request is the
    engine's, whatever Spark wrapped it in: an analysis fails with INTERNAL_ERROR). A Connect session has
    none in this process: the server's errors say it (`spark_errors.engine_stopped`)."""
    if is_connect(spark):
        return False
    jsc = spark.sparkContext._jsc  # None once stopped from Python
    if jsc is None:
        return True
    try:
        return bool(jsc.sc().isStopped())
    except Py4JError:  # the JVM itself is gone
        return True


def default_parallelism(spark: SparkSession) -> int:
    """The number of cores Spark spreads work over. Spark Connect has no SparkContext to ask: there, a
    `range` without a partition count gets that many partitions, and a tiny job tells the last one's
    number (once per session: a transform asks for its split plan and again for its parts publisher)."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    session_id = spark.session_id
    cores = _CONNECT_CORES.get(session_id)
    if cores is None:
        # the last id is in the last partition; one stage, no aggregation's exchange
        last = spark.range(1 << 16).where(F.col("id") == (1 << 16) - 1).select(F.spark_partition_id())
        cores = last.collect()[0][0] + 1
        with _CONNECT_CORES_LOCK:
            while len(_CONNECT_CORES) >= _CONNECT_CORES_KEPT:  # the oldest sessions' (dicts keep order)
                del _CONNECT_CORES[next(iter(_CONNECT_CORES))]
            _CONNECT_CORES[session_id] = cores
    return cores


_CONNECT_CORES: dict[str, int] = {}
"""Spark Connect session id -> its server's cores (`default_parallelism`); a session per request."""
_CONNECT_CORES_KEPT = 64
_CONNECT_CORES_LOCK = threading.Lock()


def persist_for_request(df: DataFrame) -> DataFrame:
    """`df` persisted until its request ends (`request_frames`). Spark's cache is one for all sessions of
    a Spark Connect server, so a request unpersists its own frames and never clears the whole cache."""
    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    frames = _REQUEST_FRAMES.get()
    if frames is not None:
        frames.append(df)
    return df


@contextmanager
def request_frames() -> Iterator[None]:
    """Around one request: the frames it persisted (`persist_for_request`) are unpersisted at its end."""
    frames: list[DataFrame] = []
    token = _REQUEST_FRAMES.set(frames)
    try:
        yield
    finally:
        _REQUEST_FRAMES.reset(token)
        for df in frames:
            with suppress(PySparkException):  # a Spark Connect server that is gone holds no cache
                df.unpersist()

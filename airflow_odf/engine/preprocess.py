"""Preprocess and input validation of an ingest, as the reference does them (kamu `ingest_common.rs`, writer).

`run_queries` is the Sql preprocess (the input is the view `input`, aliased steps are views, the last step is
the output); `default_preprocess` is the reference's best-effort shaping when a source declares neither a
preprocess nor a read schema; `validate_input` refuses data that would clash with the system columns.
"""

from __future__ import annotations

import uuid
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.py4j_errors import Py4JJavaError
from airflow_odf.engine.session import is_connect
from airflow_odf.engine.spark_errors import spark_error_summary
from airflow_odf.engine.spark_types import quote_identifier
from airflow_odf.utils.sql_policy import StepRefused, check_steps

INPUT_VIEW = "input"
# Merge strategies whose input must not carry the operation-type column (the others take it from the data).
_OP_ASSIGNED_BY_MERGE = ("Append", "Ledger", "Snapshot")
# The reference reads these as UNIX seconds (Int8 is not among them there either).
_UNIX_SECONDS_TYPES = (T.ShortType, T.IntegerType, T.LongType)
_DEFAULT_VOCAB = {
    "offset_column": "offset",
    "operation_type_column": "op",
    "system_time_column": "system_time",
    "event_time_column": "event_time",
}


def run_queries(spark: SparkSession, df: DataFrame, steps: list[dict[str, Any]]) -> DataFrame:
    """Runs the preprocess SQL steps over `df` (view `input`) and returns the last step's result."""
    return run_sql(spark, {INPUT_VIEW: df}, steps, "preprocess")


def run_sql(
    spark: SparkSession, views: dict[str, DataFrame], steps: list[dict[str, Any]], what: str
) -> DataFrame:
    """Runs SQL `steps` in order over the named `views` (names with dots work); the last is the result.

    Aliased steps become views for the later steps. The SQL policy checks every step before the first
    runs, whatever the client checked. A failing step is named by its index and alias.
    """
    if not steps:
        raise EngineInputError("sql", f"{what} has no queries")
    try:
        check_steps([(step["query"], step.get("alias")) for step in steps], list(views))
    except StepRefused as e:
        raise EngineInputError("sql-policy", f"{what} {e}") from None
    for name, frame in views.items():
        frame.createOrReplaceTempView(quote_identifier(name))
    created = list(views)
    try:
        result = None
        for index, step in enumerate(steps, start=1):
            alias = step.get("alias")
            try:
                result = spark.sql(step["query"])
            except (PySparkException, Py4JJavaError) as e:
                name = f"step {index}" + (f" (alias '{alias}')" if alias else "")
                raise EngineInputError(
                    "sql", f"{what} {name} of {len(steps)} failed: {spark_error_summary(e)}"
                ) from None
            if alias:
                result.createOrReplaceTempView(quote_identifier(alias))
                created.append(alias)
        assert result is not None
        return _resolved_now(spark, result)
    finally:
        # The result's plan is resolved already: the views are not needed by it, only by later queries.
        for view in created:
            spark.catalog.dropTempView(view)


def _resolved_now(spark: SparkSession, result: DataFrame) -> DataFrame:
    """`result` reading the views as they are now. A classic frame of SQL is analyzed when made; a Spark
    Connect one is the query's text, analyzed again whenever it runs, when its views are dropped or are
    another file's: so it becomes a view of its own, stored analyzed, named for this call (the session's,
    released with it)."""
    if not is_connect(spark):
        return result
    name = f"odf_sql_result_{uuid.uuid4().hex}"
    result.createOrReplaceTempView(name)
    return spark.table(name)


def default_preprocess(df: DataFrame, merge_kind: str, vocab: dict[str, str]) -> DataFrame:
    """The reference's shaping of data with no preprocess and no read schema (§1.5).

    Columns named like system columns become `_<name>` (op only where the merge assigns it), and the
    event-time column is coerced: integers are UNIX seconds, strings are RFC 3339.
    """
    names = _vocab(vocab)
    renamed = {names["offset_column"], names["system_time_column"]}
    if merge_kind in _OP_ASSIGNED_BY_MERGE:
        renamed.add(names["operation_type_column"])
    event_time = names["event_time_column"]
    columns = [_default_column(f, renamed, event_time) for f in df.schema.fields]
    return df.select(*columns)


def validate_input(df: DataFrame, merge_kind: str, vocab: dict[str, str]) -> None:
    """Refuses data carrying system columns or an event time that is not a date or timestamp (§1.6 step 1)."""
    names = _vocab(vocab)
    forbidden = [names["offset_column"], names["system_time_column"]]
    if merge_kind in _OP_ASSIGNED_BY_MERGE:
        forbidden.append(names["operation_type_column"])
    for name in forbidden:
        if name in df.columns:
            raise EngineInputError(
                "bad-schema",
                f"the data has a column '{name}', which is a system column the engine adds under the "
                f"{merge_kind} merge strategy; rename or drop it in the preprocess step",
            )
    event_time = names["event_time_column"]
    if event_time in df.columns:
        found = df.schema[event_time].dataType
        if not isinstance(found, (T.DateType, T.TimestampType, T.TimestampNTZType)):
            raise EngineInputError(
                "bad-schema",
                f"the event-time column '{event_time}' has type {found.simpleString()}, expected date or "
                f"timestamp; convert it in the preprocess step (e.g. to_timestamp(`{event_time}`))",
            )


def _default_column(field: T.StructField, renamed: set[str], event_time: str) -> Column:
    column = F.col(quote_identifier(field.name))
    if field.name in renamed:
        return column.alias(f"_{field.name}")
    if field.name == event_time:
        if isinstance(field.dataType, _UNIX_SECONDS_TYPES):
            return F.timestamp_seconds(column).alias(field.name)
        if isinstance(field.dataType, T.StringType):
            return F.to_timestamp(column).alias(field.name)
    return column


def _vocab(vocab: dict[str, str]) -> dict[str, str]:
    """The request's vocabulary with every default filled in (a null entry means the default)."""
    return {key: vocab.get(key) or default for key, default in _DEFAULT_VOCAB.items()}

"""The query job: read-only Spark SQL over datasets (`odf sql`, `odf export`; docs/sql.md).

Each table of the request is a temporary view over its Parquet slice files, read with the dataset's
schema (a column added later reads as null in older slices); the views are dropped at the end. Only a
query over the request's tables runs: the SQL policy (`airflow_odf/utils/sql_policy`) checks the statement
before any view is made, whatever the client checked. The result is written as Parquet, CSV or JSON lines
into the request's `out_dir`, nowhere else: a local folder, or (a cluster that shares no disk with the
core) the operation's staging folder in the repository's bucket, `s3a://...`.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.py4j_errors import Py4JJavaError
from airflow_odf.engine.remote_files import is_uri
from airflow_odf.engine.spark_errors import spark_error_condition, spark_error_summary
from airflow_odf.engine.spark_types import arrow_to_spark, quote_identifier
from airflow_odf.utils.sql_policy import SqlRefused, check_query

_RESULT_DIR = "result"
# a name that is no table of the request (unquoted dots read as catalog and namespace)
_UNKNOWN_TABLE = ("TABLE_OR_VIEW_NOT_FOUND", "REQUIRES_SINGLE_PART_NAMESPACE", "SCHEMA_NOT_FOUND")


def query(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    """Runs one query request; raises EngineInputError on a statement that is not a query, an unknown
    table or a failing query."""
    sql = request["sql"]
    views = [table["name"] for table in request["tables"]]
    try:
        check_query(sql, views)
    except SqlRefused as e:
        raise EngineInputError("sql-policy", f"the query: {e}") from None
    for table in request["tables"]:
        _table_frame(spark, table).createOrReplaceTempView(quote_identifier(table["name"]))
    try:
        result = _sql(spark, sql)
        return _written(result, request)
    finally:
        for view in views:
            spark.catalog.dropTempView(view)  # by its name: a quoted one drops nothing


def _table_frame(spark: SparkSession, table: dict[str, Any]) -> DataFrame:
    schema = table.get("schema")
    struct = (
        arrow_to_spark(pa.ipc.read_schema(pa.py_buffer(base64.b64decode(schema))))
        if schema
        else T.StructType([])
    )
    paths = table.get("data_paths") or []
    if not paths:
        return spark.createDataFrame([], struct)
    return spark.read.schema(struct).parquet(*paths)


def _sql(spark: SparkSession, sql: str) -> DataFrame:
    try:
        result = spark.sql(sql)
        result.schema  # noqa: B018  (a Connect frame is analyzed only when asked)
        return result
    except (PySparkException, Py4JJavaError) as e:
        raise _query_error(e) from None


def _query_error(e: BaseException) -> EngineInputError:
    if spark_error_condition(e) in _UNKNOWN_TABLE:
        return EngineInputError("unknown-table", spark_error_summary(e).splitlines()[0])
    return EngineInputError("sql", f"the query failed: {spark_error_summary(e)}")


def _written(result: DataFrame, request: dict[str, Any]) -> dict[str, Any]:
    """Writes the result into `out_dir/result` and answers with its files in order."""
    if request.get("skip"):
        result = result.offset(request["skip"])  # Spark drops them as it goes: nothing is held
    if request.get("max_rows") is not None:
        result = result.limit(request["max_rows"] + 1)
    if request.get("single_file", True):
        result = result.coalesce(1)  # no shuffle: partitions concatenated in order
    target = os.path.join(request["out_dir"], _RESULT_DIR)
    writer = result.write
    fmt = request.get("format", "parquet")
    try:
        if fmt == "parquet":
            writer.parquet(target)
        elif fmt == "csv":
            writer.option("header", True).csv(target)
        elif fmt == "json":
            writer.option("ignoreNullFields", False).json(target)
        else:
            raise EngineInputError("contract", f"query format {fmt!r}: expected parquet, csv or json")
    except (PySparkException, Py4JJavaError) as e:
        raise _query_error(e) from None
    return {"files": _result_files(result.sparkSession, target), "columns": result.columns}


def _result_files(spark: SparkSession, target: str) -> list[str]:
    """The result's files in their order: listed on this disk, or in the bucket (`out_dir` a URI: the
    operation's staging folder, which the core fetches from) by Spark's own file system client, with
    the session's S3 settings (no content is read)."""
    if not is_uri(target):
        return [os.path.join(target, name) for name in sorted(os.listdir(target)) if name.startswith("part-")]
    listing = spark.read.format("binaryFile").option("pathGlobFilter", "part-*").load(target)
    return sorted(row.path for row in listing.select("path").collect())

"""Quality checks on the staged output (docs/checks.md, the request's `checks` in docs/engine-contract.md).

The slice files an ingest or transform just wrote are the view `candidate`; with `dataset`, the view
`dataset` is the dataset's committed slices and the candidate. Each aggregation pass is one query (all
column checks and boolean table checks over one relation: the slice is read once for them), each
failing-rows query one more; the failing rows are asked for only for a check that failed. A pass of
distinct counts (`distinct`: a column) is counted exactly without Spark's aggregation by value where
that pays (engine/exact_distinct.py), else by its query. Every statement is checked by the SQL policy
first, whatever the coordinator checked.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.exact_distinct import count_distinct
from airflow_odf.engine.py4j_errors import Py4JJavaError
from airflow_odf.engine.spark_errors import spark_error_summary
from airflow_odf.utils.sql_policy import SqlRefused, check_query

CANDIDATE = "candidate"
DATASET = "dataset"
_MAX_CELL_CHARS = 200
_COMPARE = {
    "eq": lambda a, b: a == b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
}


def refuse_hostile_checks(checks: dict[str, Any] | None) -> None:
    """Refuses (`sql-policy`) a request whose checks hold a statement the SQL policy refuses: called
    before the job reads or writes anything, whatever the coordinator checked."""
    if not checks:
        return
    relations = [CANDIDATE, DATASET] if checks.get("dataset") else [CANDIDATE]
    for statement in _statements(checks):
        try:
            check_query(statement, relations)
        except SqlRefused as e:
            raise EngineInputError("sql-policy", f"checks: {e}") from None


def evaluate_checks(
    spark: SparkSession, checks: dict[str, Any], candidate_paths: list[str]
) -> list[dict[str, Any]]:
    """`check_results` of the response: `{name, observed, success, failing_rows}` per check."""
    refuse_hostile_checks(checks)  # again, as the statements run now
    candidate = spark.read.parquet(*candidate_paths)
    views = {CANDIDATE: candidate}
    if checks.get("dataset"):
        paths = [*checks.get("dataset_paths", []), *candidate_paths]
        views[DATASET] = spark.read.option("mergeSchema", "true").parquet(*paths)
    _require_columns(candidate, checks)
    limit = int(checks.get("max_failing_rows", 10))
    for name, frame in views.items():
        frame.createOrReplaceTempView(name)
    try:
        results = []
        for one_pass in checks.get("passes", []):
            row = _observed(spark, views, one_pass)
            for i, check in enumerate(one_pass["checks"]):
                observed = _plain(row[i])
                success = _meets(observed, check.get("conditions", []))
                rows = []
                if not success and check.get("failing_rows"):
                    rows = _rows(_run(spark, check["failing_rows"], f"check '{check['name']}'"), limit)
                results.append(
                    {"name": check["name"], "observed": observed, "success": success, "failing_rows": rows}
                )
        for query in checks.get("queries", []):
            found = _run(spark, query["query"], f"check '{query['name']}'")
            rows = _rows(found, limit)
            count = len(rows) if len(rows) < limit else found.count()
            results.append(
                {"name": query["name"], "observed": count, "success": count == 0, "failing_rows": rows}
            )
        return results
    finally:
        for name in views:
            spark.catalog.dropTempView(name)


def _observed(spark: SparkSession, views: dict[str, DataFrame], one_pass: dict[str, Any]) -> list[Any]:
    """The pass's observed values, one per check: a `distinct` pass counted exactly without Spark's
    aggregation by value where that pays (`exact_distinct`), any other — or one whose count failed — by
    its query."""
    column, frame = one_pass.get("distinct"), views.get(one_pass["relation"])
    kinds = [check.get("check") for check in one_pass["checks"]]
    if column is not None and frame is not None and set(kinds) <= {"distinct_check", "unique_check"}:
        try:
            counts = count_distinct(frame, column)
        except (PySparkException, Py4JJavaError):
            counts = None  # e.g. keys beyond `spark.driver.maxResultSize`: the query says what fails
        if counts is not None:
            values, distinct = counts
            return [distinct if kind == "distinct_check" else values - distinct for kind in kinds]
    return list(_run(spark, one_pass["query"], f"checks over {one_pass['relation']}").collect()[0])


def failed(results: list[dict[str, Any]]) -> bool:
    return any(not r["success"] for r in results)


def _statements(checks: dict[str, Any]) -> list[str]:
    passes = checks.get("passes", [])
    found = [p["query"] for p in passes]
    found += [c["failing_rows"] for p in passes for c in p["checks"] if c.get("failing_rows")]
    return found + [q["query"] for q in checks.get("queries", [])]


def _require_columns(candidate: DataFrame, checks: dict[str, Any]) -> None:
    """A column check of a column the data lacks is named, with the columns there are."""
    columns = set(candidate.columns)
    for one_pass in checks.get("passes", []):
        for check in one_pass["checks"]:
            column = check.get("column")
            if column is not None and column not in columns:
                raise EngineInputError(
                    "missing-column",
                    f"check '{check['name']}': the data has no column '{column}' (columns: "
                    f"{', '.join(candidate.columns)})",
                )


def _run(spark: SparkSession, statement: str, what: str) -> DataFrame:
    try:
        return spark.sql(statement)
    except (PySparkException, Py4JJavaError) as e:
        raise EngineInputError("sql", f"{what} failed: {spark_error_summary(e)}") from None


def _rows(frame: DataFrame, limit: int) -> list[dict[str, Any]]:
    try:
        found = frame.limit(limit).collect()
    except (PySparkException, Py4JJavaError) as e:
        raise EngineInputError(
            "sql", f"a check's failing rows could not be read: {spark_error_summary(e)}"
        ) from None
    return [{k: _plain(v) for k, v in row.asDict(recursive=True).items()} for row in found]


def _plain(value: Any) -> Any:
    """A value as JSON holds it: numbers stay numbers, times their ISO form, the rest text (cut)."""
    if value is None or isinstance(value, bool | int | str):
        return value if not isinstance(value, str) else value[:_MAX_CELL_CHARS]
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() else str(value)
    if isinstance(value, dt.datetime):  # Spark hands timestamps over naive, in this process's zone
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)[:_MAX_CELL_CHARS]


def _meets(observed: Any, conditions: list[list[Any]]) -> bool:
    """Whether the observed value meets every `[op, bound]`; no value (NULL) meets none."""
    if observed is None:
        return False
    for op, bound in conditions:
        try:
            if not _COMPARE[op](observed, bound):
                return False
        except (TypeError, KeyError):
            return False
    return True

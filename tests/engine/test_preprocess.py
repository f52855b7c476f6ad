"""Preprocess queries, the reference's default preprocess, and input validation."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.preprocess import default_preprocess, run_queries, validate_input

VOCAB = {
    "offset_column": "offset",
    "operation_type_column": "op",
    "system_time_column": "system_time",
    "event_time_column": "event_time",
}


def _frame(spark: SparkSession, ddl: str, rows: list[tuple]) -> DataFrame:
    return spark.createDataFrame(rows, ddl)


def test_queries_run_in_order_with_aliases_that_contain_dots(spark: SparkSession) -> None:
    df = _frame(spark, "city string, population long", [("A", 10), ("B", 25), ("C", 40)])
    steps = [
        {"query": "SELECT city, population * 2 AS doubled FROM input", "alias": "step.one"},
        {"query": "SELECT city, doubled FROM `step.one` WHERE doubled > 30", "alias": "big"},
        {"query": "SELECT upper(city) AS city, doubled FROM big ORDER BY city DESC"},
    ]
    result = run_queries(spark, df, steps)
    assert [tuple(r) for r in result.collect()] == [("C", 80), ("B", 50)]
    assert not {"input", "step.one", "big"} & {t.name for t in spark.catalog.listTables() if t.isTemporary}


def test_sql_error_names_the_step_and_spark_message(spark: SparkSession) -> None:
    df = _frame(spark, "a int", [(1,)])
    steps = [{"query": "SELECT a FROM input", "alias": "first"}, {"query": "SELECT nope FROM first"}]
    with pytest.raises(EngineInputError) as e:
        run_queries(spark, df, steps)
    assert e.value.kind == "sql"
    assert e.value.message.startswith("preprocess step 2 of 2 failed: [UNRESOLVED_COLUMN.WITH_SUGGESTION]")
    assert "`nope` cannot be resolved" in e.value.message and "(line 1, position 7)" in e.value.message
    assert "JVM" not in e.value.message and "Project" not in e.value.message
    assert "first" not in {t.name for t in spark.catalog.listTables() if t.isTemporary}


def test_sql_syntax_error_shows_the_query_position(spark: SparkSession) -> None:
    """Text the SQL policy cannot parse is refused before Spark sees it, at the position it stopped."""
    with pytest.raises(EngineInputError) as e:
        run_queries(spark, _frame(spark, "a int", [(1,)]), [{"query": "SELEC a FROM input", "alias": "x.y"}])
    assert (e.value.kind, e.value.message) == (
        "sql-policy",
        "preprocess step 1 of 1 (alias 'x.y'): the statement at line 1, column 12 is refused: it cannot be "
        "parsed as Spark SQL (Invalid expression / Unexpected token)",
    )


def test_a_failing_step_is_named_with_spark_s_reason(spark: SparkSession) -> None:
    with pytest.raises(EngineInputError) as e:
        run_queries(spark, _frame(spark, "a int", [(1,)]), [{"query": "SELECT b FROM input", "alias": "x.y"}])
    assert e.value.message.startswith("preprocess step 1 (alias 'x.y') of 1 failed: [UNRESOLVED_COLUMN")


def test_default_preprocess_renames_system_columns_and_reads_unix_seconds(spark: SparkSession) -> None:
    df = _frame(
        spark,
        "offset long, system_time string, op int, event_time long, v string",
        [(7, "x", 1, 1_700_000_000, "a")],
    )
    result = default_preprocess(df, "Append", VOCAB)
    assert result.columns == ["_offset", "_system_time", "_op", "event_time", "v"]
    assert result.schema["event_time"].dataType == T.TimestampType()
    assert tuple(result.collect()[0]) == (7, "x", 1, dt.datetime(2023, 11, 14, 22, 13, 20), "a")
    validate_input(result, "Append", VOCAB)
    assert default_preprocess(df, "UpsertStream", VOCAB).columns == [
        "_offset",
        "_system_time",
        "op",
        "event_time",
        "v",
    ]


def test_default_preprocess_parses_rfc3339_strings_with_a_custom_vocab(spark: SparkSession) -> None:
    vocab = {**VOCAB, "event_time_column": "when", "offset_column": "off"}
    df = _frame(spark, "off int, when string, event_time string", [(1, "2024-01-01T10:00:00.250+02:00", "t")])
    result = default_preprocess(df, "Ledger", vocab)
    assert result.columns == ["_off", "when", "event_time"]
    assert tuple(result.collect()[0]) == (1, dt.datetime(2024, 1, 1, 8, 0, 0, 250000), "t")


def test_default_preprocess_leaves_other_event_time_types(spark: SparkSession) -> None:
    df = _frame(spark, "event_time date, n tinyint", [(dt.date(2024, 1, 1), 1)])
    assert default_preprocess(df, "Snapshot", VOCAB).schema == df.schema


@pytest.mark.parametrize(
    ("ddl", "merge", "column"),
    [
        ("offset long", "ChangelogStream", "offset"),
        ("system_time timestamp", "Append", "system_time"),
        ("op int", "Snapshot", "op"),
    ],
)
def test_validate_input_refuses_system_columns(
    spark: SparkSession, ddl: str, merge: str, column: str
) -> None:
    with pytest.raises(EngineInputError, match=f"column '{column}', which is a system column") as e:
        validate_input(spark.createDataFrame([], ddl), merge, VOCAB)
    assert e.value.kind == "bad-schema"


def test_validate_input_checks_the_event_time_type(spark: SparkSession) -> None:
    validate_input(spark.createDataFrame([], "op int, event_time date"), "UpsertStream", VOCAB)
    validate_input(spark.createDataFrame([], "event_time timestamp_ntz"), "Append", VOCAB)
    with pytest.raises(EngineInputError) as e:
        validate_input(spark.createDataFrame([], "event_time string"), "Append", VOCAB)
    assert e.value.kind == "bad-schema"
    assert "event-time column 'event_time' has type string, expected date or timestamp" in e.value.message

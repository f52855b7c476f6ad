"""Exact distinct counts without Spark's aggregation by value (engine/exact_distinct.py), on the shared
local SparkSession: every key type gives Spark's own `COUNT(col)` and `COUNT(DISTINCT col)`, also when
hashes collide (forced by hashing into a few buckets), and each way out (few distinct values, too many
rows, too many repeated hashes, a type whose equality is not its bytes) leaves the count to Spark."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_odf.engine import exact_distinct
from airflow_odf.engine.checks import evaluate_checks
from airflow_odf.engine.exact_distinct import count_distinct
from airflow_odf.odf.checks.request import checks_request
from airflow_odf.odf.checks.spec import resolve_suite

D = decimal.Decimal
SCHEMA = T.StructType(
    [
        T.StructField("n", T.LongType()),
        T.StructField("i", T.IntegerType()),
        T.StructField("s", T.StringType()),
        T.StructField("odd name.x", T.StringType()),
        T.StructField("b", T.BinaryType()),
        T.StructField("d", T.DecimalType(20, 2)),
        T.StructField("day", T.DateType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("ntz", T.TimestampNTZType()),
        T.StructField("flag", T.BooleanType()),
        T.StructField("f", T.DoubleType()),
    ]
)


def _row(k: int) -> tuple[object, ...]:
    """Values with repeats (every third row repeats an earlier one) and NULLs (every seventh)."""
    v = k - k % 3 if k % 3 == 2 else k
    if k % 7 == 0:
        return (None,) * 11
    return (
        v,
        -v,
        f"s{v}",
        f"x{v}" if k % 5 else "x",
        f"b{v}".encode(),
        D(v) / 100,
        dt.date(2024, 1, 1) + dt.timedelta(days=v),
        dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=v),
        dt.datetime(2024, 1, 1) + dt.timedelta(seconds=v),
        v % 2 == 0,
        float(v),
    )


@pytest.fixture(scope="module")
def frame(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([_row(k) for k in range(60)], SCHEMA)


def _spark_counts(frame: DataFrame, column: str) -> tuple[int, int]:
    col = F.col(f"`{column}`")
    [row] = frame.agg(F.count(col), F.count_distinct(col)).collect()
    return row[0], row[1]


def _few_buckets(column: Column) -> Column:
    return F.pmod(F.xxhash64(column), F.lit(3))


@pytest.mark.parametrize("collide", [False, True], ids=["xxhash64", "3-buckets"])
def test_every_key_type_counts_as_spark_does(
    frame: DataFrame, collide: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if collide:  # nearly every hash repeats: the values are told apart by Spark's equality
        monkeypatch.setattr(exact_distinct, "_hash", _few_buckets)
    for column in frame.columns:
        expected = _spark_counts(frame, column)
        assert expected[1] < expected[0]  # the data has repeats
        found = count_distinct(frame, column)
        if column == "f":
            assert found is None  # -0.0 and 0.0 are one value, not one hash: Spark counts
        else:
            assert found == expected, column


def test_unique_values_under_collisions(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every value distinct but their hashes in 2 buckets: the recount finds them all distinct."""
    monkeypatch.setattr(exact_distinct, "_hash", lambda c: F.pmod(F.xxhash64(c), F.lit(2)))
    frame = spark.createDataFrame([(f"id-{k}",) for k in range(50)] + [(None,)], "s STRING")
    assert count_distinct(frame, "s") == (50, 50)
    empty = frame.where("s IS NULL")
    assert count_distinct(empty, "s") == (0, 0)


def test_the_ways_out_leave_the_count_to_spark(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    many = spark.createDataFrame(
        [(k, f"s{k}", f"c{k % 4}") for k in range(40)], "n BIGINT, s STRING, c STRING"
    )
    monkeypatch.setattr(exact_distinct, "PROBE_ROWS", 10)  # the probe sees a part of the rows
    assert count_distinct(many, "n") == (40, 40)  # many distinct keys: the whole column is read
    assert count_distinct(many, "s") == (40, 40)
    assert count_distinct(many, "c") is None  # 4 distinct in 10: Spark's aggregation is cheap
    monkeypatch.setattr(exact_distinct, "MAX_ROWS", 39)
    assert count_distinct(many, "n") is None  # the driver would hold too many keys
    monkeypatch.setattr(exact_distinct, "MAX_ROWS", 40)
    monkeypatch.setattr(exact_distinct, "_hash", _few_buckets)
    monkeypatch.setattr(exact_distinct, "MAX_RECOUNTED_KEYS", 2)
    assert count_distinct(many, "s") is None  # 3 repeated hashes to recount: too many
    lcase = spark.createDataFrame([("a",), ("A",)], "s STRING").selectExpr("collate(s, 'UTF8_LCASE') AS s")
    assert count_distinct(lcase, "s") is None  # equal values with different bytes


def test_a_failed_count_falls_back_to_the_query(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys that cannot be brought to the driver (here: an error while hashing) leave the pass to its
    query, which gives the same exact values."""
    path = str(tmp_path / "slice")
    spark.createDataFrame([(f"v{k % 4}",) for k in range(10)], "s STRING").write.parquet(path)
    plain = checks_request(
        resolve_suite(
            {"columns": {"s": {"distinct_check": {"equal_to": 4}, "unique_check": {"equal_to": 0}}}}
        )
    )
    monkeypatch.setattr(exact_distinct, "_hash", lambda c: F.raise_error(F.lit("no keys")).cast("long"))
    results = evaluate_checks(spark, plain, [path])
    assert [(r["name"], r["observed"], r["success"]) for r in results] == [
        ("s.distinct_check", 4, True),
        ("s.unique_check", 6, False),
    ]
    assert (
        sorted(r["s"] for r in results[1]["failing_rows"])
        == ["v0"] * 3 + ["v1"] * 3 + ["v2"] * 2 + ["v3"] * 2
    )

"""Arrow <-> Spark types, checked on real Parquet files written by Spark (ODF session conf) and pyarrow."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.spark_types import arrow_to_spark, quote_identifier, spark_to_arrow

UTC = dt.timezone.utc


def _spark_written_schema(spark: SparkSession, df, out: Path) -> tuple[pa.Schema, list[dict]]:
    df.coalesce(1).write.parquet(str(out))
    (part,) = out.glob("*.parquet")
    table = pq.read_table(part)
    return table.schema.remove_metadata(), table.to_pylist()


def test_spark_to_arrow_is_what_pyarrow_reads_back(spark: SparkSession, tmp_path: Path) -> None:
    struct = T.StructType(
        [
            T.StructField("b", T.BooleanType(), False),
            T.StructField("i8", T.ByteType()),
            T.StructField("i16", T.ShortType()),
            T.StructField("i32", T.IntegerType(), False),
            T.StructField("i64", T.LongType()),
            T.StructField("f32", T.FloatType()),
            T.StructField("f64", T.DoubleType()),
            T.StructField("s", T.StringType()),
            T.StructField("bin", T.BinaryType()),
            T.StructField("d", T.DateType()),
            T.StructField("ts", T.TimestampType()),
            T.StructField("ntz", T.TimestampNTZType()),
            T.StructField("dec", T.DecimalType(10, 2)),
            T.StructField("ints", T.ArrayType(T.IntegerType(), False)),
            T.StructField("strs", T.ArrayType(T.StringType(), True), False),
            T.StructField("m", T.MapType(T.StringType(), T.LongType(), True)),
            T.StructField(
                "st",
                T.StructType([T.StructField("x", T.IntegerType(), False), T.StructField("y", T.DateType())]),
            ),
            T.StructField("n", T.NullType()),
        ]
    )
    ts = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    row = (
        True,
        1,
        2,
        3,
        4,
        1.5,
        2.5,
        "s",
        b"\x00x",
        dt.date(2024, 1, 31),
        ts,
        dt.datetime(2024, 1, 1, 0, 0, 0, 7),
    )
    row += (decimal.Decimal("12.34"), [1, 2], ["a", None], {"k": 5}, (1, dt.date(2000, 1, 1)), None)
    schema, rows = _spark_written_schema(spark, spark.createDataFrame([row], struct), tmp_path / "out")

    expected = spark_to_arrow(struct)
    assert schema.equals(expected), f"{schema}\n!=\n{expected}"
    assert expected.field("ts").type == pa.timestamp("ms", tz="UTC")  # TIMESTAMP_MILLIS, UTC
    assert expected.field("ntz").type == pa.timestamp("us")  # the conf does not touch NTZ
    assert [f.name for f in schema if not f.nullable] == ["b", "i32", "strs"]
    assert not expected.field("st").type.field("x").nullable
    assert not expected.field("ints").type.value_field.nullable
    assert rows[0]["ts"] == ts.replace(microsecond=123000)  # truncated to ms
    assert rows[0]["ntz"] == dt.datetime(2024, 1, 1, 0, 0, 0, 7)
    assert rows[0]["m"] == [("k", 5)] and rows[0]["st"] == {"x": 1, "y": dt.date(2000, 1, 1)}


ARROW_SCHEMA = pa.schema(
    [
        pa.field("u8", pa.uint8(), False),
        pa.field("u16", pa.uint16()),
        pa.field("u32", pa.uint32()),
        pa.field("u64", pa.uint64()),
        pa.field("ls", pa.large_string()),
        pa.field("d", pa.date32()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("ntz", pa.timestamp("ms")),
        pa.field("dec", pa.decimal128(20, 4)),
        pa.field("ll", pa.large_list(pa.field("item", pa.int64(), False))),
        pa.field("m", pa.map_(pa.string(), pa.float64())),
        pa.field("st", pa.struct([pa.field("a", pa.string(), False), pa.field("b", pa.list_(pa.int16()))])),
    ]
)


def test_arrow_to_spark_widens_as_sparks_parquet_reader_and_round_trips(
    spark: SparkSession, tmp_path: Path
) -> None:
    values = {
        "u8": [255],
        "u16": [65535],
        "u32": [4_294_967_295],
        "u64": [18_446_744_073_709_551_615],
        "ls": ["x"],
        "d": [dt.date(2024, 2, 29)],
        "ts": [dt.datetime(2024, 1, 1, 12, 0, 0, 5000, tzinfo=UTC)],
        "ntz": [dt.datetime(2024, 1, 1, 12, 0, 0)],
        "dec": [decimal.Decimal("1234567890123456.7891")],
        "ll": [[1, 2]],
        "m": [[("k", 0.5)]],
        "st": [{"a": "z", "b": [1, None]}],
    }
    source = tmp_path / "arrow.parquet"
    pq.write_table(pa.table(values, schema=ARROW_SCHEMA), source)
    struct = arrow_to_spark(ARROW_SCHEMA)

    df = spark.read.parquet(str(source))
    assert df.schema.simpleString() == struct.simpleString()  # Spark's reader: same types, all nullable
    assert struct["u8"].dataType == T.ShortType() and not struct["u8"].nullable
    assert struct["u64"].dataType == T.DecimalType(20, 0)

    schema, rows = _spark_written_schema(spark, df, tmp_path / "out")
    assert schema.equals(spark_to_arrow(df.schema))
    assert rows[0]["u64"] == decimal.Decimal(18_446_744_073_709_551_615)
    assert rows[0]["ts"] == dt.datetime(2024, 1, 1, 12, 0, 0, 5000, tzinfo=UTC)  # 5 ms: kept
    assert rows[0]["ntz"] == dt.datetime(2024, 1, 1, 12, 0, 0)
    assert rows[0]["st"] == {"a": "z", "b": [1, None]} and rows[0]["m"] == [("k", 0.5)]


@pytest.mark.parametrize(
    ("arrow", "spark_type"),
    [
        (pa.float16(), T.FloatType()),
        (pa.string_view(), T.StringType()),
        (pa.large_binary(), T.BinaryType()),
        (pa.binary(4), T.BinaryType()),
        (pa.date64(), T.DateType()),
        (pa.timestamp("ns", tz="Europe/Berlin"), T.TimestampType()),
        (pa.dictionary(pa.int32(), pa.string()), T.StringType()),
        (pa.list_(pa.int8(), 3), T.ArrayType(T.ByteType(), True)),
        (pa.null(), T.NullType()),
    ],
)
def test_arrow_to_spark_widening_rules(arrow: pa.DataType, spark_type: T.DataType) -> None:
    assert arrow_to_spark(pa.schema([pa.field("c", arrow)]))["c"].dataType == spark_type


@pytest.mark.parametrize(
    "arrow",
    [pa.time64("us"), pa.duration("ms"), pa.month_day_nano_interval(), pa.decimal256(50, 2)],
)
def test_arrow_types_spark_cannot_hold_are_refused_by_field(arrow: pa.DataType) -> None:
    schema = pa.schema([pa.field("outer", pa.struct([pa.field("inner", pa.list_(arrow))]))])
    with pytest.raises(EngineInputError) as e:
        arrow_to_spark(schema)
    assert e.value.kind == "unsupported"
    assert "'outer.inner[]'" in e.value.message and str(arrow) in e.value.message


def test_spark_types_parquet_cannot_hold_are_refused() -> None:
    with pytest.raises(EngineInputError, match=r"'span'.*interval") as e:
        spark_to_arrow(T.StructType([T.StructField("span", T.DayTimeIntervalType())]))
    assert e.value.kind == "unsupported"


def test_quote_identifier_keeps_dots_and_backticks() -> None:
    assert quote_identifier("a.b`c") == "`a.b``c`"

"""The Arrow <-> Spark half of the type table (docs/schemas.md), row by row and both ways.

Each row: an Arrow type (every layout of every ODF type), the Spark type it becomes, whether that is a
recorded widening, and what Spark writes for it — checked on a real one-row Parquet file written by Spark
with the ODF session conf and read back with pyarrow. A row that is not a widening keeps its logical (ODF)
type through Spark; a widening changes it, and is reported naming the column. Types Spark cannot hold are
errors naming the column. The ODF <-> Arrow half is tests/unit/test_type_table.py.
"""

from __future__ import annotations

import datetime as dt
import decimal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.readers import read_input
from airflow_odf.engine.spark_types import arrow_to_spark, spark_to_arrow
from airflow_odf.odf.format import model as m
from airflow_odf.odf.schema.data_schema import data_schema_from_arrow, strip_encoding
from airflow_odf.utils.engine_json import TypeWidening

UTC = dt.timezone.utc
WHEN = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
INT_ITEM = pa.field("item", pa.int32(), nullable=False)
STRUCT = pa.struct([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.utf8())])
SPARK_STRUCT = T.StructType([T.StructField("a", T.IntegerType(), False), T.StructField("b", T.StringType())])


@dataclass(frozen=True)
class Row:
    """An Arrow type, its Spark type, a value Spark accepts, what Spark writes, and the widening if any."""

    arrow: pa.DataType
    spark: T.DataType
    value: Any
    written: pa.DataType
    widened: str | None = None  # words of the recorded reason; None: Spark holds the type exactly
    nullable: bool = True

    @property
    def id(self) -> str:
        return str(self.arrow)


def _list(item: pa.DataType, nullable: bool = True) -> pa.DataType:
    return pa.list_(pa.field("element", item, nullable))


ROWS = [
    Row(pa.null(), T.NullType(), None, pa.null()),
    Row(pa.bool_(), T.BooleanType(), True, pa.bool_(), nullable=False),
    Row(pa.int8(), T.ByteType(), -8, pa.int8()),
    Row(pa.int16(), T.ShortType(), -16, pa.int16()),
    Row(pa.int32(), T.IntegerType(), -32, pa.int32(), nullable=False),
    Row(pa.int64(), T.LongType(), -64, pa.int64()),
    Row(pa.uint8(), T.ShortType(), 255, pa.int16(), "no unsigned integers"),
    Row(pa.uint16(), T.IntegerType(), 65535, pa.int32(), "no unsigned integers"),
    Row(pa.uint32(), T.LongType(), 2**32 - 1, pa.int64(), "no unsigned integers"),
    Row(pa.uint64(), T.DecimalType(20, 0), decimal.Decimal(2**64 - 1), pa.decimal128(20, 0), "no unsigned"),
    Row(pa.float16(), T.FloatType(), 1.5, pa.float32(), "no half-precision float"),
    Row(pa.float32(), T.FloatType(), 2.5, pa.float32()),
    Row(pa.float64(), T.DoubleType(), 3.5, pa.float64()),
    Row(pa.utf8(), T.StringType(), "s", pa.string()),
    Row(pa.large_utf8(), T.StringType(), "s", pa.string()),
    Row(pa.string_view(), T.StringType(), "s", pa.string()),
    Row(pa.run_end_encoded(pa.int32(), pa.utf8()), T.StringType(), "s", pa.string()),
    Row(pa.dictionary(pa.int32(), pa.utf8()), T.StringType(), "s", pa.string()),  # Arrow only: not ODF
    Row(pa.binary(), T.BinaryType(), b"\x00b", pa.binary()),
    Row(pa.large_binary(), T.BinaryType(), b"\x00b", pa.binary()),
    Row(pa.binary_view(), T.BinaryType(), b"\x00b", pa.binary()),
    Row(pa.binary(4), T.BinaryType(), b"abcd", pa.binary(), "no fixed length"),
    Row(pa.decimal32(9, 2), T.DecimalType(9, 2), decimal.Decimal("1.25"), pa.decimal128(9, 2)),
    Row(pa.decimal64(18, 4), T.DecimalType(18, 4), decimal.Decimal("1.2345"), pa.decimal128(18, 4)),
    Row(pa.decimal128(38, 10), T.DecimalType(38, 10), decimal.Decimal("1.5"), pa.decimal128(38, 10)),
    Row(pa.date32(), T.DateType(), dt.date(2024, 2, 29), pa.date32()),
    Row(pa.date64(), T.DateType(), dt.date(2024, 2, 29), pa.date32()),
    Row(pa.timestamp("ms", tz="UTC"), T.TimestampType(), WHEN, pa.timestamp("ms", tz="UTC")),
    Row(pa.timestamp("s", tz="UTC"), T.TimestampType(), WHEN, pa.timestamp("ms", tz="UTC"), "milliseconds"),
    Row(pa.timestamp("us", tz="UTC"), T.TimestampType(), WHEN, pa.timestamp("ms", tz="UTC"), "are cut"),
    Row(pa.timestamp("ns", tz="UTC"), T.TimestampType(), WHEN, pa.timestamp("ms", tz="UTC"), "are cut"),
    Row(
        pa.timestamp("ms", tz="Europe/Paris"),
        T.TimestampType(),
        WHEN,
        pa.timestamp("ms", tz="UTC"),
        "the zone Europe/Paris is not",
    ),
    Row(pa.timestamp("us"), T.TimestampNTZType(), WHEN.replace(tzinfo=None), pa.timestamp("us")),
    Row(
        pa.timestamp("ms"),
        T.TimestampNTZType(),
        WHEN.replace(tzinfo=None),
        pa.timestamp("us"),
        "microseconds",
    ),
    Row(pa.timestamp("ns"), T.TimestampNTZType(), WHEN.replace(tzinfo=None), pa.timestamp("us"), "are cut"),
    Row(pa.list_(INT_ITEM), T.ArrayType(T.IntegerType(), False), [1], _list(pa.int32(), False)),
    Row(pa.list_(pa.int32()), T.ArrayType(T.IntegerType(), True), [1, None], _list(pa.int32())),
    Row(pa.large_list(INT_ITEM), T.ArrayType(T.IntegerType(), False), [1], _list(pa.int32(), False)),
    Row(pa.list_view(INT_ITEM), T.ArrayType(T.IntegerType(), False), [1], _list(pa.int32(), False)),
    Row(pa.large_list_view(INT_ITEM), T.ArrayType(T.IntegerType(), False), [1], _list(pa.int32(), False)),
    Row(
        pa.list_(pa.int8(), 3),
        T.ArrayType(T.ByteType(), True),
        [1, 2, 3],
        _list(pa.int8()),
        "no fixed length",
    ),
    Row(
        pa.map_(pa.utf8(), pa.int64()),
        T.MapType(T.StringType(), T.LongType(), True),
        {"k": 1},
        pa.map_(pa.string(), pa.int64()),
    ),
    Row(
        pa.map_(pa.int32(), pa.utf8(), keys_sorted=True),
        T.MapType(T.IntegerType(), T.StringType(), True),
        {1: "a"},
        pa.map_(pa.int32(), pa.string()),
        "sorted keys",
    ),
    Row(STRUCT, SPARK_STRUCT, (1, "b"), STRUCT, nullable=False),
]


def _name(i: int) -> str:
    return f"c{i:02}"


def test_arrow_to_spark_and_the_recorded_widenings() -> None:
    widenings: list[TypeWidening] = []
    schema = pa.schema([pa.field(_name(i), r.arrow, r.nullable) for i, r in enumerate(ROWS)])
    struct = arrow_to_spark(schema, widenings)
    assert [f.dataType for f in struct.fields] == [r.spark for r in ROWS]
    assert [f.nullable for f in struct.fields] == [r.nullable for r in ROWS]
    widened = {w.column: w for w in widenings}
    assert sorted(widened) == [_name(i) for i, r in enumerate(ROWS) if r.widened]  # one per column
    for i, row in enumerate(ROWS):
        if row.widened:
            w = widened[_name(i)]
            assert row.widened in w.reason, w
            assert (w.arrow_type, w.spark_type) == (str(row.arrow), row.spark.simpleString())
    assert arrow_to_spark(schema) == struct  # the report is optional


@pytest.fixture(scope="module")
def written(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> pa.Schema:
    """One row of every Spark type of the table, written by Spark (ODF conf) and read back by pyarrow."""
    struct = T.StructType([T.StructField(_name(i), r.spark, r.nullable) for i, r in enumerate(ROWS)])
    out = tmp_path_factory.mktemp("spark-types") / "out"
    spark.createDataFrame([tuple(r.value for r in ROWS)], struct).coalesce(1).write.parquet(str(out))
    (part,) = Path(out).glob("*.parquet")
    return pq.read_schema(part).remove_metadata()


@pytest.mark.parametrize("index", range(len(ROWS)), ids=[r.id for r in ROWS])
def test_spark_writes_what_spark_to_arrow_says(written: pa.Schema, index: int) -> None:
    row = ROWS[index]
    field = written.field(_name(index))
    assert field == pa.field(_name(index), row.written, row.nullable), field
    struct = T.StructType([T.StructField(_name(index), row.spark, row.nullable)])
    assert spark_to_arrow(struct).field(0) == field


@pytest.mark.parametrize(
    "index", [i for i, r in enumerate(ROWS) if not pa.types.is_dictionary(r.arrow)], ids=lambda i: ROWS[i].id
)
def test_only_a_widening_changes_the_logical_type(written: pa.Schema, index: int) -> None:
    """The ODF type of what Spark wrote is the ODF type given, unless the row is a recorded widening."""
    row = ROWS[index]

    def logical(t: pa.DataType) -> m.DataSchema:
        return strip_encoding(data_schema_from_arrow(pa.schema([pa.field("c", t, row.nullable)])))

    assert (logical(row.written) != logical(row.arrow)) == (row.widened is not None)


#: Spark -> Arrow -> ODF: the ODF type each Spark type is recorded as.
SPARK_TO_ODF = [
    (T.NullType(), m.DataTypeNull()),
    (T.BooleanType(), m.DataTypeBool()),
    (T.ByteType(), m.DataTypeInt8()),
    (T.ShortType(), m.DataTypeInt16()),
    (T.IntegerType(), m.DataTypeInt32()),
    (T.LongType(), m.DataTypeInt64()),
    (T.FloatType(), m.DataTypeFloat32()),
    (T.DoubleType(), m.DataTypeFloat64()),
    (T.DecimalType(20, 0), m.DataTypeDecimal(precision=20, scale=0)),
    (T.StringType(), m.DataTypeString()),
    (T.CharType(3), m.DataTypeString()),
    (T.VarcharType(9), m.DataTypeString()),
    (T.BinaryType(), m.DataTypeBinary()),
    (T.DateType(), m.DataTypeDate()),
    (T.TimestampType(), m.DataTypeTimestamp(unit=m.TimeUnit.MILLISECOND, timezone="UTC")),
    (T.TimestampNTZType(), m.DataTypeTimestamp(unit=m.TimeUnit.MICROSECOND, timezone=None)),
    (T.ArrayType(T.LongType(), True), m.DataTypeList(item_type=m.DataTypeOption(inner=m.DataTypeInt64()))),
    (T.ArrayType(T.LongType(), False), m.DataTypeList(item_type=m.DataTypeInt64())),
    (
        T.MapType(T.StringType(), T.DoubleType(), True),
        m.DataTypeMap(
            key_type=m.DataTypeString(),
            value_type=m.DataTypeOption(inner=m.DataTypeFloat64()),
            keys_sorted=False,
        ),
    ),
    (
        SPARK_STRUCT,
        m.DataTypeStruct(
            fields=[
                m.DataField(name="a", type=m.DataTypeInt32()),
                m.DataField(name="b", type=m.DataTypeOption(inner=m.DataTypeString())),
            ]
        ),
    ),
]


@pytest.mark.parametrize(("spark_type", "odf_type"), SPARK_TO_ODF, ids=lambda v: str(v))
def test_spark_to_odf_and_back(spark_type: T.DataType, odf_type: Any) -> None:
    struct = T.StructType([T.StructField("c", spark_type, nullable=False)])
    arrow = spark_to_arrow(struct)
    recorded = strip_encoding(data_schema_from_arrow(arrow)).fields[0].type
    expected = m.DataTypeOption(inner=odf_type) if isinstance(spark_type, T.NullType) else odf_type
    assert recorded == expected  # (pyarrow's Null is always nullable)
    widenings: list[TypeWidening] = []
    back = arrow_to_spark(arrow, widenings)["c"].dataType
    exact = not isinstance(spark_type, T.CharType | T.VarcharType)  # char/varchar are strings in Parquet
    assert back == (spark_type if exact else T.StringType()) and widenings == []


@pytest.mark.parametrize(
    "arrow",
    [
        pa.time32("s"),
        pa.time64("ns"),
        pa.duration("us"),
        pa.month_day_nano_interval(),
        pa.decimal256(39, 2),
        pa.dense_union([pa.field("i", pa.int8())]),
    ],
    ids=str,
)
def test_arrow_types_spark_cannot_hold_are_errors_naming_the_column(arrow: pa.DataType) -> None:
    schema = pa.schema([pa.field("outer", pa.struct([pa.field("inner", pa.map_(pa.utf8(), arrow))]))])
    with pytest.raises(EngineInputError) as e:
        arrow_to_spark(schema)
    assert e.value.kind == "unsupported"
    assert f"column 'outer.inner.value' has Arrow type {arrow}" in e.value.message


@pytest.mark.parametrize(
    "spark_type",
    [T.DayTimeIntervalType(), T.YearMonthIntervalType(), T.CalendarIntervalType(), T.VariantType()],
    ids=str,
)
def test_spark_types_odf_data_cannot_hold_are_errors_naming_the_column(spark_type: T.DataType) -> None:
    """Spark would write a day-time interval as a bare int64: refused instead of silently re-typed."""
    struct = T.StructType([T.StructField("s", T.StructType([T.StructField("span", spark_type)]))])
    with pytest.raises(EngineInputError) as e:
        spark_to_arrow(struct)
    assert e.value.kind == "unsupported" and "column 's.span' has Spark type" in e.value.message


def test_sparks_parquet_reader_agrees_or_refuses_clearly(spark: SparkSession, tmp_path: Path) -> None:
    """A Parquet source gets the table's Spark types; the two it cannot read fail naming the file."""
    readable = [r for r in ROWS if not pa.types.is_run_end_encoded(r.arrow) and r.arrow != pa.float16()]
    readable = [r for r in readable if not (pa.types.is_timestamp(r.arrow) and r.arrow.unit == "ns")]
    readable = [r for r in readable if r.arrow != pa.null()]  # a foreign all-null column reads as int
    source = tmp_path / "source.parquet"
    arrays = {_name(i): pa.array([_arrow_value(r)], r.arrow) for i, r in enumerate(readable)}
    pq.write_table(pa.table(arrays), source)
    read = read_input(spark, {"kind": "Parquet"}, [str(source)], None).df
    assert read is not None
    # Spark's reader makes every level nullable: the types are compared without nullability
    assert [f.dataType.simpleString() for f in read.schema.fields] == [
        r.spark.simpleString() for r in readable
    ]

    for i, arrow in enumerate((pa.float16(), pa.timestamp("ns", tz="UTC"))):
        bad = tmp_path / f"refused-{i}.parquet"
        pq.write_table(pa.table({"c": pa.array([None], arrow)}), bad)
        with pytest.raises(EngineInputError) as e:
            read_input(spark, {"kind": "Parquet"}, [str(bad)], None)
        assert e.value.kind == "unsupported" and str(bad) in e.value.message


def _arrow_value(row: Row) -> Any:
    """The row's value as pyarrow takes it for the Arrow type."""
    if pa.types.is_map(row.arrow):
        return list(row.value.items())
    if pa.types.is_struct(row.arrow):
        return dict(zip(["a", "b"], row.value, strict=True))
    if pa.types.is_uint64(row.arrow):
        return int(row.value)
    return row.value

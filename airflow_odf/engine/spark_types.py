"""The one mapping between Arrow types (the core's schemas) and Spark types (what the engine runs on).

`spark_to_arrow` is exact: it gives the Arrow schema pyarrow reads back from a Parquet file that Spark wrote
with the ODF session conf (`airflow_odf.engine.session`): `TimestampType` is written as TIMESTAMP_MILLIS
and read back as `timestamp[ms, tz=UTC]`; `TimestampNTZType` is not affected by that conf and comes back as
`timestamp[us]`; lists and maps carry Parquet's `element` / `key` / `value` names; nullability is kept.

`arrow_to_spark` has to fit Arrow's wider type system into Spark's. Types Spark cannot hold are widened by
the same rule Spark's own Parquet reader uses for them, so that a column gets one Spark type whichever path
it came by:

    uint8 -> short, uint16 -> int, uint32 -> long, uint64 -> decimal(20, 0)
    float16 -> float
    large_string / string_view -> string; large_binary / binary_view / fixed_size_binary -> binary
    large_list / list_view / fixed_size_list -> array; date64 -> date; dictionary<_, T> -> T
    timestamp with a time zone (any unit) -> timestamp (Spark keeps microseconds: nanoseconds are cut)
    timestamp without a time zone -> timestamp_ntz

Everything else (time, duration, interval, union, decimal with precision > 38, extension types, ...) raises
`EngineInputError("unsupported")` naming the field: a silent cast to string would change the data.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError

_MAX_DECIMAL_PRECISION = 38

_ARROW_TO_SPARK_ATOMIC: list[tuple[Callable[[pa.DataType], bool], T.DataType]] = [
    (pa.types.is_null, T.NullType()),
    (pa.types.is_boolean, T.BooleanType()),
    (lambda t: t == pa.int8(), T.ByteType()),
    (lambda t: t in (pa.int16(), pa.uint8()), T.ShortType()),
    (lambda t: t in (pa.int32(), pa.uint16()), T.IntegerType()),
    (lambda t: t in (pa.int64(), pa.uint32()), T.LongType()),
    (lambda t: t == pa.uint64(), T.DecimalType(20, 0)),
    (lambda t: t in (pa.float16(), pa.float32()), T.FloatType()),
    (pa.types.is_float64, T.DoubleType()),
    (
        lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
        T.StringType(),
    ),
    (
        lambda t: (
            pa.types.is_binary(t)
            or pa.types.is_large_binary(t)
            or pa.types.is_binary_view(t)
            or pa.types.is_fixed_size_binary(t)
        ),
        T.BinaryType(),
    ),
    (pa.types.is_date, T.DateType()),
]

_SPARK_TO_ARROW_ATOMIC: dict[type, pa.DataType] = {
    T.NullType: pa.null(),
    T.BooleanType: pa.bool_(),
    T.ByteType: pa.int8(),
    T.ShortType: pa.int16(),
    T.IntegerType: pa.int32(),
    T.LongType: pa.int64(),
    T.FloatType: pa.float32(),
    T.DoubleType: pa.float64(),
    T.StringType: pa.string(),
    T.CharType: pa.string(),
    T.VarcharType: pa.string(),
    T.BinaryType: pa.binary(),
    T.DateType: pa.date32(),
    T.TimestampType: pa.timestamp("ms", tz="UTC"),
    T.TimestampNTZType: pa.timestamp("us"),
}


def arrow_to_spark(schema: pa.Schema) -> T.StructType:
    """The Spark struct for an Arrow schema, widening where Spark has no equal type (see module doc)."""
    return T.StructType([_arrow_field_to_spark(f, f.name) for f in schema])


def spark_to_arrow(struct: T.StructType) -> pa.Schema:
    """The Arrow schema pyarrow reads from a Parquet file Spark wrote with this struct and the ODF conf."""
    return pa.schema([_spark_field_to_arrow(f, f.name) for f in struct.fields])


def _arrow_field_to_spark(field: pa.Field, path: str) -> T.StructField:
    return T.StructField(field.name, _arrow_type_to_spark(field.type, path), field.nullable)


def _arrow_type_to_spark(t: pa.DataType, path: str) -> T.DataType:
    for matches, spark_type in _ARROW_TO_SPARK_ATOMIC:
        if matches(t):
            return spark_type
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz is not None else T.TimestampNTZType()
    if pa.types.is_decimal(t) and t.precision <= _MAX_DECIMAL_PRECISION:
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_dictionary(t):
        return _arrow_type_to_spark(t.value_type, path)
    if pa.types.is_map(t):
        return T.MapType(
            _arrow_type_to_spark(t.key_type, f"{path}.key"),
            _arrow_type_to_spark(t.item_type, f"{path}.value"),
            t.item_field.nullable,
        )
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        item = t.value_field
        return T.ArrayType(_arrow_type_to_spark(item.type, f"{path}[]"), item.nullable)
    if pa.types.is_struct(t):
        return T.StructType(
            [_arrow_field_to_spark(t.field(i), f"{path}.{t.field(i).name}") for i in range(t.num_fields)]
        )
    raise EngineInputError(
        "unsupported",
        f"column '{path}' has Arrow type {t}, which Spark cannot represent; convert it in a prepare step",
    )


def _spark_field_to_arrow(field: T.StructField, path: str) -> pa.Field:
    return pa.field(field.name, _spark_type_to_arrow(field.dataType, path), field.nullable)


def _spark_type_to_arrow(t: T.DataType, path: str) -> pa.DataType:
    atomic = _SPARK_TO_ARROW_ATOMIC.get(type(t))
    if atomic is not None:
        return atomic
    if isinstance(t, T.DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, T.ArrayType):
        return pa.list_(pa.field("element", _spark_type_to_arrow(t.elementType, f"{path}[]"), t.containsNull))
    if isinstance(t, T.MapType):
        return pa.map_(
            pa.field("key", _spark_type_to_arrow(t.keyType, f"{path}.key"), nullable=False),
            pa.field("value", _spark_type_to_arrow(t.valueType, f"{path}.value"), t.valueContainsNull),
        )
    if isinstance(t, T.StructType):
        return pa.struct([_spark_field_to_arrow(f, f"{path}.{f.name}") for f in t.fields])
    raise EngineInputError(
        "unsupported",
        f"column '{path}' has Spark type {t.simpleString()}, which ODF data (Parquet) cannot hold",
    )


def quote_identifier(name: str) -> str:
    """A column or view name quoted for Spark SQL, so that dots, spaces and backticks in it are kept."""
    return "`" + name.replace("`", "``") + "`"

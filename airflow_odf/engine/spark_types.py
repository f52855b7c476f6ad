"""The one mapping between Arrow types (the core's schemas) and Spark types (what the engine runs on).

The whole ODF <-> Arrow <-> Spark table, with examples, is in docs/schemas.md; this module is its Spark half.

`spark_to_arrow` is exact: it gives the Arrow schema pyarrow reads back from a Parquet file that Spark wrote
with the ODF session conf (`airflow_odf.engine.session`): `TimestampType` is written as TIMESTAMP_MILLIS
and read back as `timestamp[ms, tz=UTC]`; `TimestampNTZType` is not affected by that conf and comes back as
`timestamp[us]`; lists and maps carry Parquet's `element` / `key` / `value` names; nullability is kept.
`CharType` / `VarcharType` come back as plain strings.

`arrow_to_spark` has to fit Arrow's wider type system into Spark's. Types Spark cannot hold are widened by
the same rule Spark's own Parquet reader uses for them, so that a column gets one Spark type whichever path
it came by:

    uint8 -> short, uint16 -> int, uint32 -> long, uint64 -> decimal(20, 0)
    float16 -> float
    large_string / string_view -> string; large_binary / binary_view / fixed_size_binary -> binary
    large_list / list_view / fixed_size_list -> array; date64 -> date; dictionary<_, T> -> T;
    run_end_encoded<_, T> -> T; map with sorted keys -> map
    timestamp with a time zone (any unit) -> timestamp: an instant, which the ODF conf writes as ms UTC
    (seconds widen exactly, micro- and nanoseconds are cut, a zone other than UTC is not kept)
    timestamp without a time zone -> timestamp_ntz (microseconds: s / ms widen exactly, ns are cut)

A widening that changes the logical (ODF) type of what is finally written — not only the Arrow encoding:
large / view / run-end / dictionary layouts and date64 are encodings — is recorded: pass a list as
`widenings` and each one is appended as a `TypeWidening` naming the column, so a caller can report it
(`odf schema infer` does).
Everything else (time, duration, interval, union, decimal with precision > 38, extension types, ...) raises
`EngineInputError("unsupported")` naming the field: a silent cast to string would change the data.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.utils.engine_json import TypeWidening

_MAX_DECIMAL_PRECISION = 38
_UTC_ZONES = ("UTC", "+00:00", "Etc/UTC", "Z")
_UNSIGNED = "Spark has no unsigned integers: widened to the next signed type that holds every value"


#: (matches, Spark type, why the logical type changes — None when Spark holds it exactly).
_ARROW_TO_SPARK_ATOMIC: list[tuple[Callable[[pa.DataType], bool], T.DataType, str | None]] = [
    (pa.types.is_null, T.NullType(), None),
    (pa.types.is_boolean, T.BooleanType(), None),
    (lambda t: t == pa.int8(), T.ByteType(), None),
    (lambda t: t == pa.int16(), T.ShortType(), None),
    (lambda t: t == pa.uint8(), T.ShortType(), _UNSIGNED),
    (lambda t: t == pa.int32(), T.IntegerType(), None),
    (lambda t: t == pa.uint16(), T.IntegerType(), _UNSIGNED),
    (lambda t: t == pa.int64(), T.LongType(), None),
    (lambda t: t == pa.uint32(), T.LongType(), _UNSIGNED),
    (lambda t: t == pa.uint64(), T.DecimalType(20, 0), _UNSIGNED),
    (lambda t: t == pa.float16(), T.FloatType(), "Spark has no half-precision float"),
    (lambda t: t == pa.float32(), T.FloatType(), None),
    (pa.types.is_float64, T.DoubleType(), None),
    (
        lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
        T.StringType(),
        None,
    ),
    (
        lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t),
        T.BinaryType(),
        None,
    ),
    (
        pa.types.is_fixed_size_binary,
        T.BinaryType(),
        "Spark binary has no fixed length: the length is not kept",
    ),
    (pa.types.is_date, T.DateType(), None),
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


def arrow_to_spark(schema: pa.Schema, widenings: list[TypeWidening] | None = None) -> T.StructType:
    """The Spark struct for an Arrow schema, widening where Spark has no equal type (see module doc).

    Each widening that changes a column's logical type is appended to `widenings` when a list is given.
    """
    out = [] if widenings is None else widenings
    return T.StructType([_arrow_field_to_spark(f, f.name, out) for f in schema])


def spark_to_arrow(struct: T.StructType) -> pa.Schema:
    """The Arrow schema pyarrow reads from a Parquet file Spark wrote with this struct and the ODF conf."""
    return pa.schema([_spark_field_to_arrow(f, f.name) for f in struct.fields])


def _arrow_field_to_spark(field: pa.Field, path: str, widenings: list[TypeWidening]) -> T.StructField:
    return T.StructField(field.name, _arrow_type_to_spark(field.type, path, widenings), field.nullable)


def _widened(
    widenings: list[TypeWidening], path: str, t: pa.DataType, spark_type: T.DataType, reason: str
) -> T.DataType:
    widenings.append(TypeWidening(path, str(t), spark_type.simpleString(), reason))
    return spark_type


def _timestamp_to_spark(t: pa.TimestampType, path: str, widenings: list[TypeWidening]) -> T.DataType:
    """With a zone: an instant, written as ms UTC (ODF conf); without: a local time, kept in microseconds."""
    reasons = []
    if t.tz is None:
        spark_type: T.DataType = T.TimestampNTZType()
        if t.unit == "ns":
            reasons.append("Spark keeps microseconds: nanoseconds are cut")
        elif t.unit != "us":
            reasons.append("Spark keeps local timestamps in microseconds (exact)")
    else:
        spark_type = T.TimestampType()
        if t.unit in ("us", "ns"):
            reasons.append("ODF data is written in milliseconds: sub-millisecond digits are cut")
        elif t.unit == "s":
            reasons.append("ODF data is written in milliseconds (exact)")
        if t.tz not in _UTC_ZONES:
            reasons.append(
                f"Spark timestamps are instants: the instant is kept, the zone {t.tz} is not (UTC)"
            )
    if reasons:
        return _widened(widenings, path, t, spark_type, "; ".join(reasons))
    return spark_type


def _arrow_type_to_spark(t: pa.DataType, path: str, widenings: list[TypeWidening]) -> T.DataType:
    for matches, spark_type, widening in _ARROW_TO_SPARK_ATOMIC:
        if matches(t):
            return spark_type if widening is None else _widened(widenings, path, t, spark_type, widening)
    if pa.types.is_timestamp(t):
        return _timestamp_to_spark(t, path, widenings)
    if pa.types.is_decimal(t) and t.precision <= _MAX_DECIMAL_PRECISION:
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_dictionary(t) or pa.types.is_run_end_encoded(t):  # encodings of their value type
        return _arrow_type_to_spark(t.value_type, path, widenings)
    if pa.types.is_map(t):
        spark_map = T.MapType(
            _arrow_type_to_spark(t.key_type, f"{path}.key", widenings),
            _arrow_type_to_spark(t.item_type, f"{path}.value", widenings),
            t.item_field.nullable,
        )
        if t.keys_sorted:
            return _widened(widenings, path, t, spark_map, "Spark maps do not record sorted keys")
        return spark_map
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        item = t.value_field
        array = T.ArrayType(_arrow_type_to_spark(item.type, f"{path}[]", widenings), item.nullable)
        if pa.types.is_fixed_size_list(t):
            return _widened(widenings, path, t, array, "Spark arrays have no fixed length: it is not kept")
        return array
    if pa.types.is_struct(t):
        return T.StructType(
            [
                _arrow_field_to_spark(t.field(i), f"{path}.{t.field(i).name}", widenings)
                for i in range(t.num_fields)
            ]
        )
    raise EngineInputError(
        "unsupported",
        f"column '{path}' has Arrow type {t}, which Spark cannot represent; convert it in a prepare step",
    )


def _spark_field_to_arrow(field: T.StructField, path: str) -> pa.Field:
    return _arrow_field(field.name, _spark_type_to_arrow(field.dataType, path), field.nullable)


def _arrow_field(name: str, t: pa.DataType, nullable: bool) -> pa.Field:
    """Parquet has no non-nullable null column (pyarrow refuses one): a null type is always nullable."""
    return pa.field(name, t, nullable or t == pa.null())


def _spark_type_to_arrow(t: T.DataType, path: str) -> pa.DataType:
    atomic = _SPARK_TO_ARROW_ATOMIC.get(type(t))
    if atomic is not None:
        return atomic
    if isinstance(t, T.DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, T.ArrayType):
        return pa.list_(
            _arrow_field("element", _spark_type_to_arrow(t.elementType, f"{path}[]"), t.containsNull)
        )
    if isinstance(t, T.MapType):
        return pa.map_(
            pa.field("key", _spark_type_to_arrow(t.keyType, f"{path}.key"), nullable=False),
            _arrow_field("value", _spark_type_to_arrow(t.valueType, f"{path}.value"), t.valueContainsNull),
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

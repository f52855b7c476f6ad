"""RFC-016 data schemas: ODF `DataSchema` <-> pyarrow schema.

ODF types are logical; Arrow's physical variants (64-bit offsets, views, run-end encoding, 64-bit dates,
decimal widths) travel as the RFC-016 encoding attributes in a field's `extra`, so that
arrow -> ODF -> arrow is lossless. Following the RFC's list, an attribute is written for LargeUtf8 /
LargeBinary / LargeList (`Contiguous`, 64), the View types (`View`, 32; LargeListView 64), run-end
encoding (`RunEnd` with `runEndsBitWidth`), Date64 (`Millisecond`) and every decimal (`bitWidth`); the
default encodings (Utf8, Binary, List, Date32) carry none. Reading back, absent attributes select those
defaults and a decimal's width follows its precision (<= 38: 128 bits, <= 76: 256 bits).

Only fields carry attributes: a list item or map key/value whose Arrow type is not the default encoding
of its ODF type cannot be recorded and is rejected, as is anything ODF or Arrow cannot express; every
error names the path (`columns.a.item`). Nullability is the `Option` wrapper, at every level.

Deliberately not mapped: Arrow custom metadata (schema and field level: pandas / Parquet tooling detail,
not the logical schema; the reference drops it too) and ODF `extra` attributes other than the encoding
ones. Names of list items ("item") and map children ("key", "value") are Arrow's defaults on the way
back. An Arrow timestamp without timezone reads as `timezone: None`, like the reference, which the spec
defines as UTC: that is the one Arrow type whose round trip changes (it comes back as "UTC"). On the ODF
side, a bare `Null` comes back as `Option<Null>`: pyarrow has no non-nullable Null field.

The full ODF <-> Arrow <-> Spark table is docs/schemas.md (tested by tests/unit/test_type_table.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.model import (
    DataField,
    DataSchema,
    DataType,
    DataTypeBinary,
    DataTypeBool,
    DataTypeDate,
    DataTypeDecimal,
    DataTypeDuration,
    DataTypeFloat16,
    DataTypeFloat32,
    DataTypeFloat64,
    DataTypeInt8,
    DataTypeInt16,
    DataTypeInt32,
    DataTypeInt64,
    DataTypeList,
    DataTypeMap,
    DataTypeNull,
    DataTypeOption,
    DataTypeString,
    DataTypeStruct,
    DataTypeTime,
    DataTypeTimestamp,
    DataTypeUInt8,
    DataTypeUInt16,
    DataTypeUInt32,
    DataTypeUInt64,
    ExtraAttributes,
    TimeUnit,
)

BUFFER_ENCODING = "arrow.apache.org/bufferEncoding"
DATE_ENCODING = "arrow.apache.org/dateEncoding"
DECIMAL_ENCODING = "arrow.apache.org/decimalEncoding"
#: The encoding attributes `strip_encoding` removes (the reference's known keys).
ENCODING_KEYS = (BUFFER_ENCODING, DATE_ENCODING, DECIMAL_ENCODING)

_ROOT = "columns"
_DEFAULT_UNIT = TimeUnit.MILLISECOND
_DEFAULT_TIMEZONE = "UTC"
_MAX_PRECISION = {128: 38, 256: 76}

#: Types mapped one to one, without parameters or encoding attributes.
_SIMPLE = {
    pa.null(): DataTypeNull,
    pa.bool_(): DataTypeBool,
    pa.int8(): DataTypeInt8,
    pa.int16(): DataTypeInt16,
    pa.int32(): DataTypeInt32,
    pa.int64(): DataTypeInt64,
    pa.uint8(): DataTypeUInt8,
    pa.uint16(): DataTypeUInt16,
    pa.uint32(): DataTypeUInt32,
    pa.uint64(): DataTypeUInt64,
    pa.float16(): DataTypeFloat16,
    pa.float32(): DataTypeFloat32,
    pa.float64(): DataTypeFloat64,
    pa.date32(): DataTypeDate,
    pa.utf8(): DataTypeString,
    pa.binary(): DataTypeBinary,
}
_SIMPLE_TO_ARROW = {
    cls: t for t, cls in _SIMPLE.items() if cls not in (DataTypeDate, DataTypeString, DataTypeBinary)
}
_UNITS = {
    "s": TimeUnit.SECOND,
    "ms": TimeUnit.MILLISECOND,
    "us": TimeUnit.MICROSECOND,
    "ns": TimeUnit.NANOSECOND,
}
_ARROW_UNITS = {unit: name for name, unit in _UNITS.items()}
_DECIMALS = {32: pa.decimal32, 64: pa.decimal64, 128: pa.decimal128, 256: pa.decimal256}
_RUN_END_TYPES = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}

#: (kind, offset bit width) of the variable-size layouts, per ODF type, and their Arrow types.
_STRING_LAYOUTS = {
    ("Contiguous", 32): pa.utf8(),
    ("Contiguous", 64): pa.large_utf8(),
    ("View", 32): pa.string_view(),
}
_BINARY_LAYOUTS = {
    ("Contiguous", 32): pa.binary(),
    ("Contiguous", 64): pa.large_binary(),
    ("View", 32): pa.binary_view(),
}
#: List layouts: (pyarrow factory, pyarrow predicate).
_LIST_LAYOUTS = {
    ("Contiguous", 32): (pa.list_, pa.types.is_list),
    ("Contiguous", 64): (pa.large_list, pa.types.is_large_list),
    ("View", 32): (pa.list_view, pa.types.is_list_view),
    ("View", 64): (pa.large_list_view, pa.types.is_large_list_view),
}
#: Errors pyarrow raises for type parameters it rejects.
_PYARROW_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def _layout_attrs(kind: str, bits: int) -> ExtraAttributes:
    """Attributes of a variable-size layout; the default (contiguous, 32-bit offsets) needs none."""
    if (kind, bits) == ("Contiguous", 32):
        return {}
    return {BUFFER_ENCODING: {"kind": kind, "offsetBitWidth": bits}}


def _option(t: DataType, nullable: bool) -> DataType:
    return DataTypeOption(inner=t) if nullable else t


# --------------------------------------------------------------------------------------------------
# Arrow -> ODF
# --------------------------------------------------------------------------------------------------


def data_schema_from_arrow(schema: pa.Schema) -> DataSchema:
    """The ODF form of an Arrow schema, with encoding attributes where the Arrow layout needs recording."""
    return DataSchema(fields=[_field_from_arrow(f, f"{_ROOT}.{f.name}") for f in schema])


def _field_from_arrow(field: pa.Field, path: str) -> DataField:
    t, attrs = _type_from_arrow(field.type, path)
    return DataField(name=field.name, type=_option(t, field.nullable), extra=attrs or None)


def _nested_from_arrow(field: pa.Field, path: str) -> DataType:
    """A list item or map key/value: no field to hold attributes, so only default layouts fit."""
    t, attrs = _type_from_arrow(field.type, path)
    if attrs and _type_to_arrow(t, _Encoding(), path) != field.type:
        raise OdfFormatError(
            f"{path}: Arrow type {field.type} needs encoding attributes, which ODF keeps only on fields "
            "(not on list items or map keys/values)"
        )
    return _option(t, field.nullable)


def _type_from_arrow(t: pa.DataType, path: str) -> tuple[DataType, ExtraAttributes]:
    """The ODF type (never an Option) of an Arrow type and the attributes recording its encoding."""
    if t in _SIMPLE:
        return _SIMPLE[t](), {}
    for odf_type, layouts in ((DataTypeString(), _STRING_LAYOUTS), (DataTypeBinary(), _BINARY_LAYOUTS)):
        for (kind, bits), arrow_type in layouts.items():
            if t == arrow_type:
                return odf_type, _layout_attrs(kind, bits)
    if pa.types.is_fixed_size_binary(t):
        return DataTypeBinary(fixed_length=t.byte_width), {}
    if pa.types.is_date64(t):
        return DataTypeDate(), {DATE_ENCODING: {"unit": "Millisecond"}}
    if pa.types.is_time(t):
        return DataTypeTime(unit=_UNITS[t.unit]), {}
    if pa.types.is_timestamp(t):
        return DataTypeTimestamp(unit=_UNITS[t.unit], timezone=t.tz), {}
    if pa.types.is_duration(t):
        return DataTypeDuration(unit=_UNITS[t.unit]), {}
    if pa.types.is_decimal(t):
        attrs = {DECIMAL_ENCODING: {"bitWidth": t.bit_width}}
        return DataTypeDecimal(precision=t.precision, scale=t.scale), attrs
    if pa.types.is_fixed_size_list(t):
        item = _nested_from_arrow(t.value_field, f"{path}.item")
        return DataTypeList(item_type=item, fixed_length=t.list_size), {}
    for (kind, bits), (_, is_layout) in _LIST_LAYOUTS.items():
        if is_layout(t):
            item = _nested_from_arrow(t.value_field, f"{path}.item")
            return DataTypeList(item_type=item), _layout_attrs(kind, bits)
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        return DataTypeStruct(fields=[_field_from_arrow(f, f"{path}.{f.name}") for f in fields]), {}
    if pa.types.is_map(t):
        key = _nested_from_arrow(t.key_field, f"{path}.key")
        value = _nested_from_arrow(t.item_field, f"{path}.value")
        return DataTypeMap(key_type=key, value_type=value, keys_sorted=t.keys_sorted), {}
    if pa.types.is_run_end_encoded(t):
        values, attrs = _type_from_arrow(t.value_type, path)
        if BUFFER_ENCODING in attrs:
            raise OdfFormatError(f"{path}: run-end encoded {t.value_type} would need two buffer encodings")
        return values, {
            **attrs,
            BUFFER_ENCODING: {"kind": "RunEnd", "runEndsBitWidth": t.run_end_type.bit_width},
        }
    raise OdfFormatError(f"{path}: Arrow type {t} cannot be expressed in an ODF schema")


# --------------------------------------------------------------------------------------------------
# ODF -> Arrow
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Encoding:
    """A field's encoding attributes, validated; None = the default for the type."""

    buffer: str | None = None  # "Contiguous" | "View" | "RunEnd"
    bits: int | None = None  # offsetBitWidth, or runEndsBitWidth for RunEnd
    date_unit: str | None = None  # "Day" | "Millisecond"
    decimal_bits: int | None = None


def _pick(value: Any, choices: tuple[Any, ...], what: str, path: str) -> Any:
    """`value` as one of `choices`; names match case-insensitively (the reference accepts aliases)."""
    for choice in choices:
        if isinstance(choice, str) and isinstance(value, str) and value.lower() == choice.lower():
            return choice
        if type(value) is int and value == choice:  # bool is not a bit width
            return choice
    raise OdfFormatError(f"{path}: {what} must be one of {', '.join(map(str, choices))}, got {value!r}")


def _attribute(extra: ExtraAttributes, key: str, allowed: set[str], path: str) -> dict[str, Any] | None:
    value = extra.get(key)
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - allowed:
        raise OdfFormatError(
            f"{path}.extra.{key}: expected an object with keys {sorted(allowed)}, got {value!r}"
        )
    return value


def _encoding(extra: ExtraAttributes | None, path: str) -> _Encoding:
    extra = extra or {}
    enc = _Encoding()
    buffer = _attribute(extra, BUFFER_ENCODING, {"kind", "offsetBitWidth", "runEndsBitWidth"}, path)
    if buffer is not None:
        where = f"{path}.extra.{BUFFER_ENCODING}"
        kind = _pick(buffer.get("kind"), ("Contiguous", "View", "RunEnd"), "kind", where)
        bits_key, widths = (
            ("runEndsBitWidth", (16, 32, 64)) if kind == "RunEnd" else ("offsetBitWidth", (32, 64))
        )
        if set(buffer) - {"kind", bits_key}:
            raise OdfFormatError(f"{where}: {kind} encoding takes only kind and {bits_key}")
        bits = buffer.get(bits_key)
        enc = replace(enc, buffer=kind, bits=None if bits is None else _pick(bits, widths, bits_key, where))
    date = _attribute(extra, DATE_ENCODING, {"unit"}, path)
    if date is not None:
        unit = _pick(date.get("unit"), ("Day", "Millisecond"), "unit", f"{path}.extra.{DATE_ENCODING}")
        enc = replace(enc, date_unit=unit)
    decimal = _attribute(extra, DECIMAL_ENCODING, {"bitWidth"}, path)
    if decimal is not None:
        bits = _pick(
            decimal.get("bitWidth"), tuple(_DECIMALS), "bitWidth", f"{path}.extra.{DECIMAL_ENCODING}"
        )
        enc = replace(enc, decimal_bits=bits)
    return enc


def data_schema_to_arrow(schema: DataSchema) -> pa.Schema:
    """The Arrow schema an ODF schema describes: encoding attributes decide the layout, else defaults."""
    return pa.schema([_field_to_arrow(f, f"{_ROOT}.{f.name}") for f in schema.fields])


def _unwrap(t: DataType, path: str) -> tuple[DataType, bool]:
    """(type, nullable): Arrow has one nullability flag, so Option cannot nest."""
    if not isinstance(t, DataTypeOption):
        return t, isinstance(t, DataTypeNull)  # pyarrow only has nullable Null fields
    if isinstance(t.inner, DataTypeOption):
        raise OdfFormatError(f"{path}: Option of Option cannot be expressed in Arrow")
    return t.inner, True


def _field_to_arrow(field: DataField, path: str) -> pa.Field:
    t, nullable = _unwrap(field.type, path)
    try:
        return pa.field(field.name, _type_to_arrow(t, _encoding(field.extra, path), path), nullable)
    except OdfFormatError:
        raise
    except _PYARROW_ERRORS as e:
        raise OdfFormatError(f"{path}: {e}") from None


def _nested_to_arrow(name: str, t: DataType, path: str) -> pa.Field:
    inner, nullable = _unwrap(t, path)
    try:
        return pa.field(name, _type_to_arrow(inner, _Encoding(), path), nullable)
    except OdfFormatError:
        raise
    except _PYARROW_ERRORS as e:
        raise OdfFormatError(f"{path}: {e}") from None


def _arrow_unit(unit: TimeUnit | None) -> str:
    """The spec's default unit is Millisecond (SECOND is 0, so not `unit or ...`)."""
    return _ARROW_UNITS[_DEFAULT_UNIT if unit is None else unit]


def _length(value: int, what: str, path: str) -> int:
    if value < 0:
        raise OdfFormatError(f"{path}: negative {what} {value}")
    return value


def _type_to_arrow(t: DataType, enc: _Encoding, path: str) -> pa.DataType:
    """The Arrow type of `t` (not an Option) laid out as `enc` says; may raise pyarrow's errors."""
    if enc.buffer == "RunEnd":
        values = _type_to_arrow(t, replace(enc, buffer=None, bits=None), path)
        return pa.run_end_encoded(_RUN_END_TYPES[enc.bits or 32], values)
    variable_size = isinstance(t, DataTypeString | DataTypeBinary | DataTypeList) and (
        getattr(t, "fixed_length", None) is None
    )
    for key, present, applies in (
        (BUFFER_ENCODING, enc.buffer, variable_size),
        (DATE_ENCODING, enc.date_unit, isinstance(t, DataTypeDate)),
        (DECIMAL_ENCODING, enc.decimal_bits, isinstance(t, DataTypeDecimal)),
    ):
        if present is not None and not applies:
            raise OdfFormatError(f"{path}.extra.{key}: does not apply to type {type(t).__name__}")
    layout = (enc.buffer or "Contiguous", enc.bits or 32)

    if type(t) in _SIMPLE_TO_ARROW:
        return _SIMPLE_TO_ARROW[type(t)]
    if isinstance(t, DataTypeBinary) and t.fixed_length is not None:
        return pa.binary(_length(t.fixed_length, "fixedLength", path))
    if isinstance(t, DataTypeString | DataTypeBinary):
        layouts = _STRING_LAYOUTS if isinstance(t, DataTypeString) else _BINARY_LAYOUTS
        if layout not in layouts:
            raise OdfFormatError(
                f"{path}.extra.{BUFFER_ENCODING}: Arrow has no {type(t).__name__} with {layout}"
            )
        return layouts[layout]
    if isinstance(t, DataTypeDate):
        return pa.date64() if enc.date_unit == "Millisecond" else pa.date32()
    if isinstance(t, DataTypeDecimal):
        return _decimal(t, enc.decimal_bits, path)
    if isinstance(t, DataTypeTime):
        unit = _arrow_unit(t.unit)
        return pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
    if isinstance(t, DataTypeTimestamp):
        return pa.timestamp(_arrow_unit(t.unit), t.timezone or _DEFAULT_TIMEZONE)
    if isinstance(t, DataTypeDuration):
        return pa.duration(_arrow_unit(t.unit))
    if isinstance(t, DataTypeList):
        item = _nested_to_arrow("item", t.item_type, f"{path}.item")
        if t.fixed_length is not None:
            return pa.list_(item, _length(t.fixed_length, "fixedLength", path))
        return _LIST_LAYOUTS[layout][0](item)
    if isinstance(t, DataTypeStruct):
        return pa.struct([_field_to_arrow(f, f"{path}.{f.name}") for f in t.fields])
    if isinstance(t, DataTypeMap):
        key = _nested_to_arrow("key", t.key_type, f"{path}.key")
        if key.nullable:
            raise OdfFormatError(f"{path}.key: Arrow map keys cannot be nullable (Option)")
        value = _nested_to_arrow("value", t.value_type, f"{path}.value")
        return pa.map_(key, value, bool(t.keys_sorted))
    raise OdfFormatError(f"{path}: {type(t).__name__} cannot be expressed in Arrow")


def _decimal(t: DataTypeDecimal, bits: int | None, path: str) -> pa.DataType:
    """Without an attribute the width follows the precision, as the reference does."""
    if bits is None:
        bits = next((b for b, limit in _MAX_PRECISION.items() if t.precision <= limit), None)
        if bits is None:
            raise OdfFormatError(f"{path}: decimal precision {t.precision} exceeds Arrow's maximum of 76")
    return _DECIMALS[bits](t.precision, t.scale)


# --------------------------------------------------------------------------------------------------
# Logical form
# --------------------------------------------------------------------------------------------------


def strip_encoding(schema: DataSchema) -> DataSchema:
    """Only the logical schema, as written to `SetDataSchema`: encoding attributes removed at every level."""
    return replace(schema, fields=[_strip_field(f) for f in schema.fields])


def _strip_field(field: DataField) -> DataField:
    extra = {k: v for k, v in (field.extra or {}).items() if k not in ENCODING_KEYS}
    return replace(field, type=_strip_type(field.type), extra=extra or None)


def _strip_type(t: DataType) -> DataType:
    if isinstance(t, DataTypeOption):
        return DataTypeOption(inner=_strip_type(t.inner))
    if isinstance(t, DataTypeStruct):
        return DataTypeStruct(fields=[_strip_field(f) for f in t.fields])
    if isinstance(t, DataTypeList):
        return replace(t, item_type=_strip_type(t.item_type))
    if isinstance(t, DataTypeMap):
        return replace(t, key_type=_strip_type(t.key_type), value_type=_strip_type(t.value_type))
    return t

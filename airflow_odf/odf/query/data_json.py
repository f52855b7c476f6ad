"""Query results as JSON, value for value as kamu's encoder writes them, so that an output hash made here
is the hash kamu (and its client) computes for the same rows.

kamu (`kamu-data-utils`, `data/format/json.rs`) encodes Arrow values thus, and so does this module:
integers (Int64 too) and floats as JSON numbers (a NaN or an infinity as null, as serde_json writes
them; a Float32 by its shortest Float32 form), strings and booleans as such, nulls as explicit nulls
(every column of every row), decimals as strings with exactly `scale` digits after the point
(`"1.50"`, `"-0.05"`), binary as lower-case hex strings, dates as `YYYY-MM-DD`, timestamps with a time
zone as RFC 3339 with `Z` (an offset for another zone) and as many fraction digits as needed of 0, 3, 6
or 9 (`"2050-01-01T12:00:00Z"`, `"2024-10-22T11:54:24.234Z"`), timestamps without one likewise without
the zone, times as `HH:MM:SS[.fff]`, lists as arrays, structs as objects (arrays in JsonAoA). Maps,
unions, dictionaries and durations kamu does not encode: refused with a hint. The schema, when asked
for, is arrow-rs's serde form of the result's Arrow schema (`ArrowJson`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.types as pt

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.query.request import DATA_FORMATS

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_NANOS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_UNITS = {"s": "Second", "ms": "Millisecond", "us": "Microsecond", "ns": "Nanosecond"}

Column = Callable[[pa.Array], list[Any]]


class DataEncodingError(OdfError):
    """A result that kamu's JSON encoding cannot carry (a map, a union, ...), or one too large."""


def encode_data(table: pa.Table, data_format: str) -> Any:
    """The rows of `table` as kamu lays them out: JsonAoS `[{col: value}]`, JsonSoA `{col: [values]}`
    or JsonAoA `[[values]]` (column order as in the result)."""
    if data_format not in DATA_FORMATS:
        raise DataEncodingError(f"data format {data_format!r}: expected one of {', '.join(DATA_FORMATS)}")
    nested = _soa_struct if data_format == "JsonSoA" else _aos_struct if data_format == "JsonAoS" else _aoa
    names = table.column_names
    columns = [_column(table.column(i), nested) for i in range(table.num_columns)]
    if data_format == "JsonSoA":
        return dict(zip(names, columns, strict=True))
    if data_format == "JsonAoA":
        return [list(row) for row in zip(*columns, strict=True)] if columns else []
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)] if columns else []


def _column(chunked: pa.ChunkedArray, nested: _Nested) -> list[Any]:
    encode = _encoder(chunked.type, nested)
    values: list[Any] = []
    for chunk in chunked.chunks:
        values.extend(encode(chunk))
    return values


_Nested = Callable[[list[str], list[list[Any]]], list[Any]]


def _aos_struct(names: list[str], fields: list[list[Any]]) -> list[Any]:
    return [dict(zip(names, row, strict=True)) for row in zip(*fields, strict=True)]


def _aoa(names: list[str], fields: list[list[Any]]) -> list[Any]:
    return [list(row) for row in zip(*fields, strict=True)]


def _soa_struct(names: list[str], fields: list[list[Any]]) -> list[Any]:
    raise DataEncodingError(
        "JsonSoA cannot hold a struct column (kamu's neither): ask for JsonAoS or JsonAoA"
    )


def _with_nulls(encode: Callable[[Any], Any]) -> Column:
    """Encodes each non-null Python value of a column with `encode`."""

    def column(array: pa.Array) -> list[Any]:
        return [None if v is None else encode(v) for v in array.to_pylist()]

    return column


def _plain(array: pa.Array) -> list[Any]:
    return array.to_pylist()


def _float(value: float) -> float | None:
    return value if value - value == 0 else None  # NaN and infinities: null, as serde_json writes them


def _float32(value: float) -> float | None:
    import numpy as np

    return float(str(np.float32(value))) if value - value == 0 else None  # its shortest Float32 digits


def _decimal(scale: int) -> Callable[[Any], str]:
    def text(value: Any) -> str:
        sign, digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * 10 ** (exponent + scale)
        number = str(unscaled)
        if scale <= 0:
            out = number + "0" * -scale
        elif len(number) > scale:
            out = f"{number[:-scale]}.{number[-scale:]}"
        else:
            out = "0." + number.rjust(scale, "0")
        return f"-{out}" if sign and unscaled else out

    return text


def _fraction(nanos: int) -> str:
    """chrono's AutoSi: no fraction, or 3, 6 or 9 digits, as few as show every non-zero digit."""
    if nanos == 0:
        return ""
    if nanos % 1_000_000 == 0:
        return f".{nanos // 1_000_000:03d}"
    if nanos % 1_000 == 0:
        return f".{nanos // 1_000:06d}"
    return f".{nanos:09d}"


def _timestamp(unit: str, tz: str | None) -> Column:
    per_second = 1_000_000_000 // _NANOS[unit]
    zone = _zone(tz)

    def text(value: int) -> str:
        seconds, rest = divmod(value, per_second)
        try:
            moment = _EPOCH + dt.timedelta(seconds=seconds)
        except OverflowError:
            raise DataEncodingError(f"timestamp {value} {unit} is out of the years 1-9999") from None
        if zone is None:
            return moment.strftime("%Y-%m-%dT%H:%M:%S") + _fraction(rest * _NANOS[unit])
        local = moment.astimezone(zone)
        offset = local.utcoffset() or dt.timedelta(0)
        suffix = "Z" if not offset else local.strftime("%z")[:3] + ":" + local.strftime("%z")[3:]
        return local.strftime("%Y-%m-%dT%H:%M:%S") + _fraction(rest * _NANOS[unit]) + suffix

    def column(array: pa.Array) -> list[Any]:
        return [None if v is None else text(v) for v in array.cast(pa.int64()).to_pylist()]

    return column


def _zone(tz: str | None) -> dt.tzinfo | None:
    if tz is None:
        return None
    if tz.upper() in ("UTC", "Z", "+00:00", "ETC/UTC"):
        return dt.timezone.utc
    if tz[:1] in "+-" and len(tz) == 6 and tz[3] == ":":
        sign = -1 if tz[0] == "-" else 1
        return dt.timezone(sign * dt.timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6])))
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise DataEncodingError(f"time zone {tz!r} is unknown") from None


def _time(unit: str) -> Column:
    def text(value: int) -> str:
        nanos = value * _NANOS[unit]
        seconds, rest = divmod(nanos, 1_000_000_000)
        return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}{_fraction(rest)}"

    def column(array: pa.Array) -> list[Any]:
        return [None if v is None else text(v) for v in array.cast(pa.int64()).to_pylist()]

    return column


def _list(item: Column) -> Column:
    def column(array: pa.Array) -> list[Any]:
        items = item(array.values)  # offsets index into the unsliced values
        offsets = array.offsets.to_pylist()
        valid = array.is_valid().to_pylist()
        return [items[offsets[i] : offsets[i + 1]] if valid[i] else None for i in range(len(array))]

    return column


def _fixed_list(item: Column, size: int) -> Column:
    def column(array: pa.Array) -> list[Any]:
        items = item(array.values.slice(array.offset * size, len(array) * size))
        valid = array.is_valid().to_pylist()
        return [items[i * size : (i + 1) * size] if valid[i] else None for i in range(len(array))]

    return column


def _struct(fields: list[tuple[str, Column]], nested: _Nested) -> Column:
    def column(array: pa.Array) -> list[Any]:
        children = array.flatten()  # sliced like the array
        rows = nested(
            [name for name, _ in fields], [enc(c) for (_, enc), c in zip(fields, children, strict=True)]
        )
        valid = array.is_valid().to_pylist()
        return [row if ok else None for row, ok in zip(rows, valid, strict=True)]

    return column


def _encoder(t: pa.DataType, nested: _Nested) -> Column:
    if pt.is_null(t) or pt.is_boolean(t) or pt.is_integer(t):
        return _plain
    if pt.is_float64(t) or pt.is_float16(t):
        return _with_nulls(_float)
    if pt.is_float32(t):
        return _with_nulls(_float32)
    if pt.is_decimal(t):
        return _with_nulls(_decimal(t.scale))
    if pt.is_string(t) or pt.is_large_string(t) or pt.is_string_view(t):
        return _plain
    if pt.is_binary(t) or pt.is_large_binary(t) or pt.is_fixed_size_binary(t) or pt.is_binary_view(t):
        return _with_nulls(bytes.hex)
    if pt.is_date(t):
        return _with_nulls(dt.date.isoformat)
    if pt.is_timestamp(t):
        return _timestamp(t.unit, t.tz)
    if pt.is_time(t):
        return _time(t.unit)
    if pt.is_fixed_size_list(t):
        return _fixed_list(_encoder(t.value_type, nested), t.list_size)
    if pt.is_list(t) or pt.is_large_list(t):
        return _list(_encoder(t.value_type, nested))
    if pt.is_struct(t):
        return _struct(
            [(t.field(i).name, _encoder(t.field(i).type, nested)) for i in range(t.num_fields)], nested
        )
    raise DataEncodingError(
        f"a {t} column has no JSON form in kamu's encoding: turn it into one that has (e.g. to_json(...) "
        "or map_entries(...) for a map, CAST(... AS STRING) for an interval)"
    )


def arrow_json_schema(schema: pa.Schema) -> dict[str, Any]:
    """The schema as arrow-rs serializes it with serde (`schemaFormat: ArrowJson`)."""
    return {"fields": [_field(f) for f in schema], "metadata": {}}


def _field(field: pa.Field) -> dict[str, Any]:
    metadata = {k.decode(): v.decode() for k, v in (field.metadata or {}).items()}
    return {
        "name": field.name,
        "data_type": _data_type(field.type),
        "nullable": field.nullable,
        "dict_id": 0,
        "dict_is_ordered": False,
        "metadata": metadata,
    }


_SIMPLE = {
    pa.null(): "Null",
    pa.bool_(): "Boolean",
    pa.int8(): "Int8",
    pa.int16(): "Int16",
    pa.int32(): "Int32",
    pa.int64(): "Int64",
    pa.uint8(): "UInt8",
    pa.uint16(): "UInt16",
    pa.uint32(): "UInt32",
    pa.uint64(): "UInt64",
    pa.float16(): "Float16",
    pa.float32(): "Float32",
    pa.float64(): "Float64",
    pa.string(): "Utf8",
    pa.large_string(): "LargeUtf8",
    pa.binary(): "Binary",
    pa.large_binary(): "LargeBinary",
    pa.date32(): "Date32",
    pa.date64(): "Date64",
}


def _data_type(t: pa.DataType) -> Any:
    if t in _SIMPLE:
        return _SIMPLE[t]
    if pt.is_timestamp(t):
        return {"Timestamp": [_UNITS[t.unit], t.tz]}
    if pt.is_time32(t):
        return {"Time32": _UNITS[t.unit]}
    if pt.is_time64(t):
        return {"Time64": _UNITS[t.unit]}
    if pt.is_decimal(t):
        return {f"Decimal{t.bit_width}": [t.precision, t.scale]}
    if pt.is_fixed_size_binary(t):
        return {"FixedSizeBinary": t.byte_width}
    if pt.is_fixed_size_list(t):
        return {"FixedSizeList": [_field(t.value_field), t.list_size]}
    if pt.is_list(t):
        return {"List": _field(t.value_field)}
    if pt.is_large_list(t):
        return {"LargeList": _field(t.value_field)}
    if pt.is_struct(t):
        return {"Struct": [_field(t.field(i)) for i in range(t.num_fields)]}
    return str(t)

"""ODF logical hash (arrow-digest `RecordDigestV0<Sha3_256>`, FORMAT-NOTES §D) and physical hash.

The expected digests are recomputed here with hashlib, byte by byte: by hand for tiny tables, and by a
literal per-value transcription of §D (`ref_digest`) that cross-checks the vectorized implementation on
random data.
"""

from __future__ import annotations

import hashlib
import itertools
import struct
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, SHA3_256, Multihash
from airflow_odf.odf.hashing import parquet_hashes as pqh
from airflow_odf.odf.hashing.arrow_digest import RecordDigest, logical_hash_of_table
from airflow_odf.odf.hashing.parquet_hashes import (
    logical_hash_of_parquet,
    parquet_hashes,
    physical_hash_of_file,
)
from airflow_odf.utils.hashing import arrow_digest as shared_digest

# --------------------------------------------------------------------------------------------------
# Literal reference (§D), one value at a time
# --------------------------------------------------------------------------------------------------


def u8(v: int) -> bytes:
    return bytes([v])


def u16(v: int) -> bytes:
    return struct.pack("<H", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v % 2**64)


UNIT = {"s": 0, "ms": 1, "us": 2, "ns": 3}


def ref_type(t: pa.DataType) -> bytes:
    if pa.types.is_boolean(t):
        return u16(5)
    for bits, signed, unsigned in (
        (8, pa.int8(), pa.uint8()),
        (16, pa.int16(), pa.uint16()),
        (32, pa.int32(), pa.uint32()),
        (64, pa.int64(), pa.uint64()),
    ):
        if t == signed:
            return u16(1) + u8(1) + u64(bits)
        if t == unsigned:
            return u16(1) + u8(0) + u64(bits)
    if t == pa.float16():
        return u16(2) + u64(16)
    if t == pa.float32():
        return u16(2) + u64(32)
    if t == pa.float64():
        return u16(2) + u64(64)
    if t in (pa.binary(), pa.large_binary(), pa.binary_view()) or pa.types.is_fixed_size_binary(t):
        return u16(3)
    if t in (pa.string(), pa.large_string(), pa.string_view()):
        return u16(4)
    if pa.types.is_decimal(t):
        return u16(6) + u64(t.bit_width) + u64(t.precision) + u64(t.scale)
    if t == pa.date32():
        return u16(7) + u64(32) + u16(0)
    if t == pa.date64():
        return u16(7) + u64(64) + u16(1)
    if pa.types.is_time32(t):
        return u16(8) + u64(32) + u16(UNIT[t.unit])
    if pa.types.is_time64(t):
        return u16(8) + u64(64) + u16(UNIT[t.unit])
    if pa.types.is_timestamp(t):
        tz = b"\x00" if t.tz is None else u64(len(t.tz.encode())) + t.tz.encode()
        return u16(9) + u16(UNIT[t.unit]) + tz
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return u16(11) + ref_type(t.value_type)
    raise AssertionError(f"reference does not know {t}")


def ref_bit(buf: pa.Buffer, index: int) -> bool:
    return bool(buf.to_pybytes()[index // 8] >> (index % 8) & 1)


def ref_validity(arr: pa.Array) -> list[bool] | None:
    """An array's own nulls; None when it has none (arrow-rs keeps no validity buffer then)."""
    if arr.null_count == 0:
        return None
    return [ref_bit(arr.buffers()[0], arr.offset + i) for i in range(len(arr))]


def ref_combine(parent: list[bool] | None, child: list[bool] | None) -> list[bool] | None:
    """`maybe_combine_null_buffers`: the four arms of §D.5."""
    parent_has_nulls = parent is not None and not all(parent)
    child_has_nulls = child is not None and not all(child)
    if parent is None and child_has_nulls:
        return child
    if parent_has_nulls and child is None:
        return parent
    if parent_has_nulls and child_has_nulls:
        return [a or b for a, b in zip(parent, child, strict=True)]
    return None


def ref_offsets(arr: pa.Array, i: int) -> tuple[int, int]:
    fmt = (
        "<q"
        if pa.types.is_large_list(arr.type) or arr.type in (pa.large_string(), pa.large_binary())
        else "<i"
    )
    size = struct.calcsize(fmt)
    raw = arr.buffers()[1].to_pybytes()
    j = arr.offset + i
    return struct.unpack_from(fmt, raw, j * size)[0], struct.unpack_from(fmt, raw, (j + 1) * size)[0]


def ref_values(h, arr: pa.Array, validity: list[bool] | None) -> None:
    t = arr.type
    for i in range(len(arr)):
        if validity is not None and not validity[i]:
            h.update(b"\x00")
            continue
        j = arr.offset + i
        if pa.types.is_boolean(t):
            h.update(u8(2 if ref_bit(arr.buffers()[1], j) else 1))
        elif t in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()):
            lo, hi = ref_offsets(arr, i)
            value = arr.buffers()[2].to_pybytes()[lo:hi]
            h.update(u64(len(value)))
            h.update(value)
        elif t in (pa.string_view(), pa.binary_view()):
            value = arr[i].as_py() or b""
            value = value.encode() if isinstance(value, str) else value
            h.update(u64(len(value)))
            h.update(value)
        elif pa.types.is_fixed_size_binary(t):
            w = t.byte_width
            h.update(u64(w))
            h.update(arr.buffers()[1].to_pybytes()[j * w : (j + 1) * w])
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            if pa.types.is_fixed_size_list(t):
                lo, hi = j * t.list_size, (j + 1) * t.list_size
            else:
                lo, hi = ref_offsets(arr, i)
            items = arr.values.slice(lo, hi - lo)
            h.update(u64(hi - lo))
            ref_values(h, items, ref_validity(items))
        else:
            w = t.bit_width // 8
            h.update(arr.buffers()[1].to_pybytes()[j * w : (j + 1) * w])


def ref_digest(schema: pa.Schema, batches: list[pa.RecordBatch]) -> bytes:
    top = hashlib.sha3_256()
    columns = []

    def walk_fields(fields, level: int) -> None:
        for f in fields:
            name = f.name.encode()
            top.update(u64(len(name)))
            top.update(name)
            top.update(u64(level))
            if pa.types.is_struct(f.type):
                walk_fields(list(f.type), level + 1)
            else:
                columns.append(hashlib.sha3_256(ref_type(f.type)))

    walk_fields(schema, 0)

    def walk_arrays(arrays, parent, leaf: list[int]) -> None:
        for arr in arrays:
            combined = ref_combine(parent, ref_validity(arr))
            if pa.types.is_struct(arr.type):
                walk_arrays([arr.field(k) for k in range(arr.type.num_fields)], combined, leaf)
            else:
                ref_values(columns[leaf[0]], arr, combined)
                leaf[0] += 1

    for batch in batches:
        walk_arrays(batch.columns, None, [0])
    for c in columns:
        top.update(c.digest())
    return top.digest()


def manual(names_levels: list[tuple[str, int]], columns: list[tuple[bytes, bytes]]) -> bytes:
    """The digest of a schema walk and of columns given as (type bytes, value bytes), by hand."""
    top = hashlib.sha3_256()
    for name, level in names_levels:
        raw = name.encode()
        top.update(u64(len(raw)) + raw + u64(level))
    for type_bytes, value_bytes in columns:
        top.update(hashlib.sha3_256(type_bytes + value_bytes).digest())
    return top.digest()


def digest(data: pa.Table | pa.RecordBatch) -> bytes:
    d = RecordDigest(data.schema)
    d.update(data)
    return d.finalize()


def i32(v: int) -> bytes:
    return struct.pack("<i", v)


def i64(v: int) -> bytes:
    return struct.pack("<q", v)


INT32 = b"\x01\x00" + b"\x01" + (32).to_bytes(8, "little")
INT64 = b"\x01\x00" + b"\x01" + (64).to_bytes(8, "little")


# --------------------------------------------------------------------------------------------------
# Byte layout, by hand
# --------------------------------------------------------------------------------------------------


def test_ints_with_and_without_nulls() -> None:
    table = pa.table({"a": pa.array([1, None, 3], pa.int32()), "b": pa.array([5, -1, 2**40], pa.int64())})
    expected = manual(
        [("a", 0), ("b", 0)],
        [
            (INT32, b"\x01\x00\x00\x00" + b"\x00" + b"\x03\x00\x00\x00"),
            (INT64, i64(5) + b"\xff" * 8 + i64(2**40)),
        ],
    )
    assert digest(table) == expected
    assert digest(table) == ref_digest(table.schema, table.to_batches())


def test_bool() -> None:
    table = pa.table({"flag": pa.array([True, None, False, True])})
    assert digest(table) == manual([("flag", 0)], [(b"\x05\x00", b"\x02\x00\x01\x02")])


def test_utf8_and_name_length_in_bytes() -> None:
    table = pa.table({"größe": pa.array(["ab", None, "", "é"])})
    name = "größe".encode()
    assert len(name) == 7
    values = u64(2) + b"ab" + b"\x00" + u64(0) + u64(2) + "é".encode()
    top = hashlib.sha3_256(u64(7) + name + u64(0))
    top.update(hashlib.sha3_256(b"\x04\x00" + values).digest())
    assert digest(table) == top.digest()


def test_binary_and_fixed_size_binary() -> None:
    table = pa.table(
        {
            "bin": pa.array([b"\x00\xff", None, b""], pa.binary()),
            "fsb": pa.array([b"abc", None, b"xyz"], pa.binary(3)),
        }
    )
    expected = manual(
        [("bin", 0), ("fsb", 0)],
        [
            (b"\x03\x00", u64(2) + b"\x00\xff" + b"\x00" + u64(0)),
            (b"\x03\x00", u64(3) + b"abc" + b"\x00" + u64(3) + b"xyz"),
        ],
    )
    assert digest(table) == expected


def test_timestamps_timezone_and_unit() -> None:
    values = pa.array([0, None, 1000], pa.int64())
    utc = pa.table({"t": values.cast(pa.timestamp("ms", "UTC"))})
    naive = pa.table({"t": values.cast(pa.timestamp("ms"))})
    stream = i64(0) + b"\x00" + i64(1000)
    assert digest(utc) == manual([("t", 0)], [(u16(9) + u16(1) + u64(3) + b"UTC", stream)])
    assert digest(naive) == manual([("t", 0)], [(u16(9) + u16(1) + b"\x00", stream)])
    assert digest(utc) != digest(naive)


def test_dates_and_times() -> None:
    table = pa.table(
        {
            "d32": pa.array([1, None], pa.date32()),
            "d64": pa.array([86_400_000, 0], pa.date64()),
            "t32": pa.array([5, 6], pa.time32("s")),
            "t64": pa.array([None, 7], pa.time64("ns")),
        }
    )
    expected = manual(
        [("d32", 0), ("d64", 0), ("t32", 0), ("t64", 0)],
        [
            (u16(7) + u64(32) + u16(0), i32(1) + b"\x00"),
            (u16(7) + u64(64) + u16(1), i64(86_400_000) + i64(0)),
            (u16(8) + u64(32) + u16(0), i32(5) + i32(6)),
            (u16(8) + u64(64) + u16(3), b"\x00" + i64(7)),
        ],
    )
    assert digest(table) == expected


def test_decimal128() -> None:
    table = pa.table({"price": pa.array([Decimal("1.23"), None, Decimal("-0.05")], pa.decimal128(10, 2))})
    stream = (123).to_bytes(16, "little", signed=True) + b"\x00" + (-5).to_bytes(16, "little", signed=True)
    type_bytes = u16(6) + u64(128) + u64(10) + u64(2)
    assert digest(table) == manual([("price", 0)], [(type_bytes, stream)])


def test_decimal_negative_scale_is_sign_extended() -> None:
    table = pa.table({"d": pa.array([], pa.decimal128(5, -2))})
    type_bytes = u16(6) + u64(128) + u64(5) + b"\xfe" + b"\xff" * 7
    assert digest(table) == manual([("d", 0)], [(type_bytes, b"")])


def test_float64() -> None:
    table = pa.table({"x": pa.array([1.5, None, -0.0, float("nan")])})
    stream = struct.pack("<d", 1.5) + b"\x00" + struct.pack("<d", -0.0) + np.float64("nan").tobytes()
    assert digest(table) == manual([("x", 0)], [(u16(2) + u64(64), stream)])


def test_list_with_null_lists_and_null_items() -> None:
    table = pa.table({"l": pa.array([[1, None], None, [], [3]], pa.list_(pa.int32()))})
    stream = u64(2) + i32(1) + b"\x00" + b"\x00" + u64(0) + u64(1) + i32(3)
    assert digest(table) == manual([("l", 0)], [(u16(11) + INT32, stream)])


def test_nested_list_of_strings() -> None:
    t = pa.list_(pa.list_(pa.string()))
    table = pa.table({"ll": pa.array([[["a", None], None, []], None, [["bc"]]], t)})
    stream = (
        (u64(3) + (u64(2) + (u64(1) + b"a" + b"\x00")) + b"\x00" + u64(0))
        + b"\x00"
        + (u64(1) + u64(1) + u64(2) + b"bc")
    )
    assert digest(table) == manual([("ll", 0)], [(u16(11) + u16(11) + u16(4), stream)])


def int32_with_raw_slots(values: list[int], valid: list[bool] | None) -> pa.Array:
    """An int32 array whose null slots hold the given raw values (arrow-digest may hash them)."""
    data = pa.py_buffer(np.array(values, dtype="<i4").tobytes())
    if valid is None:
        return pa.Array.from_buffers(pa.int32(), len(values), [None, data])
    bitmap = pa.py_buffer(np.packbits(np.array(valid, dtype=np.uint8), bitorder="little").tobytes())
    return pa.Array.from_buffers(pa.int32(), len(values), [bitmap, data], null_count=valid.count(False))


def test_struct_parent_nulls_apply_to_children_without_nulls() -> None:
    x = int32_with_raw_slots([10, 20, 30], None)
    s = pa.StructArray.from_arrays([x], names=["x"], mask=pa.array([False, True, False]))
    table = pa.table({"s": s})
    assert digest(table) == manual([("s", 0), ("x", 1)], [(INT32, i32(10) + b"\x00" + i32(30))])


def test_struct_nulls_at_both_levels_are_ored() -> None:
    """§D.5 quirk: both levels have nulls -> OR of validity, so every value here counts as valid and
    the raw bytes under the child's null slot (30) are hashed instead of a null marker."""
    x = int32_with_raw_slots([10, 20, 30, 40], [True, True, False, True])
    s = pa.StructArray.from_arrays([x], names=["x"], mask=pa.array([False, True, False, False]))
    table = pa.table({"s": s})
    quirk = manual([("s", 0), ("x", 1)], [(INT32, i32(10) + i32(20) + i32(30) + i32(40))])
    intuitive = manual([("s", 0), ("x", 1)], [(INT32, i32(10) + b"\x00" + b"\x00" + i32(40))])
    assert digest(table) == quirk != intuitive
    assert digest(table) == ref_digest(table.schema, table.to_batches())


def test_struct_or_without_nulls_drops_grandchild_nulls() -> None:
    """An OR-ed bitmap without nulls is "present without nulls": the last arm then drops the leaf's
    own nulls too (raw 30 hashed); the sibling leaf at level 1 keeps its OR-ed view."""
    x = int32_with_raw_slots([10, 20, 30], [True, True, False])
    inner = pa.StructArray.from_arrays([x], names=["x"], mask=pa.array([False, True, False]))
    y = int32_with_raw_slots([1, 2, 3], [False, True, True])
    outer = pa.StructArray.from_arrays([inner, y], names=["inner", "y"], mask=pa.array([True, False, False]))
    table = pa.table({"outer": outer})
    expected = manual(
        [("outer", 0), ("inner", 1), ("x", 2), ("y", 1)],
        [(INT32, i32(10) + i32(20) + i32(30)), (INT32, b"\x00" + i32(2) + i32(3))],
    )
    assert digest(table) == expected
    assert digest(table) == ref_digest(table.schema, table.to_batches())


@pytest.mark.parametrize(
    ("data_type", "type_bytes"),
    [
        (pa.int8(), u16(1) + u8(1) + u64(8)),
        (pa.uint8(), u16(1) + u8(0) + u64(8)),
        (pa.int16(), u16(1) + u8(1) + u64(16)),
        (pa.uint16(), u16(1) + u8(0) + u64(16)),
        (pa.uint32(), u16(1) + u8(0) + u64(32)),
        (pa.uint64(), u16(1) + u8(0) + u64(64)),
        (pa.float16(), u16(2) + u64(16)),
        (pa.float32(), u16(2) + u64(32)),
        (pa.bool_(), u16(5)),
        (pa.large_string(), u16(4)),
        (pa.string_view(), u16(4)),
        (pa.large_binary(), u16(3)),
        (pa.binary(16), u16(3)),
        (pa.decimal256(40, 3), u16(6) + u64(256) + u64(40) + u64(3)),
        (pa.time32("ms"), u16(8) + u64(32) + u16(1)),
        (pa.time64("us"), u16(8) + u64(64) + u16(2)),
        (pa.timestamp("s"), u16(9) + u16(0) + b"\x00"),
        (pa.timestamp("us", "+00:00"), u16(9) + u16(2) + u64(6) + b"+00:00"),
        (pa.timestamp("ns", "Europe/Paris"), u16(9) + u16(3) + u64(12) + b"Europe/Paris"),
        (pa.large_list(pa.int64()), u16(11) + INT64),
        (pa.list_(pa.int64(), 3), u16(11) + INT64),
        (pa.null(), u16(0)),
    ],
)
def test_type_bytes(data_type: pa.DataType, type_bytes: bytes) -> None:
    schema = pa.schema([pa.field("c", data_type)])
    assert RecordDigest(schema).finalize() == manual([("c", 0)], [(type_bytes, b"")])
    if not pa.types.is_null(data_type):
        assert type_bytes == ref_type(data_type)


def test_decimal32_and_64_widths() -> None:
    if not hasattr(pa, "decimal32"):
        pytest.skip("pyarrow without decimal32/64")
    table = pa.table(
        {
            "d32": pa.array([Decimal("1.5"), None], pa.decimal32(5, 1)),
            "d64": pa.array([Decimal("-2.25"), Decimal(0)], pa.decimal64(12, 2)),
        }
    )
    expected = manual(
        [("d32", 0), ("d64", 0)],
        [
            (u16(6) + u64(32) + u64(5) + u64(1), i32(15) + b"\x00"),
            (u16(6) + u64(64) + u64(12) + u64(2), i64(-225) + i64(0)),
        ],
    )
    assert digest(table) == expected


def test_empty_schema_and_struct_parents_in_schema_walk() -> None:
    schema = pa.schema([pa.field("a", pa.struct([pa.field("b", pa.int64())])), pa.field("c", pa.bool_())])
    expected = manual([("a", 0), ("b", 1), ("c", 0)], [(INT64, b""), (u16(5), b"")])
    assert RecordDigest(schema).finalize() == expected
    assert RecordDigest(pa.schema([])).finalize() == hashlib.sha3_256().digest()


# --------------------------------------------------------------------------------------------------
# Equalities and inequalities the reference asserts
# --------------------------------------------------------------------------------------------------


def one_column(values, data_type, name: str = "c") -> bytes:
    return digest(pa.table({name: pa.array(values, data_type)}))


def test_string_variants_hash_identically() -> None:
    values = ["foo", None, "", "a longer string than twelve bytes"]
    base = one_column(values, pa.string())
    assert one_column(values, pa.large_string()) == base
    assert one_column(values, pa.string_view()) == base
    assert one_column(["foo", "bar", "baz"], pa.string()) != one_column(
        ["foo", "bar", "", "baz"], pa.string()
    )


def test_binary_variants_hash_identically() -> None:
    values = [b"one", b"two", b"", b"three"]
    base = one_column(values, pa.binary())
    assert one_column(values, pa.large_binary()) == base
    assert one_column(values, pa.binary_view()) == base
    assert one_column([b"one", b"two"], pa.binary(3)) == one_column([b"one", b"two"], pa.binary())
    assert one_column([b"one", None], pa.binary(3)) == one_column([b"one", None], pa.large_binary())
    assert one_column(values, pa.binary()) != one_column(values, pa.string())


def test_list_variants_hash_identically() -> None:
    values = [[1, 2], None, [None, 4]]
    base = one_column(values, pa.list_(pa.int32()))
    assert one_column(values, pa.large_list(pa.int32())) == base
    assert one_column(values, pa.list_(pa.int32(), 2)) == base
    assert one_column(values, pa.list_(pa.int64())) != base
    # a value sliding to the next list changes the hash
    a = one_column([[0, 1, 2], [3, 4, 5], [6]], pa.list_(pa.int32()))
    b = one_column([[0, 1, 2], [3, 4], [5, 6]], pa.list_(pa.int32()))
    assert a != b


def test_record_order_matters() -> None:
    table = pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    assert digest(table) != digest(table.take([2, 1, 0]))


def test_null_differs_from_any_value() -> None:
    assert one_column([1, None], pa.int64()) != one_column([1, 0], pa.int64())
    assert one_column(["a", None], pa.string()) != one_column(["a", ""], pa.string())
    assert one_column([True, None], pa.bool_()) != one_column([True, False], pa.bool_())
    assert one_column([[1], None], pa.list_(pa.int8())) != one_column([[1], []], pa.list_(pa.int8()))


def test_signedness_timezone_and_unit_matter() -> None:
    assert one_column([1, 2], pa.int32()) != one_column([1, 2], pa.uint32())
    ts = [0, 1_000]
    assert one_column(ts, pa.timestamp("ms", "UTC")) != one_column(ts, pa.timestamp("ms", "+00:00"))
    ms = pa.array(ts, pa.timestamp("ms", "UTC"))
    assert digest(pa.table({"c": ms})) != digest(pa.table({"c": ms.cast(pa.timestamp("us", "UTC"))}))


def test_nullability_and_metadata_do_not_matter_but_names_do() -> None:
    columns = [pa.array([1, 2], pa.int64()), pa.array(["a", "b"])]
    plain = pa.table(columns, schema=pa.schema([("a", pa.int64()), ("b", pa.string())]))
    decorated = pa.table(
        columns,
        schema=pa.schema(
            [
                pa.field("a", pa.int64(), nullable=False, metadata={"k": "v"}),
                pa.field("b", pa.string(), nullable=False),
            ],
            metadata={"table": "meta"},
        ),
    )
    renamed = pa.table(columns, schema=pa.schema([("a", pa.int64()), ("bee", pa.string())]))
    assert digest(plain) == digest(decorated)
    assert digest(plain) != digest(renamed)


def test_extension_types_hash_as_storage() -> None:
    if not hasattr(pa, "uuid"):
        pytest.skip("pyarrow without the uuid extension type")
    raw = pa.array([b"0123456789abcdef", None], pa.binary(16))
    assert digest(pa.table({"u": raw.cast(pa.uuid())})) == digest(pa.table({"u": raw}))


def test_sliced_arrays_and_bit_offsets() -> None:
    table = pa.table(
        {
            "b": pa.array([True, False, None, True, True, None, False, True, False, True, None]),
            "s": pa.array(["a", None, "bb", "ccc", None, "d", "e", "", "f", None, "g"]),
            "l": pa.array([[1], None, [2, None], [], [3], None, [4, 5], [6], None, [7], [8]]),
            "f": pa.array([1.0, None, 2.0, 3.0, None, 4.0, 5.0, 6.0, 7.0, None, 8.0]),
        }
    )
    for start in range(0, 11):
        part = table.slice(start)
        assert digest(part) == ref_digest(part.schema, part.to_batches()), start


def test_chunked_hashing_of_large_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    n = 1000
    valid = rng.random(n) > 0.2
    table = pa.table(
        {
            "s": pa.array([f"v{k}" * (k % 5) for k in range(n)], mask=~valid),
            "f": pa.array(rng.random(n), mask=~valid),
            "l": pa.array([list(range(k % 4)) for k in range(n)], pa.list_(pa.int16()), mask=~valid),
            "b": pa.array(rng.random(n) > 0.5, mask=~valid),
        }
    )
    whole = digest(table)
    monkeypatch.setattr(shared_digest, "CHUNK_ROWS", 37)
    monkeypatch.setattr(shared_digest, "_CHUNK_BYTES", 50)
    assert digest(table) == whole == ref_digest(table.schema, table.to_batches())


# --------------------------------------------------------------------------------------------------
# Properties: batch boundaries, reference agreement
# --------------------------------------------------------------------------------------------------

ROWS = st.integers(min_value=0, max_value=40)


@st.composite
def tables(draw, with_structs: bool = False) -> pa.Table:
    n = draw(ROWS)

    def column(elements, data_type):
        values = draw(st.lists(st.none() | elements, min_size=n, max_size=n))
        return pa.array(values, data_type)

    columns = {
        "offset": column(st.integers(-(2**63), 2**63 - 1), pa.int64()),
        "op": column(st.integers(0, 3), pa.int32()),
        "flag": column(st.booleans(), pa.bool_()),
        "name": column(st.text(max_size=12), pa.string()),
        "blob": column(st.binary(min_size=2, max_size=2), pa.binary(2)),
        "value": column(st.floats(allow_nan=False), pa.float64()),
        "items": column(
            st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=4), pa.list_(pa.int32())
        ),
        "words": column(st.lists(st.none() | st.text(max_size=3), max_size=3), pa.large_list(pa.string())),
    }
    if with_structs:
        inner = pa.StructArray.from_arrays(
            [column(st.integers(0, 9), pa.int8()), column(st.text(max_size=2), pa.string())],
            names=["x", "y"],
            mask=pa.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), pa.bool_()),
        )
        columns["rec"] = pa.StructArray.from_arrays(
            [inner, column(st.booleans(), pa.bool_())],
            names=["inner", "z"],
            mask=pa.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), pa.bool_()),
        )
    return pa.table(columns)


def split(table: pa.Table, cuts: list[int]) -> list[pa.RecordBatch]:
    bounds = sorted({0, table.num_rows, *(c % (table.num_rows + 1) for c in cuts)})
    batches: list[pa.RecordBatch] = []
    for lo, hi in itertools.pairwise(bounds):
        batches += table.slice(lo, hi - lo).to_batches()
    return batches


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables(), cuts=st.lists(st.integers(min_value=0, max_value=1000), max_size=5))
def test_batch_boundaries_do_not_matter(table: pa.Table, cuts: list[int]) -> None:
    whole = digest(table.combine_chunks())
    d = RecordDigest(table.schema)
    batches = split(table, cuts)
    for batch in batches:
        d.update(batch)
    assert d.finalize() == whole
    assert whole == ref_digest(
        table.schema, [table.combine_chunks().to_batches()[0]] if table.num_rows else []
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables(with_structs=True), cuts=st.lists(st.integers(min_value=0, max_value=1000), max_size=4))
def test_matches_literal_reference_including_struct_quirks(table: pa.Table, cuts: list[int]) -> None:
    batches = split(table, cuts)
    d = RecordDigest(table.schema)
    for batch in batches:
        d.update(batch)
    assert d.finalize() == ref_digest(table.schema, batches)


# --------------------------------------------------------------------------------------------------
# Parquet, physical hash, multihash
# --------------------------------------------------------------------------------------------------


def odf_table(n: int) -> pa.Table:
    rng = np.random.default_rng(1)
    ts = pa.array(1_700_000_000_000 + np.arange(n, dtype=np.int64) * 1000, pa.timestamp("ms", "UTC"))
    return pa.table(
        {
            "offset": pa.array(np.arange(n, dtype=np.int64)),
            "op": pa.array(np.zeros(n, dtype=np.int32)),
            "system_time": ts,
            "event_time": ts,
            "city": pa.array([f"city-{k % 97}" for k in range(n)], mask=rng.random(n) < 0.1),
            "population": pa.array(rng.integers(0, 10**7, n), mask=rng.random(n) < 0.1),
            "ratio": pa.array(rng.random(n), mask=rng.random(n) < 0.1),
            "active": pa.array(rng.random(n) < 0.5),
            "price": pa.array([Decimal(k) / 100 for k in range(n)], pa.decimal128(12, 2)),
            "tags": pa.array([[f"t{k % 3}"] * (k % 3) for k in range(n)], pa.list_(pa.string())),
            "loc": pa.StructArray.from_arrays(
                [pa.array(rng.random(n)), pa.array(rng.random(n))], names=["lat", "lon"]
            ),
        }
    )


def test_parquet_round_trip(tmp_path: Path) -> None:
    table = odf_table(25_000)
    path = tmp_path / "data.parquet"
    pq.write_table(table, path, row_group_size=7_000)
    from_file = logical_hash_of_parquet(path)
    assert from_file == logical_hash_of_table(table)
    assert from_file.code == ARROW0_SHA3_256
    assert logical_hash_of_parquet(str(path)) == from_file


def test_parquet_without_rows(tmp_path: Path) -> None:
    table = odf_table(0)
    path = tmp_path / "empty.parquet"
    pq.write_table(table, path)
    assert logical_hash_of_parquet(path) == logical_hash_of_table(table)
    assert logical_hash_of_parquet(path).digest == RecordDigest(table.schema).finalize()


def kamu_read(path: Path) -> list[pa.RecordBatch]:
    """The file's rows as the reference reads them: batches of `PARQUET_BATCH_SIZE`, across row groups."""
    return list(pq.ParquetFile(path).iter_batches(batch_size=pqh.PARQUET_BATCH_SIZE))


def test_parquet_hashes_equal_a_sequential_read(tmp_path: Path) -> None:
    """Columns hashed in parallel, a row group at a time (structs in the reference's batches), give the
    digest of the sequential read, and the physical hash is the file's."""
    n = 35_000
    rng = np.random.default_rng(7)
    table = odf_table(n)
    # nulls at both levels of a struct, the outer ones in the first batch only: the digest depends on
    # the batches (§D.5)
    outer_nulls = np.zeros(n, dtype=bool)
    outer_nulls[rng.choice(10_000, 50, replace=False)] = True
    inner = pa.StructArray.from_arrays(
        [pa.array(rng.integers(0, 9, n), pa.int8(), mask=rng.random(n) < 0.2), pa.array(rng.random(n))],
        names=["x", "y"],
        mask=pa.array(rng.random(n) < 0.1),
    )
    rec = pa.StructArray.from_arrays(
        [inner, pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.3)],
        names=["inner", "z"],
        mask=pa.array(outer_nulls),
    )
    table = table.append_column("rec", rec)
    table = table.append_column("blob", pa.array([bytes([k % 251]) * 3 for k in range(n)], pa.binary(3)))
    table = table.append_column("day", pa.array(np.arange(n, dtype=np.int32), pa.date32()))
    path = tmp_path / "data.parquet"
    pq.write_table(table, path, row_group_size=7_000)

    logical, physical = parquet_hashes(path)
    expected = ref_digest(table.schema, kamu_read(path))
    assert logical == Multihash(ARROW0_SHA3_256, expected)
    assert logical_hash_of_parquet(path) == logical
    assert physical == physical_hash_of_file(path)
    assert expected != digest(table.combine_chunks()), "the struct column should depend on the batches"


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    table=tables(with_structs=True),
    row_group=st.integers(min_value=1, max_value=50),
    batch=st.integers(min_value=1, max_value=20),
)
def test_parquet_hashes_equal_the_literal_reference(
    tmp_path: Path, table: pa.Table, row_group: int, batch: int
) -> None:
    path = tmp_path / "data.parquet"
    pq.write_table(table, path, row_group_size=row_group)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pqh, "PARQUET_BATCH_SIZE", batch)
        logical, physical = parquet_hashes(path)
        assert logical.digest == ref_digest(table.schema, kamu_read(path))
    assert physical == physical_hash_of_file(path)


@pytest.mark.parametrize("chunk_bytes", [16 << 20, 50])
def test_dictionary_encoded_strings_are_hashed_from_their_dictionary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    """String and binary columns read as dictionaries, each distinct value prefixed once: the digest is
    the decoded values' (nulls, empty values, values of one length, a dictionary per row group, pages
    that fell back to plain, pieces of bounded size). pyarrow's files are read so only when made to
    (their dictionary pages are marked PLAIN, like fallback pages); Spark's: tests/engine/test_writer.py."""
    monkeypatch.setattr(pqh, "_dictionary_only", lambda column: column.has_dictionary_page)
    monkeypatch.setattr(shared_digest, "_CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(shared_digest, "CHUNK_ROWS", 37)
    monkeypatch.setattr(pqh, "CHUNK_ROWS", 37)  # the rows per batch read from the file
    n = 1_000
    rng = np.random.default_rng(11)
    words = ["", "a", "ab", "émoji ✓", "x" * 40]
    table = pa.table(
        {
            "s": pa.array([words[k] for k in rng.integers(0, 5, n)], mask=rng.random(n) < 0.2),
            "b": pa.array([bytes([k]) * k for k in rng.integers(0, 4, n)], pa.binary()),
            "l": pa.array([str(k) * 3 for k in range(n)], pa.large_string()),  # falls back to plain
            "i": pa.array(rng.integers(0, 3, n)),
            "w": pa.array([f"SYM{k:03d}" for k in rng.integers(0, 50, n)]),  # one length, no nulls
        }
    )
    path = tmp_path / "dict.parquet"
    pq.write_table(table, path, row_group_size=300, dictionary_pagesize_limit=512, data_page_size=256)
    metadata = pq.read_metadata(path)
    assert all(metadata.row_group(r).column(2).has_dictionary_page for r in range(4))
    calls: list[int] = []
    stream = shared_digest._dictionary_stream
    monkeypatch.setattr(
        shared_digest, "_dictionary_stream", lambda arr, valid: calls.append(len(arr)) or stream(arr, valid)
    )
    logical, _ = parquet_hashes(path)
    assert logical == logical_hash_of_table(table)
    assert logical.digest == ref_digest(table.schema, kamu_read(path))
    assert sum(calls) == 4 * n  # s, b, l and w, every row

    calls.clear()  # stored without dictionaries: read decoded
    pq.write_table(table, tmp_path / "plain.parquet", use_dictionary=False)
    assert parquet_hashes(tmp_path / "plain.parquet")[0] == logical
    assert calls == []


@pytest.mark.parametrize("rows", [3, 200_000])
def test_parquet_hashes_whether_the_files_bytes_cost_most_or_least(tmp_path: Path, rows: int) -> None:
    """The file's bytes are hashed among the columns in the order of their estimated cost: first for a
    file that is mostly footer, last for one whose columns compress to nearly nothing."""
    table = pa.table({"c": pa.array(np.zeros(rows, np.int64)), "s": pa.array(["same"] * rows)})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    costs = pqh._column_costs(pq.read_schema(path), pq.read_metadata(path))
    size = path.stat().st_size
    assert all(cost > size for cost in costs) if rows > 3 else all(cost < size for cost in costs)
    assert parquet_hashes(path) == (logical_hash_of_table(table), physical_hash_of_file(path))


def test_parquet_hashes_with_duplicate_column_names(tmp_path: Path) -> None:
    columns = [pa.array([1, None, 3]), pa.array(["a", "b", None]), pa.array([0.5, 1.5, None])]
    table = pa.Table.from_arrays(columns, names=["a", "b", "a"])
    path = tmp_path / "dup.parquet"
    pq.write_table(table, path)
    assert parquet_hashes(path) == (logical_hash_of_table(table), physical_hash_of_file(path))


def test_physical_hash(tmp_path: Path) -> None:
    path = tmp_path / "blob.bin"
    data = np.random.default_rng(3).bytes(3 * (1 << 20) + 17)
    path.write_bytes(data)
    mh = physical_hash_of_file(path)
    assert mh == Multihash(SHA3_256, hashlib.sha3_256(data).digest())
    assert str(mh).startswith("f1620")


def test_multihash_text_form() -> None:
    mh = logical_hash_of_table(pa.table({"a": [1, 2, 3]}))
    text = str(mh)
    assert text.startswith("f9680c00120")
    assert len(text) == len("f9680c00120") + 64
    assert mh.to_bytes()[:5] == bytes.fromhex("9680c00120")
    assert Multihash.parse(text) == mh
    assert Multihash.parse(text).code == ARROW0_SHA3_256


def test_finalize_does_not_consume() -> None:
    table = pa.table({"a": [1, 2, 3]})
    d = RecordDigest(table.schema)
    d.update(table.slice(0, 2))
    first = d.finalize()
    assert d.finalize() == first
    d.update(table.slice(2))
    assert d.finalize() == digest(table)
    assert d.bytes_hashed == 3 * 8


# --------------------------------------------------------------------------------------------------
# Unsupported types and mismatched batches
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data_type",
    [
        pa.duration("ms"),
        pa.month_day_nano_interval(),
        pa.map_(pa.string(), pa.int32()),
        pa.dictionary(pa.int32(), pa.string()),
        pa.dense_union([pa.field("i", pa.int32())]),
        pa.run_end_encoded(pa.int32(), pa.string()),
        pa.list_view(pa.int32()),
        pa.list_(pa.struct([pa.field("x", pa.int32())])),
        pa.list_(pa.duration("s")),
    ],
)
def test_unsupported_types_name_the_column(data_type: pa.DataType) -> None:
    schema = pa.schema([pa.field("ok", pa.int32()), pa.field("bad_col", data_type)])
    with pytest.raises(OdfFormatError, match="bad_col"):
        RecordDigest(schema)


def test_unsupported_nested_field_is_named_by_path() -> None:
    schema = pa.schema([pa.field("rec", pa.struct([pa.field("wait", pa.duration("s"))]))])
    with pytest.raises(OdfFormatError, match=r"rec\.wait"):
        RecordDigest(schema)


def test_null_typed_column_fails_when_hashed() -> None:
    table = pa.table({"a": [1, 2], "nothing": pa.nulls(2)})
    d = RecordDigest(table.schema)  # the reference accepts the schema ...
    with pytest.raises(OdfFormatError, match="nothing"):
        d.update(table)  # ... and panics on values


def test_batch_with_another_schema_is_rejected() -> None:
    d = RecordDigest(pa.schema([("a", pa.int64())]))
    with pytest.raises(OdfFormatError, match="schema"):
        d.update(pa.record_batch({"a": pa.array([1], pa.int32())}))
    d.update(
        pa.record_batch(
            {"a": pa.array([1], pa.int64())}, schema=pa.schema([pa.field("a", pa.int64(), False)])
        )
    )

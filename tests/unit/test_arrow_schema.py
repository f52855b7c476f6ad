"""RFC-010 raw Arrow schemas: bare `Schema` flatbuffers, ours and pyarrow's, and corrupt input."""

from __future__ import annotations

import struct

import flatbuffers
import pyarrow as pa
import pytest
from flatbuffers.table import Table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.schema.raw_arrow import decode_raw_arrow_schema, encode_raw_arrow_schema

ALL_TYPES = pa.schema(
    [
        pa.field("null", pa.null()),
        pa.field("bool", pa.bool_(), nullable=False),
        *(pa.field(f"{t}", t) for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64())),
        *(pa.field(f"{t}", t, nullable=False) for t in (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())),
        pa.field("float16", pa.float16()),
        pa.field("float32", pa.float32()),
        pa.field("float64", pa.float64()),
        pa.field("binary", pa.binary()),
        pa.field("large_binary", pa.large_binary()),
        pa.field("fixed_binary", pa.binary(16)),
        pa.field("binary_view", pa.binary_view()),
        pa.field("utf8", pa.utf8(), nullable=False),
        pa.field("large_utf8", pa.large_utf8()),
        pa.field("utf8_view", pa.string_view()),
        pa.field("decimal32", pa.decimal32(9, 2)),
        pa.field("decimal64", pa.decimal64(18, -3)),
        pa.field("decimal128", pa.decimal128(38, 10)),
        pa.field("decimal256", pa.decimal256(76, 0)),
        pa.field("date32", pa.date32()),
        pa.field("date64", pa.date64()),
        *(pa.field(f"time_{u}", pa.time32(u)) for u in ("s", "ms")),
        *(pa.field(f"time_{u}", pa.time64(u)) for u in ("us", "ns")),
        *(pa.field(f"ts_{u}", pa.timestamp(u)) for u in ("s", "ms", "us", "ns")),
        pa.field("ts_utc", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("ts_zone", pa.timestamp("ns", tz="America/New_York")),
        pa.field("ts_offset", pa.timestamp("us", tz="+07:30")),
        *(pa.field(f"duration_{u}", pa.duration(u)) for u in ("s", "ms", "us", "ns")),
        pa.field("interval", pa.month_day_nano_interval()),
        pa.field("list", pa.list_(pa.int32())),
        pa.field("list_named", pa.list_(pa.field("element", pa.utf8(), nullable=False))),
        pa.field("large_list", pa.large_list(pa.float64())),
        pa.field("fixed_list", pa.list_(pa.int8(), 3)),
        pa.field("list_view", pa.list_view(pa.utf8())),
        pa.field("large_list_view", pa.large_list_view(pa.int64())),
        pa.field(
            "struct",
            pa.struct(
                [
                    pa.field("a", pa.int32(), nullable=False),
                    pa.field("b", pa.list_(pa.struct([("c", pa.large_utf8())]))),
                ]
            ),
        ),
        pa.field("empty_struct", pa.struct([])),
        pa.field("map", pa.map_(pa.utf8(), pa.int64())),
        pa.field("map_sorted", pa.map_(pa.int32(), pa.list_(pa.utf8()), keys_sorted=True)),
        pa.field("dictionary", pa.dictionary(pa.int16(), pa.utf8(), ordered=True)),
        pa.field("dictionary_list", pa.list_(pa.dictionary(pa.uint8(), pa.large_utf8()))),
        pa.field("sparse_union", pa.union([pa.field("i", pa.int32()), pa.field("s", pa.utf8())], "sparse")),
        pa.field("dense_union", pa.union([pa.field("i", pa.int8())], "dense", [42])),
        pa.field("ree", pa.run_end_encoded(pa.int32(), pa.utf8())),
        pa.field("ree16", pa.run_end_encoded(pa.int16(), pa.float32())),
        pa.field("with_meta", pa.int64(), metadata={"a.com/x": "1", b"raw": b"\xff\x00"}),
        pa.field("nested_meta", pa.list_(pa.field("item", pa.int32(), metadata={"k": "v"}))),
        pa.field("", pa.int32()),
        pa.field("ünïcödé ☃", pa.utf8()),
    ],
    metadata={"schema.level/key": "value", "pandas": "{}"},
)


def bare_schema_from_ipc(message: bytes) -> bytes:
    """Re-roots pyarrow's IPC schema message at its `Schema` table: a bare Schema buffer from Arrow C++."""
    assert message[:4] == b"\xff\xff\xff\xff"
    (length,) = struct.unpack_from("<i", message, 4)
    flatbuffer = message[8 : 8 + length]
    root = struct.unpack_from("<I", flatbuffer, 0)[0]
    msg = Table(bytearray(flatbuffer), root)
    header_type = msg.Get(flatbuffers.number_types.Uint8Flags, root + msg.Offset(6))
    assert header_type == 1  # MessageHeader.Schema
    schema_pos = msg.Indirect(root + msg.Offset(8))
    return struct.pack("<I", schema_pos) + flatbuffer[4:]


def ipc_message_around(bare: bytes) -> bytes:
    """Wraps a bare Schema buffer in an IPC `Message` (V5, header = that Schema) so pyarrow can read it."""
    body_at = 32  # 8-aligned: the bare buffer keeps the alignment its writer gave it
    (schema_root,) = struct.unpack_from("<I", bare, 0)
    head = bytearray(body_at)
    struct.pack_into("<I", head, 0, 16)  # root: the Message table at 16
    struct.pack_into("<5H", head, 4, 10, 12, 8, 10, 4)  # vtable: version@8, header_type@10, header@4
    struct.pack_into("<i", head, 16, 16 - 4)  # table -> vtable at 4
    struct.pack_into("<I", head, 20, body_at + schema_root - 20)  # header -> the Schema table
    struct.pack_into("<hB", head, 24, 4, 1)  # MetadataVersion.V5, MessageHeader.Schema
    flatbuffer = bytes(head) + bare
    flatbuffer += b"\0" * (-len(flatbuffer) % 8)
    return b"\xff\xff\xff\xff" + struct.pack("<i", len(flatbuffer)) + flatbuffer


def test_every_type_round_trips_exactly() -> None:
    data = encode_raw_arrow_schema(ALL_TYPES)
    back = decode_raw_arrow_schema(data)
    assert back.equals(ALL_TYPES, check_metadata=True)
    assert back.metadata == ALL_TYPES.metadata


@pytest.mark.parametrize("field", list(ALL_TYPES), ids=lambda f: f.name or "unnamed")
def test_each_field_round_trips(field: pa.Field) -> None:
    schema = pa.schema([field])
    assert decode_raw_arrow_schema(encode_raw_arrow_schema(schema)).equals(schema, check_metadata=True)


def test_empty_schema_round_trips() -> None:
    assert decode_raw_arrow_schema(encode_raw_arrow_schema(pa.schema([]))).equals(pa.schema([]))


def test_reads_the_schema_table_written_by_pyarrow() -> None:
    bare = bare_schema_from_ipc(ALL_TYPES.serialize().to_pybytes())
    assert decode_raw_arrow_schema(bare).equals(ALL_TYPES, check_metadata=True)


def test_pyarrow_reads_what_we_write() -> None:
    message = ipc_message_around(encode_raw_arrow_schema(ALL_TYPES))
    assert pa.ipc.read_schema(pa.py_buffer(message)).equals(ALL_TYPES, check_metadata=True)


def _hand_built(type_id: int, type_fields: list[tuple[int, int, int]], force_defaults: bool) -> bytes:
    """A one-field schema built slot by slot, as another writer might: the type table gets exactly
    `type_fields` ((slot, byte size, value), always written); with `force_defaults` the field's
    `nullable` and the schema's `endianness` are written although they hold their defaults."""
    b = flatbuffers.Builder(0)
    b.ForceDefaults(force_defaults)
    b.StartObject(3)
    for slot, size, value in type_fields:
        (b.PrependInt16Slot if size == 2 else b.PrependInt32Slot)(slot, value, None)
    type_table = b.EndObject()
    b.StartObject(4)  # Field without name, children or metadata
    b.PrependBoolSlot(1, False, False)
    b.PrependUint8Slot(2, type_id, 0)
    b.PrependUOffsetTRelativeSlot(3, type_table, 0)
    field = b.EndObject()
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(field)
    fields = b.EndVector()
    b.StartObject(2)
    b.PrependInt16Slot(0, 0, 0)  # Endianness.Little
    b.PrependUOffsetTRelativeSlot(1, fields, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


@pytest.mark.parametrize(
    "type_id, type_fields, expected",
    [
        (8, [], pa.date64()),  # Date.unit defaults to MILLISECOND
        (9, [], pa.time32("ms")),  # Time: MILLISECOND, 32 bits
        (10, [], pa.timestamp("s")),  # Timestamp.unit: first enum value
        (18, [], pa.duration("ms")),
        (7, [(0, 4, 10), (1, 4, 2)], pa.decimal128(10, 2)),  # Decimal.bitWidth defaults to 128
        (2, [(0, 4, 64)], pa.uint64()),  # Int.is_signed defaults to false
        (3, [], pa.float16()),  # FloatingPoint.precision: HALF
        (8, [(0, 2, 0)], pa.date32()),
        (9, [(0, 2, 3), (1, 4, 64)], pa.time64("ns")),
    ],
)
def test_absent_fields_read_as_the_format_defaults(
    type_id: int, type_fields: list[tuple[int, int, int]], expected: pa.DataType
) -> None:
    for force_defaults in (False, True):
        schema = decode_raw_arrow_schema(_hand_built(type_id, type_fields, force_defaults))
        assert schema.equals(pa.schema([pa.field("", expected, nullable=expected == pa.null())]))


def test_non_nullable_null_field_from_other_writers_reads_as_nullable() -> None:
    schema = decode_raw_arrow_schema(_hand_built(1, [], force_defaults=False))
    assert schema.field(0).type == pa.null() and schema.field(0).nullable


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "outside the buffer"),
        (b"\x04\x00\x00", "outside the buffer"),
        (b"\xff\xff\xff\xff\x10\x00\x00\x00", "IPC message"),
        (_hand_built(27, [], False), "unknown Arrow type id 27"),
        (_hand_built(11, [], False), "Interval unit 0 is not supported"),
        (_hand_built(2, [(0, 4, 7)], False), "Int bitWidth 7"),
        (_hand_built(9, [(0, 2, 0), (1, 4, 64)], False), "does not fit unit s"),
        (_hand_built(8, [(0, 2, 5)], False), "DateUnit 5"),
        (_hand_built(10, [(0, 2, 9)], False), "TimeUnit 9"),
        (_hand_built(15, [(0, 4, -1)], False), "negative byteWidth"),
        (_hand_built(7, [(0, 4, 50), (1, 4, 2)], False), "invalid Arrow Decimal"),
        (_hand_built(12, [], False), "needs 1 child field"),
    ],
)
def test_invalid_buffers_raise_format_errors(data: bytes, message: str) -> None:
    with pytest.raises(OdfFormatError, match=message):
        decode_raw_arrow_schema(data)


def test_foreign_byte_order_is_rejected() -> None:
    b = flatbuffers.Builder(0)
    b.StartObject(1)
    b.PrependInt16Slot(0, 1, 0)  # Endianness.Big: pyarrow schemas describe native (little-endian) data
    b.Finish(b.EndObject())
    with pytest.raises(OdfFormatError, match="endianness"):
        decode_raw_arrow_schema(bytes(b.Output()))


def test_errors_name_the_field() -> None:
    with pytest.raises(OdfFormatError, match=r"rawArrowSchema\.fields\[0\]"):
        decode_raw_arrow_schema(_hand_built(27, [], False))


def test_extension_types_are_not_written() -> None:
    with pytest.raises(OdfFormatError, match=r"fields\[0\] \(id\).*extension type"):
        encode_raw_arrow_schema(pa.schema([("id", pa.uuid())]))


CORRUPTION = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BASES = [
    encode_raw_arrow_schema(ALL_TYPES),
    bare_schema_from_ipc(ALL_TYPES.serialize().to_pybytes()),
    encode_raw_arrow_schema(pa.schema([("a", pa.map_(pa.utf8(), pa.list_(pa.int8()))), ("b", pa.date64())])),
]


def _decodes_or_format_error(data: bytes) -> None:
    try:
        result = decode_raw_arrow_schema(data)
    except OdfFormatError:
        return
    assert isinstance(result, pa.Schema)


@CORRUPTION
@given(data=st.data())
def test_corrupted_buffers_raise_only_format_errors(data: st.DataObject) -> None:
    buf = bytearray(data.draw(st.sampled_from(BASES)))
    for _ in range(data.draw(st.integers(1, 8))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        buf = buf[: data.draw(st.integers(0, len(buf)))]
    _decodes_or_format_error(bytes(buf))


@CORRUPTION
@given(st.binary(max_size=512))
def test_random_bytes_raise_only_format_errors(data: bytes) -> None:
    _decodes_or_format_error(data)


@CORRUPTION
@given(base=st.sampled_from(BASES), start=st.integers(0, 2000), garbage=st.binary(min_size=1, max_size=64))
def test_overwritten_ranges_raise_only_format_errors(base: bytes, start: int, garbage: bytes) -> None:
    start %= len(base)
    _decodes_or_format_error(base[:start] + garbage + base[start + len(garbage) :])

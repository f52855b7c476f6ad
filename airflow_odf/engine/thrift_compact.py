"""Thrift's compact protocol, without a schema: enough to read, edit and write Parquet footers.

Parquet keeps a file's metadata (schema, row groups, column chunk positions) as one Thrift struct in the
compact protocol. Splicing column chunks of several files into one (`parquet_splice`) only moves
chunks and rewrites a few numbers, so the footer is kept as generic fields — field id, wire type, value
— and written back in the same encoding, untouched parts byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from struct import pack, unpack_from

# wire types of the compact protocol
BOOL_TRUE, BOOL_FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)


class ThriftError(ValueError):
    """The bytes are not a struct in Thrift's compact protocol (as Parquet uses it)."""


@dataclass
class ThriftList:
    """A list or set: its elements' wire type and the elements."""

    element_type: int
    items: list[object]


@dataclass
class Field:
    id: int
    type: int
    value: object  # bool, int, float, bytes, ThriftList or Struct


class Struct:
    """A struct's fields in wire order, looked up by id."""

    def __init__(self, fields: list[Field] | None = None) -> None:
        self.fields: list[Field] = fields or []

    def get(self, field_id: int) -> object | None:
        for field in self.fields:
            if field.id == field_id:
                return field.value
        return None

    def set(self, field_id: int, wire_type: int, value: object) -> None:
        """Replaces the field's value, or adds the field keeping the ids in ascending order."""
        for field in self.fields:
            if field.id == field_id:
                field.type, field.value = wire_type, value
                return
        self.fields.append(Field(field_id, wire_type, value))
        self.fields.sort(key=lambda f: f.id)

    def drop(self, *field_ids: int) -> None:
        self.fields = [f for f in self.fields if f.id not in field_ids]

    def copy(self) -> Struct:
        """A copy whose fields (not their nested values) can be changed independently."""
        return Struct([Field(f.id, f.type, f.value) for f in self.fields])


def decode(data: bytes | memoryview, pos: int = 0) -> tuple[Struct, int]:
    """The struct encoded at `data[pos:]` and the position after it."""
    try:
        return _Reader(memoryview(data), pos).struct()
    except IndexError:
        raise ThriftError("the struct runs past the end of its bytes") from None


def encode(struct: Struct) -> bytes:
    out = bytearray()
    _write_struct(out, struct)
    return bytes(out)


class _Reader:
    def __init__(self, data: memoryview, pos: int) -> None:
        self.data, self.pos = data, pos

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise ThriftError(f"a varint longer than 10 bytes at byte {self.pos}")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def struct(self) -> tuple[Struct, int]:
        fields: list[Field] = []
        last_id = 0
        while True:
            header = self.byte()
            if header == 0:
                return Struct(fields), self.pos
            wire_type, delta = header & 0x0F, header >> 4
            field_id = last_id + delta if delta else self.zigzag()
            if wire_type in (BOOL_TRUE, BOOL_FALSE):
                fields.append(Field(field_id, wire_type, wire_type == BOOL_TRUE))
            else:
                fields.append(Field(field_id, wire_type, self.value(wire_type)))
            last_id = field_id

    def value(self, wire_type: int) -> object:
        if wire_type == BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if wire_type in (I16, I32, I64):
            return self.zigzag()
        if wire_type == DOUBLE:
            value = unpack_from("<d", self.data, self.pos)[0]
            self.pos += 8
            return value
        if wire_type == BINARY:
            size = self.varint()
            value = bytes(self.data[self.pos : self.pos + size])
            if len(value) != size:
                raise IndexError
            self.pos += size
            return value
        if wire_type in (LIST, SET):
            header = self.byte()
            size, element_type = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            if element_type in (BOOL_TRUE, BOOL_FALSE):
                return ThriftList(element_type, [self.byte() == 1 for _ in range(size)])
            return ThriftList(element_type, [self.value(element_type) for _ in range(size)])
        if wire_type == STRUCT:
            return self.struct()[0]
        raise ThriftError(f"wire type {wire_type} at byte {self.pos} (maps are not used by Parquet)")


def write_varint(out: bytearray, n: int) -> None:
    """Unsigned LEB128 (also the varint of Parquet's DELTA_BINARY_PACKED pages)."""
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def write_zigzag(out: bytearray, n: int) -> None:
    """A signed 64-bit integer, zigzag-encoded, as a varint."""
    write_varint(out, (n << 1) ^ (n >> 63))


def _write_struct(out: bytearray, struct: Struct) -> None:
    last_id = 0
    for field in struct.fields:
        wire_type = field.type
        if wire_type in (BOOL_TRUE, BOOL_FALSE):
            wire_type = BOOL_TRUE if field.value else BOOL_FALSE
        delta = field.id - last_id
        if 0 < delta <= 15:
            out.append(delta << 4 | wire_type)
        else:
            out.append(wire_type)
            write_zigzag(out, field.id)
        if wire_type not in (BOOL_TRUE, BOOL_FALSE):
            _write_value(out, wire_type, field.value)
        last_id = field.id
    out.append(0)


def _write_value(out: bytearray, wire_type: int, value: object) -> None:
    if wire_type == BYTE:
        out.append(int(value) & 0xFF)  # type: ignore[call-overload]
    elif wire_type in (I16, I32, I64):
        write_zigzag(out, int(value))  # type: ignore[call-overload]
    elif wire_type == DOUBLE:
        out += pack("<d", value)
    elif wire_type == BINARY:
        assert isinstance(value, bytes)
        write_varint(out, len(value))
        out += value
    elif wire_type in (LIST, SET):
        assert isinstance(value, ThriftList)
        size = len(value.items)
        if size < 15:
            out.append(size << 4 | value.element_type)
        else:
            out.append(0xF0 | value.element_type)
            write_varint(out, size)
        for item in value.items:
            if value.element_type in (BOOL_TRUE, BOOL_FALSE):
                out.append(1 if item else 2)
            else:
                _write_value(out, value.element_type, item)
    elif wire_type == STRUCT:
        assert isinstance(value, Struct)
        _write_struct(out, value)
    else:
        raise ThriftError(f"cannot write wire type {wire_type}")

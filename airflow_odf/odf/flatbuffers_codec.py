"""FlatBuffers codec for metadata blocks, byte-identical to the reference implementation.

The bytes of a block decide its hash, so the writer reproduces the reference builder exactly
(Rust `flatbuffers` 25): buffers grow back to front, tables are written "two-phase" (first every
variable-size field depth-first in declaration order, then the table with its scalars, structs and
offsets in declaration order), non-optional scalars equal to their default are omitted, vtables are
trimmed after the last present field and de-duplicated by their complete bytes. The `flatbuffers`
package's Builder de-duplicates differently, hence this small builder of our own.

The reader is generic over the model and bounds-checked: any corrupt input raises `BlockDecodeError`
naming the field where decoding failed.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from airflow_odf.odf import model
from airflow_odf.odf.errors import BlockDecodeError, OdfFormatError
from airflow_odf.odf.model_schema import FieldSpec, Kind, TypeSpec, UnionSpec, fields_of
from airflow_odf.odf.multiformats import ODF_METADATA_BLOCK, DatasetId, Multihash
from airflow_odf.odf.timestamps import Timestamp

#: Manifest version written; 2 (Timestamp structs without alignment) is still read.
BLOCK_VERSION = 3
READABLE_VERSIONS = (2, 3)

_SIZES = {"B": 1, "b": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "Q": 8, "?": 1}
_TIMESTAMP = struct.Struct("<iHHII")
_MAX_DEPTH = 64


class _Builder:
    """Back-to-front buffer builder with the reference's alignment, vtable and offset rules."""

    def __init__(self, capacity: int = 1024) -> None:
        self.buf = bytearray(capacity)
        self.head = capacity
        self.min_align = 1
        self.vtables: dict[bytes, int] = {}
        self.fields: list[tuple[int, int]] = []
        self.table_start = 0

    def used(self) -> int:
        return len(self.buf) - self.head

    def _reserve(self, size: int) -> None:
        if self.head < size:
            old = len(self.buf)
            grown = bytearray(max(old, size) * 2)
            grown[len(grown) - old :] = self.buf
            self.head += len(grown) - old
            self.buf = grown

    def align(self, size: int, alignment: int) -> None:
        if alignment > self.min_align:
            self.min_align = alignment
        pad = -(self.used() + size) % alignment
        if pad:
            self._reserve(pad)
            self.head -= pad  # fresh buffer space is zero

    def prepend(self, data: bytes) -> None:
        self._reserve(len(data))
        self.head -= len(data)
        self.buf[self.head : self.head + len(data)] = data

    def scalar(self, fmt: str, value: int) -> int:
        size = _SIZES[fmt]
        self.align(size, size)
        self._reserve(size)
        self.head -= size
        struct.pack_into("<" + fmt, self.buf, self.head, value)
        return self.used()

    def uoffset(self, target: int) -> int:
        self.align(4, 4)
        return self.scalar("I", self.used() + 4 - target)

    def string(self, text: str) -> int:
        data = text.encode()
        self.align(len(data) + 1, 4)
        self.prepend(data + b"\0")
        return self.scalar("I", len(data))

    def byte_vector(self, data: bytes) -> int:
        self.align(len(data), 4)
        self.prepend(data)
        return self.scalar("I", len(data))

    def offset_vector(self, targets: list[int]) -> int:
        size = 4 * len(targets)
        self.align(size, 4)
        self._reserve(size)
        self.head -= size
        end = self.used()
        for i, target in enumerate(targets):
            struct.pack_into("<I", self.buf, self.head + 4 * i, end - 4 * i - target)
        return self.scalar("I", len(targets))

    def start_table(self) -> None:
        self.fields = []
        self.table_start = self.used()

    def add_scalar(self, slot: int, fmt: str, value: int) -> None:
        self.fields.append((slot, self.scalar(fmt, value)))

    def add_offset(self, slot: int, target: int) -> None:
        self.fields.append((slot, self.uoffset(target)))

    def add_struct(self, slot: int, data: bytes) -> None:
        self.align(len(data), 4)
        self.prepend(data)
        self.fields.append((slot, self.used()))

    def end_table(self) -> int:
        table = self.scalar("i", 0)
        size = max((slot for slot, _ in self.fields), default=2) + 2
        vtable = bytearray(size)
        struct.pack_into("<HH", vtable, 0, size, table - self.table_start)
        for slot, pos in self.fields:
            struct.pack_into("<H", vtable, slot, table - pos)
        key = bytes(vtable)
        vt_pos = self.vtables.get(key)
        if vt_pos is None:
            self.prepend(key)
            vt_pos = self.vtables[key] = self.used()
        struct.pack_into("<i", self.buf, len(self.buf) - table, vt_pos - table)
        self.fields = []
        return table

    def finish(self, root: int) -> bytes:
        self.align(4, self.min_align)
        self.uoffset(root)
        return bytes(self.buf[self.head :])


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _write_union_member(b: _Builder, spec: UnionSpec, value: Any) -> tuple[int, int]:
    return spec.type_id(type(value)), _write_table(b, value)


def _write_variable(b: _Builder, t: TypeSpec, value: Any) -> int:
    """Phase 1: writes a variable-size value (string, vector, table) and returns its position."""
    kind = t.kind
    if kind is Kind.STRING:
        return b.string(value)
    if kind is Kind.MULTIHASH:
        return b.byte_vector(value.to_bytes())
    if kind is Kind.DATASET_ID:
        return b.byte_vector(value.as_bytes())
    if kind is Kind.BYTES:
        return b.byte_vector(value)
    if kind is Kind.TABLE:
        return _write_table(b, value)
    if kind is Kind.UNION:
        assert t.union is not None
        return _write_union_member(b, t.union, value)[1]
    if kind is Kind.EXTRA:
        entries = b.string(_canonical_json(value))
        b.start_table()
        b.add_offset(4, entries)
        return b.end_table()
    if kind is Kind.LIST:
        item = t.item
        assert item is not None
        if item.kind is Kind.UNION:
            assert item.union is not None
            wrappers = []
            for v in value:  # each member is wrapped in a one-field table `{value: Union}`
                type_id, member = _write_union_member(b, item.union, v)
                b.start_table()
                b.add_scalar(4, "B", type_id)
                b.add_offset(6, member)
                wrappers.append(b.end_table())
            return b.offset_vector(wrappers)
        return b.offset_vector([_write_variable(b, item, v) for v in value])
    raise AssertionError(f"{kind} is not a variable-size kind")


_INLINE = (Kind.INT, Kind.BOOL, Kind.ENUM, Kind.TIMESTAMP)


def _write_table(b: _Builder, obj: Any) -> int:
    specs = fields_of(type(obj))
    values = [getattr(obj, f.name) for f in specs]
    offsets = [
        None if v is None or f.type.kind in _INLINE else _write_variable(b, f.type, v)
        for f, v in zip(specs, values)
    ]
    b.start_table()
    for f, v, off in zip(specs, values, offsets):
        if v is None:
            continue
        kind = f.type.kind
        if kind is Kind.TIMESTAMP:
            year, ordinal, seconds, nanos = v.parts()
            b.add_struct(f.slot, _TIMESTAMP.pack(year, ordinal, 0, seconds, nanos))
        elif kind in _INLINE:
            # required scalars are omitted when equal to their default (0); optional ones never
            if v or not f.required:
                b.add_scalar(f.slot, "?" if kind is Kind.BOOL else f.type.fmt, int(v))
        elif kind is Kind.UNION:
            assert f.type.union is not None
            b.add_scalar(f.slot - 2, "B", f.type.union.type_id(type(v)))
            b.add_offset(f.slot, off)  # type: ignore[arg-type]
        else:
            b.add_offset(f.slot, off)  # type: ignore[arg-type]
    return b.end_table()


def encode_table(obj: Any) -> bytes:
    """A finished FlatBuffer with `obj` (any model table) as its root."""
    b = _Builder()
    return b.finish(_write_table(b, obj))


def encode_block(block: model.MetadataBlock) -> bytes:
    """The block file: `Manifest{kind=odf-metadata-block, version=3, content=<MetadataBlock buffer>}`."""
    content = encode_table(block)
    b = _Builder(len(content) + 64)
    vector = b.byte_vector(content)
    b.start_table()
    b.add_scalar(4, "q", ODF_METADATA_BLOCK)
    b.add_scalar(6, "i", BLOCK_VERSION)
    b.add_offset(8, vector)
    return b.finish(b.end_table())


def block_hash(data: bytes) -> Multihash:
    """The block's identity: sha3-256 multihash of the block file bytes, exactly as stored."""
    return Multihash.sha3_256(data)


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------


class _Reader:
    """Bounds-checked access to one FlatBuffer."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def unpack(self, fmt: str, pos: int) -> int:
        size = _SIZES[fmt]
        if pos < 0 or pos + size > len(self.buf):
            raise OdfFormatError(f"offset {pos} is outside the buffer of {len(self.buf)} bytes")
        return struct.unpack_from("<" + fmt, self.buf, pos)[0]

    def deref(self, pos: int) -> int:
        return pos + self.unpack("I", pos)

    def bytes_at(self, pos: int) -> bytes:
        """A `[ubyte]` vector (or string body) behind the offset at `pos`."""
        start = self.deref(pos)
        length = self.unpack("I", start)
        if start + 4 + length > len(self.buf):
            raise OdfFormatError(f"vector of {length} bytes at {start} runs past the buffer end")
        return self.buf[start + 4 : start + 4 + length]

    def vector_positions(self, pos: int) -> list[int]:
        start = self.deref(pos)
        count = self.unpack("I", start)
        if start + 4 + 4 * count > len(self.buf):
            raise OdfFormatError(f"vector of {count} offsets at {start} runs past the buffer end")
        return [start + 4 + 4 * i for i in range(count)]

    def field_positions(self, table: int, specs: tuple[FieldSpec, ...]) -> tuple[list[int], int]:
        """Absolute positions of each field (0 = absent) and of the union type tags' slots."""
        vtable = table - self.unpack("i", table)
        vt_size = self.unpack("H", vtable)
        obj_size = self.unpack("H", vtable + 2)
        if vt_size < 4 or vt_size % 2 or vtable + vt_size > len(self.buf) or table + obj_size > len(self.buf):
            raise OdfFormatError(f"invalid vtable at {vtable}")
        return [self._slot(table, vtable, vt_size, obj_size, f.slot) for f in specs], vt_size

    def _slot(self, table: int, vtable: int, vt_size: int, obj_size: int, slot: int) -> int:
        if slot >= vt_size:
            return 0
        off = self.unpack("H", vtable + slot)
        if off and (off < 4 or off >= obj_size):
            raise OdfFormatError(f"field offset {off} outside its table of {obj_size} bytes")
        return table + off if off else 0

    def union_type(self, table: int, slot: int) -> int:
        vtable = table - self.unpack("i", table)
        vt_size = self.unpack("H", vtable)
        obj_size = self.unpack("H", vtable + 2)
        pos = self._slot(table, vtable, vt_size, obj_size, slot)
        return self.unpack("B", pos) if pos else 0


def _read_union(r: _Reader, spec: UnionSpec, table: int, slot: int, pos: int, path: str, depth: int) -> Any:
    type_id = r.union_type(table, slot - 2)
    if not 1 <= type_id <= len(spec.members):
        raise BlockDecodeError(f"{path}: unknown {spec.name} type id {type_id}")
    return _read_table(r, spec.members[type_id - 1], r.deref(pos), path, depth + 1)


def _read_value(r: _Reader, t: TypeSpec, pos: int, path: str, depth: int) -> Any:
    kind = t.kind
    if kind is Kind.STRING:
        return bytes(r.bytes_at(pos)).decode()
    if kind is Kind.MULTIHASH:
        return Multihash.from_bytes(bytes(r.bytes_at(pos)))
    if kind is Kind.DATASET_ID:
        return DatasetId.from_bytes(bytes(r.bytes_at(pos)))
    if kind is Kind.BYTES:
        return bytes(r.bytes_at(pos))
    if kind is Kind.INT:
        return r.unpack(t.fmt, pos)
    if kind is Kind.BOOL:
        return bool(r.unpack("B", pos))
    if kind is Kind.ENUM:
        raw = r.unpack(t.fmt, pos)
        try:
            return t.cls(raw)
        except ValueError:
            raise BlockDecodeError(f"{path}: {raw} is not a valid {t.cls.__name__}") from None
    if kind is Kind.TIMESTAMP:
        if pos + 16 > len(r.buf):
            raise OdfFormatError("timestamp runs past the buffer end")
        year, ordinal, _pad, seconds, nanos = _TIMESTAMP.unpack_from(r.buf, pos)
        return Timestamp.from_parts(year, ordinal, seconds, nanos)
    if kind is Kind.TABLE:
        return _read_table(r, t.cls, r.deref(pos), path, depth + 1)
    if kind is Kind.EXTRA:
        table = r.deref(pos)
        (entries,), _ = r.field_positions(table, _EXTRA_FIELDS)
        value = json.loads(bytes(r.bytes_at(entries)).decode()) if entries else {}
        if not isinstance(value, dict):
            raise BlockDecodeError(f"{path}: extra attributes must be a JSON object")
        return value
    if kind is Kind.LIST:
        item = t.item
        assert item is not None
        out = []
        for i, p in enumerate(r.vector_positions(pos)):
            item_path = f"{path}[{i}]"
            if item.kind is Kind.UNION:
                assert item.union is not None
                wrapper = r.deref(p)
                (value_pos,), _ = r.field_positions(wrapper, _WRAPPER_FIELDS)
                if not value_pos:
                    raise BlockDecodeError(f"{item_path}: missing union value")
                out.append(_read_union(r, item.union, wrapper, 6, value_pos, item_path, depth))
            else:
                out.append(_read_value(r, item, p, item_path, depth))
        return out
    raise AssertionError(kind)


_EXTRA_FIELDS = (FieldSpec("entries", "entries", TypeSpec(Kind.STRING), False, 4),)
_WRAPPER_FIELDS = (FieldSpec("value", "value", TypeSpec(Kind.UNION), False, 6),)


def _read_table(r: _Reader, cls: type, table: int, path: str, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise BlockDecodeError(f"{path}: nesting deeper than {_MAX_DEPTH} levels")
    specs = fields_of(cls)
    positions, _ = r.field_positions(table, specs)
    kwargs = {}
    for f, pos in zip(specs, positions):
        field_path = f"{path}.{f.yaml_name}" if path else f.yaml_name
        if not pos:
            if f.required and f.type.kind in _INLINE and f.type.kind is not Kind.TIMESTAMP:
                kwargs[f.name] = f.type.cls(0) if f.type.kind is Kind.ENUM else 0
            elif f.required:
                raise BlockDecodeError(f"{field_path}: required field is missing")
            continue
        try:
            if f.type.kind is Kind.UNION:
                assert f.type.union is not None
                kwargs[f.name] = _read_union(r, f.type.union, table, f.slot, pos, field_path, depth)
            else:
                kwargs[f.name] = _read_value(r, f.type, pos, field_path, depth)
        except (OdfFormatError, UnicodeDecodeError, json.JSONDecodeError, struct.error) as e:
            raise BlockDecodeError(f"{field_path}: {e}") from None
    try:
        return cls(**kwargs)
    except (OdfFormatError, TypeError, ValueError) as e:
        raise BlockDecodeError(f"{path or cls.__name__}: {e}") from None


def decode_table(data: bytes, cls: type, path: str = "") -> Any:
    """Decodes a finished FlatBuffer whose root table is a `cls` model table."""
    r = _Reader(data)
    try:
        return _read_table(r, cls, r.deref(0), path, 0)
    except OdfFormatError as e:
        raise BlockDecodeError(f"{path or cls.__name__}: {e}") from None
    except RecursionError:
        raise BlockDecodeError(f"{path or cls.__name__}: structure nested too deeply") from None


def decode_block(data: bytes) -> model.MetadataBlock:
    """Reads a block file (manifest version 2 or 3); raises `BlockDecodeError` on any defect."""
    r = _Reader(data)
    try:
        manifest = r.deref(0)
        kind_pos, version_pos, content_pos = r.field_positions(manifest, _MANIFEST_FIELDS)[0]
        kind = r.unpack("q", kind_pos) if kind_pos else 0
        version = r.unpack("i", version_pos) if version_pos else 0
        if kind != ODF_METADATA_BLOCK:
            raise BlockDecodeError(f"not a metadata block: manifest kind {kind:#x}, expected 0x400000")
        if version not in READABLE_VERSIONS:
            raise BlockDecodeError(f"unsupported block version {version} (readable: 2, 3)")
        if not content_pos:
            raise BlockDecodeError("block manifest has no content")
        content = bytes(r.bytes_at(content_pos))
    except OdfFormatError as e:
        raise BlockDecodeError(f"block manifest: {e}") from None
    return decode_table(content, model.MetadataBlock)


_MANIFEST_FIELDS = (
    FieldSpec("kind", "kind", TypeSpec(Kind.INT, fmt="q"), True, 4),
    FieldSpec("version", "version", TypeSpec(Kind.INT, fmt="i"), True, 6),
    FieldSpec("content", "content", TypeSpec(Kind.BYTES), True, 8),
)

"""FlatBuffers codec for metadata blocks, byte-identical to the reference implementation.

The bytes of a block decide its hash, so the writer reproduces the reference builder exactly
(Rust `flatbuffers` 25): buffers grow back to front, tables are written "two-phase" (first every
variable-size field depth-first in declaration order, then the table with its scalars, structs and
offsets in declaration order), non-optional scalars equal to their default are omitted, vtables are
trimmed after the last present field and de-duplicated by their complete bytes. The `flatbuffers`
package's Builder de-duplicates differently, hence this small builder of our own.

The reader is generic over the model and bounds-checked: any corrupt input raises `BlockDecodeError`
naming the field where decoding failed. A block larger than `limits.max_block_bytes()` is neither read
nor written, and decoding stays within a `DecodeBudget` of the buffer's length, so shared offsets
cannot make a small block decode to a huge one.
"""

from __future__ import annotations

import functools
import json
import struct
from typing import Any, NoReturn

from airflow_odf.odf.errors import BlockDecodeError, BlockEncodeError, OdfFormatError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.decode_budget import DecodeBudget
from airflow_odf.odf.format.fields import Kind, TypeSpec, UnionSpec, fields_of
from airflow_odf.odf.format.multiformats import ODF_METADATA_BLOCK, DatasetId, Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.limits import MAX_BLOCK_BYTES_ENV, max_block_bytes

#: Manifest version written; 2 (Timestamp structs without alignment) is still read.
BLOCK_VERSION = 3
READABLE_VERSIONS = (2, 3)

_SIZES = {"B": 1, "b": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "Q": 8, "?": 1}
_STRUCTS = {fmt: struct.Struct("<" + fmt) for fmt in _SIZES}
_U32, _I32, _HH = _STRUCTS["I"], _STRUCTS["i"], struct.Struct("<HH")
_ZEROS = [bytes(n) for n in range(16)]
_TIMESTAMP = struct.Struct("<iHHII")
_MAX_DEPTH = 64


@functools.cache
def _vtable_struct(entries: int) -> struct.Struct:
    return struct.Struct(f"<{entries}H")


class _Builder:
    """Back-to-front buffer builder with the reference's alignment, vtable and offset rules.

    Positions are "used sizes" counted from the end of the buffer, as in the reference builder;
    prepended pieces are collected in a list and joined once at `finish`. Growing past `limit` bytes
    (the maximum block size) is an error, raised before the memory is spent.
    """

    __slots__ = ("chunks", "fields", "limit", "min_align", "size", "table_start", "vtables")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.limit = max_block_bytes()
        self.min_align = 1
        self.vtables: dict[bytes, int] = {}
        self.fields: list[tuple[int, int]] = []
        self.table_start = 0

    def align(self, size: int, alignment: int) -> None:
        if alignment > self.min_align:
            self.min_align = alignment
        pad = -(self.size + size) & (alignment - 1)
        if pad:
            self.chunks.append(_ZEROS[pad])
            self.size += pad

    def too_large(self) -> NoReturn:
        raise BlockEncodeError(
            f"the block would be larger than the {self.limit} bytes a block may have ({MAX_BLOCK_BYTES_ENV})"
        )

    def prepend(self, data: bytes) -> None:
        if self.size + len(data) > self.limit:
            self.too_large()
        self.chunks.append(data)
        self.size += len(data)

    def scalar(self, fmt: str, value: int) -> int:
        packer = _STRUCTS[fmt]
        size = packer.size
        if size > self.min_align:
            self.min_align = size
        pad = -self.size & (size - 1)
        if pad:
            self.chunks.append(_ZEROS[pad])
        self.chunks.append(packer.pack(value))
        self.size += pad + size
        return self.size

    def uoffset(self, target: int) -> int:
        if self.min_align < 4:
            self.min_align = 4
        pad = -self.size & 3
        if pad:
            self.chunks.append(_ZEROS[pad])
        self.size += pad + 4
        self.chunks.append(_U32.pack(self.size - target))
        return self.size

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
        end = self.size + size
        self.prepend(b"".join([_U32.pack(end - 4 * i - t) for i, t in enumerate(targets)]))
        return self.scalar("I", len(targets))

    def start_table(self) -> None:
        self.fields = []
        self.table_start = self.size

    def add_scalar(self, slot: int, fmt: str, value: int) -> None:
        self.fields.append((slot, self.scalar(fmt, value)))

    def add_offset(self, slot: int, target: int) -> None:
        self.fields.append((slot, self.uoffset(target)))

    def add_struct(self, slot: int, data: bytes) -> None:
        self.align(len(data), 4)
        self.prepend(data)
        self.fields.append((slot, self.size))

    def end_table(self) -> int:
        """Writes the table's soffset and (unless an identical one exists) its vtable just before it."""
        if self.size > self.limit:  # tables without strings or vectors grow the buffer here only
            self.too_large()
        pad = -self.size & 3
        if pad:
            self.chunks.append(_ZEROS[pad])
        if self.min_align < 4:
            self.min_align = 4
        table = self.size + pad + 4
        fields = self.fields
        entries = [0] * (max([slot for slot, _ in fields], default=2) // 2 + 1)
        vt_size = 2 * len(entries)
        entries[0] = vt_size
        entries[1] = table - self.table_start
        for slot, pos in fields:
            entries[slot // 2] = table - pos
        key = _vtable_struct(len(entries)).pack(*entries)
        vt_pos = self.vtables.get(key)
        self.chunks.append(_I32.pack((vt_pos or table + vt_size) - table))
        self.size = table
        if vt_pos is None:
            self.vtables[key] = table + vt_size
            self.prepend(key)
        self.fields = []
        return table

    def finish(self, root: int) -> bytes:
        self.align(4, self.min_align)
        self.uoffset(root)
        return b"".join(reversed(self.chunks))


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
    writer = _WRITERS.get(type(obj))
    if writer is None:
        writer = _WRITERS[type(obj)] = _compile_writer(type(obj))
    return writer(b, obj)


_WRITERS: dict[type, Any] = {}


def _timestamp_struct(ts: Timestamp) -> bytes:
    year, ordinal, seconds, nanos = ts.parts()
    return _TIMESTAMP.pack(year, ordinal, 0, seconds, nanos)


def _compile_writer(cls: type) -> Any:
    """A straight-line writer for one model table, generated from its field descriptors.

    Same two phases as the reference's generated serializers: variable-size fields first, in
    declaration order, then the table with every present field in declaration order. Required
    scalars equal to their default (0) are omitted, optional ones are always written when present.
    Generating the code once per class keeps the per-field dispatch off the hot path.
    """
    specs = fields_of(cls)
    env: dict[str, Any] = {
        "_write_table": _write_table,
        "_write_variable": _write_variable,
        "_ts": _timestamp_struct,
    }
    body = [f"    v{i} = obj.{f.name}" for i, f in enumerate(specs)]
    variable = {
        Kind.STRING: "b.string(v{i})",
        Kind.MULTIHASH: "b.byte_vector(v{i}.to_bytes())",
        Kind.DATASET_ID: "b.byte_vector(v{i}.as_bytes())",
        Kind.BYTES: "b.byte_vector(v{i})",
        Kind.TABLE: "_write_table(b, v{i})",
        Kind.UNION: "_write_table(b, v{i})",
        Kind.EXTRA: "_write_variable(b, t{i}, v{i})",
        Kind.LIST: "_write_variable(b, t{i}, v{i})",
    }
    for i, f in enumerate(specs):
        env[f"t{i}"] = f.type
        if f.type.kind not in _INLINE:
            body.append(f"    o{i} = None if v{i} is None else {variable[f.type.kind].format(i=i)}")
    body.append("    b.start_table()")
    for i, f in enumerate(specs):
        kind, slot = f.type.kind, f.slot
        if kind is Kind.TIMESTAMP:
            body.append(f"    if v{i} is not None: b.add_struct({slot}, _ts(v{i}))")
        elif kind in _INLINE:
            fmt = "?" if kind is Kind.BOOL else f.type.fmt
            present = f"v{i}" if f.required else f"v{i} is not None"
            body.append(f"    if {present}: b.add_scalar({slot}, {fmt!r}, v{i})")
        elif kind is Kind.UNION:
            assert f.type.union is not None
            env[f"ids{i}"] = {m: f.type.union.type_id(m) for m in f.type.union.members}
            body.append(f"    if v{i} is not None:")
            body.append(f"        b.add_scalar({slot - 2}, 'B', ids{i}[type(v{i})])")
            body.append(f"        b.add_offset({slot}, o{i})")
        else:
            body.append(f"    if o{i} is not None: b.add_offset({slot}, o{i})")
    body.append("    return b.end_table()")
    source = "def write(b, obj):\n" + "\n".join(body) + "\n"
    exec(
        compile(source, f"<flatbuffers writer of {cls.__name__}>", "exec"), env
    )  # the source is generated above from our own model
    return env["write"]


def encode_table(obj: Any) -> bytes:
    """A finished FlatBuffer with `obj` (any model table) as its root."""
    b = _Builder()
    return b.finish(_write_table(b, obj))


def encode_block(block: model.MetadataBlock) -> bytes:
    """The block file: `Manifest{kind=odf-metadata-block, version=3, content=<MetadataBlock buffer>}`."""
    return block_file(encode_table(block))


def block_file(content: bytes) -> bytes:
    """The block file around `content`, a finished FlatBuffer of a MetadataBlock."""
    b = _Builder()
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
    """Bounds-checked access to one FlatBuffer; every table, vector and string read is paid from `budget`."""

    __slots__ = ("budget", "buf")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.budget = DecodeBudget(len(buf))

    def unpack(self, packer: struct.Struct, pos: int) -> Any:
        if pos < 0:
            raise OdfFormatError(f"offset {pos} is outside the buffer")
        try:
            return packer.unpack_from(self.buf, pos)[0]
        except struct.error:
            raise OdfFormatError(f"offset {pos} is outside the buffer of {len(self.buf)} bytes") from None

    def deref(self, pos: int) -> int:
        return pos + self.unpack(_U32, pos)

    def bytes_at(self, pos: int) -> bytes:
        """A `[ubyte]` vector (or string body) behind the offset at `pos`."""
        start = self.deref(pos)
        length = self.unpack(_U32, start)
        if start + 4 + length > len(self.buf):
            raise OdfFormatError(f"vector of {length} bytes at {start} runs past the buffer end")
        self.budget.spend(length)
        return self.buf[start + 4 : start + 4 + length]

    def vector_positions(self, pos: int) -> range:
        start = self.deref(pos)
        count = self.unpack(_U32, start)
        if start + 4 + 4 * count > len(self.buf):
            raise OdfFormatError(f"vector of {count} offsets at {start} runs past the buffer end")
        self.budget.spend()
        return range(start + 4, start + 4 + 4 * count, 4)

    def table_fields(self, table: int, last_slot: int) -> dict[int, int]:
        """The present fields of the table at `table` up to `last_slot`: vtable slot -> absolute position.

        Slots past `last_slot` (fields of a newer schema) are not read, so a long vtable shared by many
        tables costs nothing per table.
        """
        self.budget.spend()
        vtable = table - self.unpack(_I32, table)
        if vtable < 0 or vtable + 4 > len(self.buf):
            raise OdfFormatError(f"vtable position {vtable} is outside the buffer")
        vt_size, obj_size = _HH.unpack_from(self.buf, vtable)
        if vt_size < 4 or vt_size % 2 or vtable + vt_size > len(self.buf) or table + obj_size > len(self.buf):
            raise OdfFormatError(f"invalid vtable at {vtable}")
        present = {}
        entries = min((vt_size - 4) // 2, last_slot // 2 - 1)
        for i, off in enumerate(_vtable_struct(entries).unpack_from(self.buf, vtable + 4)):
            if off:
                if off < 4 or off >= obj_size:
                    raise OdfFormatError(f"field offset {off} outside its table of {obj_size} bytes")
                present[4 + 2 * i] = table + off
        return present


def _read_union(r: _Reader, spec: UnionSpec, fields: dict[int, int], slot: int, path: str, depth: int) -> Any:
    type_pos = fields.get(slot - 2)
    type_id = r.unpack(_STRUCTS["B"], type_pos) if type_pos else 0
    if not 1 <= type_id <= len(spec.members):
        raise BlockDecodeError(f"{path}: unknown {spec.name} type id {type_id}")
    return _read_table(r, spec.members[type_id - 1], r.deref(fields[slot]), path, depth + 1)


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
        return r.unpack(_STRUCTS[t.fmt], pos)
    if kind is Kind.BOOL:
        return bool(r.unpack(_STRUCTS["B"], pos))
    if kind is Kind.ENUM:
        raw = r.unpack(_STRUCTS[t.fmt], pos)
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
        entries = r.table_fields(r.deref(pos), 4).get(4)
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
            if item.kind is Kind.UNION:  # each member sits in a wrapper table `{value: Union}`
                assert item.union is not None
                wrapper = r.table_fields(r.deref(p), 6)
                if 6 not in wrapper:
                    raise BlockDecodeError(f"{item_path}: missing union value")
                out.append(_read_union(r, item.union, wrapper, 6, item_path, depth))
            else:
                out.append(_read_value(r, item, p, item_path, depth))
        return out
    raise AssertionError(kind)


def _read_table(r: _Reader, cls: type, table: int, path: str, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise BlockDecodeError(f"{path}: nesting deeper than {_MAX_DEPTH} levels")
    present = r.table_fields(table, _last_slot(cls))
    kwargs = {}
    for f in fields_of(cls):
        pos = present.get(f.slot)
        if pos is None:
            if f.required and f.type.kind in _INLINE and f.type.kind is not Kind.TIMESTAMP:
                kwargs[f.name] = f.type.cls(0) if f.type.kind is Kind.ENUM else 0
            elif f.required:
                raise BlockDecodeError(f"{_join(path, f.yaml_name)}: required field is missing")
            continue
        field_path = _join(path, f.yaml_name)
        try:
            if f.type.kind is Kind.UNION:
                assert f.type.union is not None
                kwargs[f.name] = _read_union(r, f.type.union, present, f.slot, field_path, depth)
            else:
                kwargs[f.name] = _read_value(r, f.type, pos, field_path, depth)
        except (OdfFormatError, ValueError, struct.error) as e:  # incl. UnicodeDecodeError, JSON errors
            raise BlockDecodeError(f"{field_path}: {e}") from None
    try:
        return cls(**kwargs)
    except (OdfFormatError, TypeError, ValueError) as e:
        raise BlockDecodeError(f"{path or cls.__name__}: {e}") from None


@functools.cache
def _last_slot(cls: type) -> int:
    return max((f.slot for f in fields_of(cls)), default=4)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


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
    limit = max_block_bytes()
    if len(data) > limit:
        raise BlockDecodeError(
            f"block of {len(data)} bytes is larger than the {limit} bytes a block may have "
            f"({MAX_BLOCK_BYTES_ENV})"
        )
    r = _Reader(data)
    try:
        manifest = r.table_fields(r.deref(0), 8)
        kind = r.unpack(_STRUCTS["q"], manifest[4]) if 4 in manifest else 0
        version = r.unpack(_I32, manifest[6]) if 6 in manifest else 0
        if kind != ODF_METADATA_BLOCK:
            raise BlockDecodeError(f"not a metadata block: manifest kind {kind:#x}, expected 0x400000")
        if version not in READABLE_VERSIONS:
            raise BlockDecodeError(f"unsupported block version {version} (readable: 2, 3)")
        if 8 not in manifest:
            raise BlockDecodeError("block manifest has no content")
        content = bytes(r.bytes_at(manifest[8]))
    except OdfFormatError as e:
        raise BlockDecodeError(f"block manifest: {e}") from None
    return decode_table(content, model.MetadataBlock)

"""Parquet files zipped column-wise into one, by copying their encoded column chunks.

A transform's slice is Spark's output plus the system columns, whose offsets are known only once every
partition's row count is. Instead of decoding Spark's part files and encoding them again, the slice is
spliced: the system columns are encoded on their own, with row groups of the parts' sizes, and each
row group of the slice takes its column chunks from both files, copied as bytes (`copy_file_range`
where the OS has it). Only the footer is new: the schemas' fields in the slice's order, the chunks'
positions moved to where they now are, page indexes and bloom filters left out (their positions would
be stale; readers do without them).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from airflow_odf.engine import thrift_compact as tc

_MAGIC = b"PAR1"
_COPY_CHUNK = 1 << 20

# Thrift field ids (parquet.thrift)
_FILE_VERSION, _FILE_SCHEMA, _FILE_NUM_ROWS, _FILE_ROW_GROUPS, _FILE_KEY_VALUE = 1, 2, 3, 4, 5
_FILE_CREATED_BY, _FILE_COLUMN_ORDERS, _FILE_ENCRYPTION = 6, 7, 8
_SCHEMA_NUM_CHILDREN = 5
_RG_COLUMNS, _RG_TOTAL_BYTE_SIZE, _RG_NUM_ROWS = 1, 2, 3
_RG_FILE_OFFSET, _RG_TOTAL_COMPRESSED, _RG_ORDINAL = 5, 6, 7
_CC_FILE_PATH, _CC_FILE_OFFSET, _CC_META = 1, 2, 3
_CC_PAGE_INDEXES = (4, 5, 6, 7)
_CC_ENCRYPTED = (8, 9)
_META_TOTAL_UNCOMPRESSED, _META_TOTAL_COMPRESSED = 6, 7
_META_DATA_PAGE, _META_INDEX_PAGE, _META_DICTIONARY_PAGE = 9, 10, 11
_META_BLOOM_FILTER = (14, 15)


class SpliceError(ValueError):
    """A source file cannot be spliced (not Parquet, encrypted, or not matching its partner)."""


@dataclass(frozen=True)
class _TopField:
    """A top-level field of a file's schema: its schema elements and its range of leaf columns."""

    elements: list[tc.Struct]
    first_leaf: int
    leaves: int


@dataclass(frozen=True)
class ParquetSource:
    """A Parquet file's footer, read once: its schema's top-level fields and its row groups."""

    path: str
    footer: tc.Struct
    fields: list[_TopField]
    row_groups: list[tc.Struct]

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> ParquetSource:
        path = os.fspath(path)
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size < 12:
                raise SpliceError(f"{path}: {size} bytes is too short for a Parquet file")
            f.seek(size - 8)
            tail = f.read(8)
            if tail[4:] != _MAGIC:
                raise SpliceError(f"{path}: does not end with {_MAGIC!r} (encrypted or not Parquet)")
            length = struct.unpack("<I", tail[:4])[0]
            if length > size - 12:
                raise SpliceError(f"{path}: a footer of {length} bytes in a file of {size}")
            f.seek(size - 8 - length)
            raw = f.read(length)
        try:
            footer, _ = tc.decode(raw)
        except tc.ThriftError as e:
            raise SpliceError(f"{path}: unreadable footer: {e}") from None
        if footer.get(_FILE_ENCRYPTION) is not None:
            raise SpliceError(f"{path}: encrypted Parquet files cannot be spliced")
        schema = _items(footer, _FILE_SCHEMA)
        row_groups = _items(footer, _FILE_ROW_GROUPS)
        return cls(path, footer, _top_fields(path, schema), row_groups)  # type: ignore[arg-type]

    def num_rows(self, row_group: int) -> int:
        return int(self.row_groups[row_group].get(_RG_NUM_ROWS))  # type: ignore[call-overload]


def _items(struct_: tc.Struct, field_id: int) -> list[object]:
    value = struct_.get(field_id)
    return value.items if isinstance(value, tc.ThriftList) else []


def _top_fields(path: str, schema: list[tc.Struct]) -> list[_TopField]:
    """The root's children, each with its subtree of elements (depth first, as Parquet lists them)."""
    if not schema:
        raise SpliceError(f"{path}: the footer has no schema")
    fields: list[_TopField] = []
    position, leaf = 1, 0
    for _ in range(int(schema[0].get(_SCHEMA_NUM_CHILDREN) or 0)):  # type: ignore[call-overload]
        start, pending, leaves = position, 1, 0
        while pending:
            if position >= len(schema):
                raise SpliceError(f"{path}: the schema's elements end inside a group")
            children = int(schema[position].get(_SCHEMA_NUM_CHILDREN) or 0)  # type: ignore[call-overload]
            leaves += children == 0
            pending += children - 1
            position += 1
        fields.append(_TopField(schema[start:position], leaf, leaves))
        leaf += leaves
    return fields


@dataclass(frozen=True)
class Side:
    """One input of a splice: the file whose schema gives its fields, and its row groups in order (of
    that file or of others with the same schema)."""

    schema: ParquetSource
    row_groups: list[tuple[ParquetSource, int]]


def splice(
    target: str | os.PathLike[str],
    sides: Sequence[Side],
    fields: Sequence[tuple[int, int]],
    *,
    key_value_metadata: dict[bytes, bytes],
) -> int:
    """Writes `target`: row group i is made of row group i of every side, its top-level fields are
    `fields` — (side, field index in that side's schema), in order — and the other footer entries
    (version, root element, creator) are the first side's. The sides must have as many row groups, with
    the same row counts. Returns the row count."""
    counts = {len(side.row_groups) for side in sides}
    if len(counts) != 1:
        raise SpliceError(f"the files to splice have different numbers of row groups: {sorted(counts)}")
    row_groups: list[tc.Struct] = []
    rows = 0
    with open(target, "wb", buffering=0) as out, _Copier(out.fileno()) as copier:
        copier.write(_MAGIC)
        position = len(_MAGIC)
        for ordinal, group in enumerate(zip(*(side.row_groups for side in sides), strict=True)):
            group_rows = {source.num_rows(index) for source, index in group}
            if len(group_rows) != 1:
                paths = [source.path for source, _ in group]
                raise SpliceError(
                    f"row group {ordinal}: different row counts {sorted(group_rows)} in {paths}"
                )
            columns: list[tc.Struct] = []
            start = position
            for side, field_index in fields:
                source, index = group[side]
                field = source.fields[field_index]
                chunks = _items(source.row_groups[index], _RG_COLUMNS)
                for chunk in chunks[field.first_leaf : field.first_leaf + field.leaves]:
                    assert isinstance(chunk, tc.Struct)
                    moved, chunk_start, length = _moved_chunk(source.path, chunk, position)
                    copier.copy(source.path, chunk_start, length)
                    columns.append(moved)
                    position += length
            num_rows = group_rows.pop()
            rows += num_rows
            row_groups.append(_row_group(columns, num_rows, start, ordinal))
        footer = tc.encode(_footer(sides, fields, row_groups, rows, key_value_metadata))
        copier.write(footer + struct.pack("<I", len(footer)) + _MAGIC)
    return rows


def _chunk_start(path: str, meta: tc.Struct) -> int:
    """Where a column chunk's bytes begin: its dictionary page if it has one, else its first data page."""
    start = meta.get(_META_DATA_PAGE)
    if not isinstance(start, int):
        raise SpliceError(f"{path}: a column chunk without a data page offset")
    for earlier in (meta.get(_META_DICTIONARY_PAGE), meta.get(_META_INDEX_PAGE)):
        if isinstance(earlier, int) and 0 < earlier < start:
            start = earlier
    return start


def _moved_chunk(path: str, chunk: tc.Struct, position: int) -> tuple[tc.Struct, int, int]:
    """The chunk's metadata for its new place at `position`, with its old start and its length."""
    if chunk.get(_CC_FILE_PATH) is not None or any(chunk.get(i) is not None for i in _CC_ENCRYPTED):
        raise SpliceError(f"{path}: a column chunk in another file or encrypted")
    meta = chunk.get(_CC_META)
    if not isinstance(meta, tc.Struct):
        raise SpliceError(f"{path}: a column chunk without its metadata")
    start = _chunk_start(path, meta)
    length = meta.get(_META_TOTAL_COMPRESSED)
    if not isinstance(length, int) or length <= 0:
        raise SpliceError(f"{path}: a column chunk without its compressed size")
    shift = position - start
    meta = meta.copy()
    for field_id in (_META_DATA_PAGE, _META_INDEX_PAGE, _META_DICTIONARY_PAGE):
        value = meta.get(field_id)
        if isinstance(value, int) and value > 0:
            meta.set(field_id, tc.I64, value + shift)
    meta.drop(*_META_BLOOM_FILTER)
    moved = chunk.copy()
    moved.drop(*_CC_PAGE_INDEXES)
    moved.set(_CC_META, tc.STRUCT, meta)
    file_offset = chunk.get(_CC_FILE_OFFSET)
    if isinstance(file_offset, int) and file_offset > 0:  # parquet-mr writes 0 here; others a position
        moved.set(_CC_FILE_OFFSET, tc.I64, file_offset + shift)
    return moved, start, length


def _row_group(columns: list[tc.Struct], num_rows: int, start: int, ordinal: int) -> tc.Struct:
    metas = [c.get(_CC_META) for c in columns]
    uncompressed = sum(int(m.get(_META_TOTAL_UNCOMPRESSED) or 0) for m in metas)  # type: ignore[union-attr]
    compressed = sum(int(m.get(_META_TOTAL_COMPRESSED) or 0) for m in metas)  # type: ignore[union-attr]
    return tc.Struct(
        [
            tc.Field(_RG_COLUMNS, tc.LIST, tc.ThriftList(tc.STRUCT, list(columns))),
            tc.Field(_RG_TOTAL_BYTE_SIZE, tc.I64, uncompressed),
            tc.Field(_RG_NUM_ROWS, tc.I64, num_rows),
            tc.Field(_RG_FILE_OFFSET, tc.I64, start),
            tc.Field(_RG_TOTAL_COMPRESSED, tc.I64, compressed),
            tc.Field(_RG_ORDINAL, tc.I16, ordinal),
        ]
    )


def _footer(
    sides: Sequence[Side],
    fields: Sequence[tuple[int, int]],
    row_groups: list[tc.Struct],
    rows: int,
    key_value_metadata: dict[bytes, bytes],
) -> tc.Struct:
    base = sides[0].schema.footer
    root = _items(base, _FILE_SCHEMA)[0].copy()  # type: ignore[attr-defined]
    root.set(_SCHEMA_NUM_CHILDREN, tc.I32, len(fields))
    schema: list[object] = [root]
    orders: list[object] | None = []
    for side, field_index in fields:
        source = sides[side].schema
        field = source.fields[field_index]
        schema += field.elements
        side_orders = _items(source.footer, _FILE_COLUMN_ORDERS)
        if orders is not None and side_orders:
            orders += side_orders[field.first_leaf : field.first_leaf + field.leaves]
        else:
            orders = None  # a file without column orders: none for the splice either
    footer = tc.Struct()
    for field_id in (_FILE_VERSION, _FILE_CREATED_BY):
        value = base.get(field_id)
        if value is not None:
            footer.set(field_id, tc.I32 if field_id == _FILE_VERSION else tc.BINARY, value)
    footer.set(_FILE_SCHEMA, tc.LIST, tc.ThriftList(tc.STRUCT, schema))
    footer.set(_FILE_NUM_ROWS, tc.I64, rows)
    footer.set(_FILE_ROW_GROUPS, tc.LIST, tc.ThriftList(tc.STRUCT, list(row_groups)))
    if key_value_metadata:
        pairs = [
            tc.Struct([tc.Field(1, tc.BINARY, key), tc.Field(2, tc.BINARY, value)])
            for key, value in key_value_metadata.items()
        ]
        footer.set(_FILE_KEY_VALUE, tc.LIST, tc.ThriftList(tc.STRUCT, pairs))
    if orders:
        footer.set(_FILE_COLUMN_ORDERS, tc.LIST, tc.ThriftList(tc.STRUCT, orders))
    return footer


# Parquet enums (parquet.thrift)
INT32, INT64 = 1, 2
_REQUIRED, _SNAPPY, _DATA_PAGE, _DELTA_BINARY_PACKED, _RLE = 0, 1, 0, 5, 3
_DELTA_BLOCK, _DELTA_MINIBLOCKS = 128, 4


def required_element(name: str, physical_type: int, *annotations: tc.Field) -> tc.Struct:
    """The schema element of a required top-level column (`annotations`: converted and logical type)."""
    return tc.Struct(
        [
            tc.Field(1, tc.I32, physical_type),
            tc.Field(3, tc.I32, _REQUIRED),
            tc.Field(4, tc.BINARY, name.encode()),
            *annotations,
        ]
    )


_MILLIS = tc.Struct([tc.Field(1, tc.STRUCT, tc.Struct())])
_TIMESTAMP = tc.Struct([tc.Field(1, tc.BOOL_TRUE, True), tc.Field(2, tc.STRUCT, _MILLIS)])
TIMESTAMP_UTC_MILLIS = (
    tc.Field(6, tc.I32, 9),
    tc.Field(10, tc.STRUCT, tc.Struct([tc.Field(8, tc.STRUCT, _TIMESTAMP)])),
)
"""An INT64's annotations for Timestamp(isAdjustedToUTC, MILLIS): converted type TIMESTAMP_MILLIS (9)
and logical type 8 (Timestamp) {isAdjustedToUTC: true, unit: MILLIS}."""


@dataclass(frozen=True)
class SteppedColumn:
    """A required integer column whose value at row r is `first + step * r` (offsets count up by one;
    a constant has step 0): its schema element (name, physical type, annotations) and its sequence."""

    element: tc.Struct
    first: int
    step: int


def write_stepped_columns(
    path: str, columns: Sequence[SteppedColumn], row_counts: Sequence[int]
) -> ParquetSource:
    """Writes a Parquet file of `columns`, one row group per count, and returns it as a source for
    `splice` (its footer as built, not read back). Each chunk is one
    DELTA_BINARY_PACKED page, built directly: such a sequence is its first value and, per block of 128
    values, the step, with miniblocks of zero bits. No value is visited; snappy-compressed pages of a
    few bytes per thousand rows. Statistics as pyarrow writes them (min, max, no nulls)."""
    out = bytearray(_MAGIC)
    row_groups, start = [], 0
    for ordinal, count in enumerate(row_counts):
        group_start, chunks = len(out), []
        for column in columns:
            chunk, page = _stepped_chunk(column, start, count, len(out))
            out += page
            chunks.append(chunk)
        row_groups.append(_row_group(chunks, count, group_start, ordinal))
        start += count
    root = tc.Struct(
        [tc.Field(4, tc.BINARY, b"schema"), tc.Field(_SCHEMA_NUM_CHILDREN, tc.I32, len(columns))]
    )
    schema = [root, *(c.element for c in columns)]
    type_defined_order = tc.Struct([tc.Field(1, tc.STRUCT, tc.Struct())])
    footer = tc.Struct(
        [
            tc.Field(_FILE_VERSION, tc.I32, 1),
            tc.Field(_FILE_SCHEMA, tc.LIST, tc.ThriftList(tc.STRUCT, list(schema))),
            tc.Field(_FILE_NUM_ROWS, tc.I64, start),
            tc.Field(_FILE_ROW_GROUPS, tc.LIST, tc.ThriftList(tc.STRUCT, row_groups)),
            tc.Field(
                _FILE_COLUMN_ORDERS, tc.LIST, tc.ThriftList(tc.STRUCT, [type_defined_order] * len(columns))
            ),
        ]
    )
    encoded = tc.encode(footer)
    out += encoded + struct.pack("<I", len(encoded)) + _MAGIC
    with open(path, "wb") as f:
        f.write(out)
    return ParquetSource(path, footer, _top_fields(path, schema), row_groups)


def _stepped_chunk(column: SteppedColumn, start: int, count: int, position: int) -> tuple[tc.Struct, bytes]:
    """The column chunk of rows `start .. start + count - 1` at `position`: its metadata and its bytes."""
    physical = column.element.get(1)
    code = "<q" if physical == INT64 else "<i"
    first = column.first + column.step * start
    last = first + column.step * max(0, count - 1)
    values = bytearray()
    for n in (_DELTA_BLOCK, _DELTA_MINIBLOCKS, count):
        tc.write_varint(values, n)
    tc.write_zigzag(values, first)
    block = bytearray()
    tc.write_zigzag(block, column.step)
    values += (block + bytes(_DELTA_MINIBLOCKS)) * -(-(count - 1) // _DELTA_BLOCK)
    compressed = pa.compress(bytes(values), codec="snappy", asbytes=True)
    data_page = tc.Struct(
        [
            tc.Field(1, tc.I32, count),
            tc.Field(2, tc.I32, _DELTA_BINARY_PACKED),
            tc.Field(3, tc.I32, _RLE),
            tc.Field(4, tc.I32, _RLE),
        ]
    )
    header = tc.encode(
        tc.Struct(
            [
                tc.Field(1, tc.I32, _DATA_PAGE),
                tc.Field(2, tc.I32, len(values)),
                tc.Field(3, tc.I32, len(compressed)),
                tc.Field(5, tc.STRUCT, data_page),
            ]
        )
    )
    low, high = (struct.pack(code, v) for v in sorted((first, last)))
    statistics = tc.Struct(
        [
            tc.Field(1, tc.BINARY, high),
            tc.Field(2, tc.BINARY, low),
            tc.Field(3, tc.I64, 0),
            tc.Field(5, tc.BINARY, high),
            tc.Field(6, tc.BINARY, low),
            tc.Field(7, tc.BOOL_TRUE, True),
            tc.Field(8, tc.BOOL_TRUE, True),
        ]
    )
    page_stats = tc.Struct(
        [tc.Field(1, tc.I32, _DATA_PAGE), tc.Field(2, tc.I32, _DELTA_BINARY_PACKED), tc.Field(3, tc.I32, 1)]
    )
    meta = tc.Struct(
        [
            tc.Field(1, tc.I32, physical),
            tc.Field(2, tc.LIST, tc.ThriftList(tc.I32, [_DELTA_BINARY_PACKED])),
            tc.Field(3, tc.LIST, tc.ThriftList(tc.BINARY, [column.element.get(4)])),
            tc.Field(4, tc.I32, _SNAPPY),
            tc.Field(5, tc.I64, count),
            tc.Field(_META_TOTAL_UNCOMPRESSED, tc.I64, len(header) + len(values)),
            tc.Field(_META_TOTAL_COMPRESSED, tc.I64, len(header) + len(compressed)),
            tc.Field(_META_DATA_PAGE, tc.I64, position),
            tc.Field(12, tc.STRUCT, statistics),
            tc.Field(13, tc.LIST, tc.ThriftList(tc.STRUCT, [page_stats])),
        ]
    )
    chunk = tc.Struct([tc.Field(_CC_FILE_OFFSET, tc.I64, 0), tc.Field(_CC_META, tc.STRUCT, meta)])
    return chunk, header + compressed


class _Copier:
    """Appends bytes, and byte ranges of source files, to the target (ranges in the kernel where it
    can)."""

    def __init__(self, target_fd: int) -> None:
        self.target_fd = target_fd
        self.sources: dict[str, int] = {}
        self.in_kernel = hasattr(os, "copy_file_range")

    def __enter__(self) -> _Copier:
        return self

    def __exit__(self, *_exc: object) -> None:
        for fd in self.sources.values():
            os.close(fd)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.target_fd, view) :]

    def copy(self, path: str, start: int, length: int) -> None:
        fd = self.sources.get(path)
        if fd is None:
            fd = self.sources[path] = os.open(path, os.O_RDONLY)
        end = start + length
        while start < end:
            copied = 0
            if self.in_kernel:
                try:
                    copied = os.copy_file_range(fd, self.target_fd, end - start, start)
                except OSError:  # across file systems on old kernels, or not supported there
                    self.in_kernel = False
            if not copied:
                data = os.pread(fd, min(_COPY_CHUNK, end - start), start)
                if not data:
                    raise SpliceError(f"{path}: ends inside a column chunk (at byte {start} of {end})")
                self.write(data)
                copied = len(data)
            start += copied

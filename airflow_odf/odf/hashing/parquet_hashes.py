"""Hashes of Parquet files: the logical hash read from a file (the reference's batches of 10,000 rows),
the physical SHA3-256 of its bytes, and both at once from one memory mapping, column by column in a
thread pool, every column with a hasher of its own (SHA3 and Parquet decoding release the GIL). A
column can continue from a hasher that saw its values ahead of the commit (`KnownColumn`,
`HashedParts`), but only where the file's own values or column chunks are proven to be the same: the
hash is always the file's.

The column hashers are the digest's own (`RecordDigest`): this module feeds them, so it reaches into
the digest's per-leaf state (`_first_leaf`, `_columns`, `_hashed`, `_leaves`) by design.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, SHA3_256, Multihash
from airflow_odf.odf.hashing.arrow_digest import (
    CHUNK_ROWS,
    RecordDigest,
    fixed_raw,
    fixed_width,
    is_type,
    is_varlen,
    unwrap,
)
from airflow_odf.utils.hashing.file_hashes import PARQUET_BATCH_SIZE

__all__ = [
    "HashedParts",
    "KnownColumn",
    "PartFile",
    "hash_parquet_column",
    "is_flat",
    "logical_hash_of_parquet",
    "parquet_hashes",
    "physical_hash_of_file",
]

_FILE_CHUNK = 1 << 20


def logical_hash_of_parquet(path: str | os.PathLike[str]) -> Multihash:
    """`arrow0-sha3-256` logical hash of a parquet file: the digest of its rows read in batches of 10,000
    as kamu does (the batching matters only to struct columns, which are hashed in those batches)."""
    return parquet_hashes(path)[0]


class KnownColumn(Protocol):
    """A column whose values were known, and hashed, before the file was written (`hash_ahead`)."""

    type_bytes: bytes  # the column hasher's start (`_hash_data_type` of the column's type)
    width: int  # bytes per value

    def hasher_at(self, rows: int) -> tuple[Any, int]:
        """A column hasher fed the first `covered` values (`covered` <= `rows`), and `covered`."""
        ...

    def expected(self, start: int, count: int) -> np.ndarray:
        """Values `start .. start + count - 1`."""
        ...


@dataclass(frozen=True)
class PartFile:
    """A Parquet file whose row groups come first in another one, as they are (`parts_ahead`)."""

    data: pa.Buffer
    metadata: pq.FileMetaData


@dataclass(frozen=True)
class HashedParts:
    """Part files, in order, and a digest over their schema whose flat column `name` was fed with the
    first `fed[name]` of them (`parts_ahead`)."""

    files: tuple[PartFile, ...]
    digest: RecordDigest
    fed: Mapping[str, int]

    def rows_fed(self, name: str) -> int:
        return sum(part.metadata.num_rows for part in self.files[: self.fed.get(name, 0)])


def parquet_hashes(
    path: str | os.PathLike[str],
    known: Mapping[str, KnownColumn] | None = None,
    parts: HashedParts | None = None,
) -> tuple[Multihash, Multihash]:
    """(logical hash, physical hash) of a parquet file, from one memory mapping of it, with the columns
    and the file's bytes hashed in parallel. A column named in `known` whose values are read back and
    found to be exactly the known ones continues from the known column's hasher; a column of `parts`
    whose chunks in the file's first row groups are byte for byte the parts' continues from the parts'
    hasher."""
    with pa.memory_map(os.fspath(path)) as source:
        data = source.read_buffer()  # zero-copy: the file's pages, shared by every reader below
        parquet = pq.ParquetFile(pa.BufferReader(data))
        digest = RecordDigest(parquet.schema_arrow)
        names = digest.schema.names
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            if len(set(names)) < len(names):  # columns are read by name: one reader for all of them
                physical = pool.submit(_sha3, data)
                for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_SIZE):
                    digest.update(batch)
            else:
                # the costliest tasks first (estimated from the footer; the file's bytes: its size), so
                # that no long one starts last
                column = known or {}
                costs = _column_costs(digest.schema, parquet.metadata)
                if parts is not None and parquet.metadata.num_rows:  # partly hashed already
                    total = parquet.metadata.num_rows
                    costs = [
                        int(cost * (1 - parts.rows_fed(name) / total))
                        for name, cost in zip(names, costs, strict=True)
                    ]
                file_bytes = partial(_sha3, data)
                jobs = [(data.size, file_bytes)] + [
                    (
                        0 if name in column else cost,
                        partial(_hash_column, digest, data, parquet.metadata, i, column.get(name), parts),
                    )
                    for i, (name, cost) in enumerate(zip(names, costs, strict=True))
                ]
                started = {job: pool.submit(job) for _, job in sorted(jobs, key=lambda j: -j[0])}
                for task in started.values():
                    task.result()
                physical = started[file_bytes]
            return Multihash(ARROW0_SHA3_256, digest.finalize()), Multihash(SHA3_256, physical.result())


def _column_costs(schema: pa.Schema, metadata: pq.FileMetaData) -> list[int]:
    """Per top-level column, about the bytes hashing it costs: its pages decoded, and its values'
    stream (a variable-width value also costs a length prefix and a gather: taken as 24 bytes)."""
    costs, leaf = [], 0
    for field in schema:
        t = unwrap(field.type)
        leaves = _parquet_leaves(t)
        width = fixed_width(t)
        pages = sum(
            metadata.row_group(r).column(c).total_uncompressed_size
            for r in range(metadata.num_row_groups)
            for c in range(leaf, leaf + leaves)
        )
        costs.append(metadata.num_rows * (width if width is not None else 24 * leaves) + pages)
        leaf += leaves
    return costs


def _hash_column(
    digest: RecordDigest,
    data: pa.Buffer,
    metadata: pq.FileMetaData,
    index: int,
    known: KnownColumn | None,
    parts: HashedParts | None,
) -> None:
    if known is not None and _hash_known_column(digest, data, metadata, index, known):
        return
    first = _continue_from_parts(digest, data, metadata, index, parts) if parts is not None else 0
    hash_parquet_column(digest, data, metadata, index, first)


def _continue_from_parts(
    digest: RecordDigest, data: pa.Buffer, metadata: pq.FileMetaData, index: int, parts: HashedParts
) -> int:
    """Feeds column `index` from the parts' hasher when the file's first row groups are the parts' ones
    for this column: the same Parquet column, and chunks byte for byte the same (so are their values).
    Returns the number of those row groups (0: nothing fed)."""
    field = digest.schema.field(index)
    theirs = parts.digest.schema
    if theirs.get_all_field_indices(field.name) != [j := theirs.get_field_index(field.name)]:
        return 0
    if not (is_flat(field.type) and field.equals(theirs.field(j))):
        return 0
    column, their_column = _parquet_leaf(digest.schema, index), _parquet_leaf(theirs, j)
    group = 0
    for part in parts.files[: parts.fed.get(field.name, 0)]:
        if not metadata.schema.column(column).equals(part.metadata.schema.column(their_column)):
            return 0
        for their_group in range(part.metadata.num_row_groups):
            if group == metadata.num_row_groups or not _same_chunk(
                (data, metadata.row_group(group), column),
                (part.data, part.metadata.row_group(their_group), their_column),
            ):
                return 0
            group += 1
    leaf, their_leaf = digest._first_leaf[index], parts.digest._first_leaf[j]
    digest._columns[leaf] = parts.digest._columns[their_leaf].copy()
    digest._hashed[leaf] += parts.digest._hashed[their_leaf]
    return group


def _same_chunk(
    ours: tuple[pa.Buffer, pq.RowGroupMetaData, int], theirs: tuple[pa.Buffer, pq.RowGroupMetaData, int]
) -> bool:
    """Whether two column chunks hold the same rows, encoded the same way, in the same bytes."""
    (data, group, column), (their_data, their_group, their_column) = ours, theirs
    chunk, their_chunk = group.column(column), their_group.column(their_column)
    described = [
        (c.physical_type, c.compression, c.encodings, c.num_values, c.total_compressed_size)
        for c in (chunk, their_chunk)
    ]
    if group.num_rows != their_group.num_rows or described[0] != described[1]:
        return False
    size = chunk.total_compressed_size
    return data.slice(_chunk_start(chunk), size).equals(their_data.slice(_chunk_start(their_chunk), size))


def _chunk_start(chunk: pq.ColumnChunkMetaData) -> int:
    """Where a column chunk's pages begin: its dictionary page, if it has one, else its first data page."""
    if chunk.has_dictionary_page and chunk.dictionary_page_offset:
        return min(chunk.dictionary_page_offset, chunk.data_page_offset)
    return chunk.data_page_offset


def _parquet_leaf(schema: pa.Schema, index: int) -> int:
    """The Parquet column (leaf) index of the first leaf of top-level column `index`."""
    return sum(_parquet_leaves(unwrap(schema.field(i).type)) for i in range(index))


def is_flat(t: pa.DataType) -> bool:
    """Whether a column's digest does not depend on how its rows are cut into batches: no struct (§D.5)
    and no map (a list of key-value structs) at any depth."""
    t = unwrap(t)
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return False
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or is_type("is_list_view", t)
    ):
        return is_flat(t.value_type)
    return True


def _hash_known_column(
    digest: RecordDigest, data: pa.Buffer, metadata: pq.FileMetaData, index: int, known: KnownColumn
) -> bool:
    """Feeds column `index` from the known column's hasher, hashing only the values it has not seen,
    when the file's column has the known type and every value read back (no nulls) is the known one;
    False, with nothing fed, otherwise."""
    leaf = digest._first_leaf[index]
    field = digest.schema.field(index)
    if digest._leaves[leaf][1] != known.type_bytes or fixed_width(unwrap(field.type)) != known.width:
        return False
    rows = metadata.num_rows
    hasher, covered = known.hasher_at(rows)
    parquet = pq.ParquetFile(pa.BufferReader(data), metadata=metadata)
    position = 0
    for batch in parquet.iter_batches(CHUNK_ROWS, columns=[field.name], use_threads=False):
        values = batch.column(0)
        if values.null_count:
            return False
        raw = fixed_raw(values, known.width)
        if not np.array_equal(raw, known.expected(position, len(values)).view(np.uint8)):
            return False
        if position + len(values) > covered:
            hasher.update(raw[max(0, covered - position) * known.width :])
        position += len(values)
    if position != rows:
        return False
    digest._columns[leaf] = hasher
    digest._hashed[leaf] += rows * known.width
    return True


def _sha3(data: pa.Buffer) -> bytes:
    return hashlib.sha3_256(memoryview(data)).digest()


def hash_parquet_column(
    digest: RecordDigest,
    data: pa.Buffer,
    metadata: pq.FileMetaData,
    index: int,
    first_row_group: int = 0,
    until: threading.Event | None = None,
) -> bool:
    """Feeds one column of the file (from row group `first_row_group` on) to its hashers in record
    order, with a reader of its own. A struct column is read in the reference's batches of 10,000 rows
    (its digest depends on them, §D.5); any other column in larger ones (fewer pieces, the same digest).
    A string or binary column whose every page is dictionary-encoded is read as that dictionary: each
    distinct value is decoded and prefixed once instead of once per row. Stops between two batches once
    `until` is set, the column then partly fed; returns whether it was fed to the end."""
    field = digest.schema.field(index)
    leaf = _parquet_leaf(digest.schema, index)
    groups = range(first_row_group, metadata.num_row_groups)
    if not groups:
        return True
    as_dictionary = is_varlen(unwrap(field.type)) and all(
        _dictionary_only(metadata.row_group(r).column(leaf)) for r in groups
    )
    parquet = pq.ParquetFile(
        pa.BufferReader(data), metadata=metadata, read_dictionary=[field.name] if as_dictionary else None
    )
    rows = PARQUET_BATCH_SIZE if pa.types.is_struct(unwrap(field.type)) else CHUNK_ROWS
    read = parquet.iter_batches(
        rows, row_groups=groups if first_row_group else None, columns=[field.name], use_threads=False
    )
    for batch in read:
        if until is not None and until.is_set():
            return False
        digest.update_column(index, batch.column(0))
    return True


def _dictionary_only(column: pq.ColumnChunkMetaData) -> bool:
    """Whether every page of the chunk is known to be dictionary-encoded. Parquet-mr (Spark) encodes a
    dictionary page and its data pages as PLAIN_DICTIONARY, so PLAIN appears only where pages fell back
    to plain; other writers mark the dictionary page itself PLAIN, which tells nothing. A chunk with
    plain pages read as a dictionary would cost a hash table insert per value (4 times slower)."""
    return column.has_dictionary_page and "PLAIN" not in column.encodings


def _parquet_leaves(t: pa.DataType) -> int:
    """How many Parquet columns an Arrow type is stored as."""
    if pa.types.is_struct(t):
        return sum(_parquet_leaves(unwrap(f.type)) for f in t)
    if pa.types.is_map(t):
        return _parquet_leaves(unwrap(t.key_type)) + _parquet_leaves(unwrap(t.item_type))
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or is_type("is_list_view", t)
    ):
        return _parquet_leaves(unwrap(t.value_type))
    return 1


def physical_hash_of_file(path: str | os.PathLike[str]) -> Multihash:
    """`sha3-256` multihash of a file's bytes (data files and checkpoints), streamed in 1 MiB chunks."""
    h = hashlib.sha3_256()
    with open(path, "rb") as f:
        while chunk := f.read(_FILE_CHUNK):
            h.update(chunk)
    return Multihash(SHA3_256, h.digest())

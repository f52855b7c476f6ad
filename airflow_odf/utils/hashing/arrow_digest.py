"""The ODF logical data hash: the arrow-digest algorithm over Arrow record batches.

The logical hash is kamu's arrow-digest `RecordDigestV0<Sha3_256>` (FORMAT-NOTES §D): a SHA3-256 over
the schema (field names and nesting levels) and over one SHA3-256 per leaf column, each started with
an encoding of the column's type and fed every value in record order. It is wrapped as multihash
`arrow0-sha3-256` (0x300016, text form `f9680c00120…`) by its users. Shared by the core and the engine
(`airflow_odf.odf.hashing` wraps it in the core's types and errors).

Column streams are built with numpy / Arrow kernels and fed to the hashers in large pieces; no value is
visited by a Python loop. Memory use is bounded per batch (large batches are hashed in row chunks).

Null handling follows the reference bit for bit, including the quirks of `maybe_combine_null_buffers`
for struct columns (§D.5). "Has a validity buffer" is taken as "has at least one null", as it is in
arrow-rs, whose `ArrayData` drops validity buffers without nulls; so pyarrow's physical buffers never
matter, but a bitmap OR-ed at a struct level that ends up without nulls does (it suppresses the nulls
of the next level, exactly like the reference).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "RecordDigest",
    "UnhashableDataError",
    "column_type_bytes",
]


class UnhashableDataError(ValueError):
    """Data the logical hash cannot hash (a type arrow-digest does not support, a batch of another
    schema); the message names the column."""


CHUNK_ROWS = 1 << 16
_CHUNK_BYTES = 16 << 20

_EMPTY = np.zeros(0, dtype=np.uint8)


def _u16(v: int) -> bytes:
    return struct.pack("<H", v)


def _u64(v: int) -> bytes:
    return struct.pack("<Q", v & 0xFFFF_FFFF_FFFF_FFFF)


# --------------------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------------------

_TIME_UNIT = {"s": 0, "ms": 1, "us": 2, "ns": 3}


def unwrap(t: pa.DataType) -> pa.DataType:
    """Extension types are hashed as their storage type (arrow-rs only sees the storage)."""
    while isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    return t


def is_type(name: str, t: pa.DataType) -> bool:
    """`pyarrow.types.<name>(t)`, False when this pyarrow does not know the type at all."""
    fn = getattr(pa.types, name, None)
    return bool(fn is not None and fn(t))


def is_varlen(t: pa.DataType) -> bool:
    return (
        pa.types.is_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_large_string(t)
    )


def _is_view(t: pa.DataType) -> bool:
    return is_type("is_binary_view", t) or is_type("is_string_view", t)


def _is_decimal(t: pa.DataType) -> bool:
    return pa.types.is_decimal(t) or is_type("is_decimal32", t) or is_type("is_decimal64", t)


def _unsupported(path: str, t: pa.DataType, why: str = "") -> UnhashableDataError:
    return UnhashableDataError(
        f"column {path!r}: Arrow type {t} is not supported by the ODF logical hash "
        f"(arrow-digest RecordDigestV0){why}"
    )


def _hash_data_type(t: pa.DataType, path: str) -> bytes:
    """The bytes `hash_data_type` feeds a column hasher before any value (§D.2)."""
    t = unwrap(t)
    if pa.types.is_null(t):
        return _u16(0)
    if pa.types.is_boolean(t):
        return _u16(5)
    if pa.types.is_integer(t):
        return _u16(1) + bytes([1 if pa.types.is_signed_integer(t) else 0]) + _u64(t.bit_width)
    if pa.types.is_floating(t):
        return _u16(2) + _u64(t.bit_width)
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or is_type("is_binary_view", t)
    ):
        return _u16(3)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or is_type("is_string_view", t):
        return _u16(4)
    if _is_decimal(t):
        # precision u8 zero-extended, scale i8 sign-extended, both as u64
        return _u16(6) + _u64(t.bit_width) + _u64(t.precision) + _u64(t.scale)
    if pa.types.is_date32(t):
        return _u16(7) + _u64(32) + _u16(0)
    if pa.types.is_date64(t):
        return _u16(7) + _u64(64) + _u16(1)
    if pa.types.is_time32(t):
        return _u16(8) + _u64(32) + _u16(_TIME_UNIT[t.unit])
    if pa.types.is_time64(t):
        return _u16(8) + _u64(64) + _u16(_TIME_UNIT[t.unit])
    if pa.types.is_timestamp(t):
        head = _u16(9) + _u16(_TIME_UNIT[t.unit])
        if t.tz is None:
            return head + b"\x00"
        tz = t.tz.encode("utf-8")
        return head + _u64(len(tz)) + tz
    if pa.types.is_map(t):
        raise _unsupported(path, t)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = unwrap(t.value_type)
        if pa.types.is_struct(item):
            raise _unsupported(path, t, ": lists of structs cannot be hashed")
        return _u16(11) + _hash_data_type(item, path + "[]")
    raise _unsupported(path, t)


def column_type_bytes(t: pa.DataType, path: str) -> bytes:
    """What a column hasher of type `t` is fed before any value."""
    return _hash_data_type(t, path)


def _walk_fields(fields: Any, level: int, prefix: str) -> Iterator[tuple[str, str, int, pa.DataType]]:
    """Depth first, struct parents before their children: (path, name, level, type)."""
    for field in fields:
        path = prefix + field.name
        t = unwrap(field.type)
        yield path, field.name, level, t
        if pa.types.is_struct(t):
            yield from _walk_fields(list(t), level + 1, path + ".")


def _schema_layout(schema: pa.Schema) -> tuple[bytes, list[tuple[str, bytes]]]:
    """(bytes for the top hasher, [(leaf path, type bytes)])."""
    top = bytearray()
    leaves: list[tuple[str, bytes]] = []
    for path, name, level, t in _walk_fields(schema, 0, ""):
        raw = name.encode("utf-8")
        top += _u64(len(raw)) + raw + _u64(level)
        if not pa.types.is_struct(t):
            leaves.append((path, _hash_data_type(t, path)))
    return bytes(top), leaves


# --------------------------------------------------------------------------------------------------
# Validity
# --------------------------------------------------------------------------------------------------


def _unpack_bits(buf: pa.Buffer, bit_offset: int, n: int) -> np.ndarray:
    """n bits starting at bit_offset as uint8 0/1."""
    shift = bit_offset & 7
    nbytes = (shift + n + 7) >> 3
    packed = np.frombuffer(buf, dtype=np.uint8, count=nbytes, offset=bit_offset >> 3)
    return np.unpackbits(packed, count=shift + n, bitorder="little")[shift:]


def _own_validity(arr: pa.Array) -> np.ndarray | None:
    """The array's own validity as bools, None when it has no null (arrow-rs normalisation)."""
    if arr.null_count == 0:
        return None
    buf = arr.buffers()[0]
    if buf is None:  # null-typed arrays have no bitmap; they are rejected when hashed
        return None
    return _unpack_bits(buf, arr.offset, len(arr)).view(np.bool_)


def _combine(parent: np.ndarray | None, child: np.ndarray | None) -> np.ndarray | None:
    """arrow-digest `maybe_combine_null_buffers`. `child` is None or has a null; `parent` may be an
    OR-ed bitmap without nulls, which counts as present-without-nulls (falls in the last arm)."""
    parent_nulls = parent is not None and not parent.all()
    if parent is None and child is not None:
        return child
    if parent_nulls and child is None:
        return parent
    if parent_nulls and child is not None:
        return parent | child  # a value is valid if valid on either side
    return None


# --------------------------------------------------------------------------------------------------
# Value streams
# --------------------------------------------------------------------------------------------------


def fixed_width(t: pa.DataType) -> int | None:
    """Bytes per value of the fixed-width types hashed as raw little-endian buffers."""
    if pa.types.is_duration(t) or pa.types.is_interval(t):
        return None
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t) or _is_decimal(t):
        return t.bit_width // 8
    return None


def fixed_raw(arr: pa.Array, width: int) -> np.ndarray:
    n = len(arr)
    return np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=n * width, offset=arr.offset * width)


def _offsets(arr: pa.Array, large: bool) -> np.ndarray:
    n = len(arr)
    dt = np.int64 if large else np.int32
    size = 8 if large else 4
    offs = np.frombuffer(arr.buffers()[1], dtype=dt, count=n + 1, offset=arr.offset * size)
    return offs.astype(np.int64)


def _prefixed(
    prefix: np.ndarray,
    data: np.ndarray,
    span_offs: np.ndarray,
    valid: np.ndarray | None,
    need_sizes: bool,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Per row: valid -> u64 prefix[i] + data[span_offs[i]:span_offs[i+1]]; null -> 0x00.

    Arrow's `take` on a large_binary array does the interleaving: values 0..n-1 are the prefixes,
    n..2n-1 the spans, 2n is b"\\x00" and 2n+1 is b"".
    """
    n = prefix.size
    base = int(span_offs[0])
    length = int(span_offs[-1]) - base
    hdr = 8 * n
    src = np.empty(hdr + length + 1, dtype=np.uint8)
    src[:hdr] = prefix.astype("<u8").view(np.uint8)
    src[hdr : hdr + length] = data[base : base + length]
    src[-1] = 0
    so = np.empty(2 * n + 3, dtype=np.int64)
    so[: n + 1] = np.arange(0, hdr + 1, 8, dtype=np.int64)
    so[n + 1 : 2 * n + 1] = span_offs[1:] + (hdr - base)
    so[2 * n + 1 :] = hdr + length + 1
    values = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), 2 * n + 2, [None, pa.py_buffer(so), pa.py_buffer(src)]
    )
    idx = np.empty((n, 2), dtype=np.int64)
    idx[:, 0] = np.arange(n, dtype=np.int64)
    idx[:, 1] = idx[:, 0] + n
    if valid is not None:
        nulls = ~valid
        idx[nulls, 0] = 2 * n
        idx[nulls, 1] = 2 * n + 1
    out = _gather(values, idx.reshape(-1))
    sizes = None
    if need_sizes:
        sizes = np.diff(span_offs) + 8
        if valid is not None:
            sizes[~valid] = 1
    return out, sizes


def _gather(values: pa.LargeBinaryArray, order: np.ndarray) -> np.ndarray:
    """The bytes of `values[order[0]]`, `values[order[1]]`, ... one after the other."""
    if not order.size:
        return _EMPTY
    indices = pa.Int64Array.from_buffers(pa.int64(), order.size, [None, pa.py_buffer(order)])
    # the system allocator keeps freed chunks for the next piece; Arrow's default pool (mimalloc) hands
    # them back to the OS, and touching fresh pages again cost a third of a first hash (page faults)
    res = pc.take(values, indices, memory_pool=pa.system_memory_pool())
    bufs = res.buffers()
    total = int(np.frombuffer(bufs[1], dtype=np.int64, count=1, offset=(res.offset + order.size) * 8)[0])
    start = int(np.frombuffer(bufs[1], dtype=np.int64, count=1, offset=res.offset * 8)[0])
    return np.frombuffer(bufs[2], dtype=np.uint8, count=total - start, offset=start)


def _dictionary_stream(arr: pa.DictionaryArray, valid: np.ndarray | None) -> Iterator[np.ndarray]:
    """The bytes a dictionary-encoded string or binary array contributes, the same as its decoded
    values would: each distinct value is length-prefixed once, then gathered per row (null -> 0x00), in
    pieces of bounded size."""
    dictionary = arr.dictionary
    t = dictionary.type
    offs = _offsets(dictionary, pa.types.is_large_binary(t) or pa.types.is_large_string(t))
    m = len(dictionary)
    data_buf = dictionary.buffers()[2]
    data = _EMPTY if data_buf is None else np.frombuffer(data_buf, dtype=np.uint8)
    entries = _prefixed(np.diff(offs), data, offs, None, False)[0] if m else _EMPTY
    sizes = np.append(np.diff(offs) + 8, 1)  # entry m: the null marker
    entry_offs = np.zeros(m + 2, dtype=np.int64)
    np.cumsum(sizes, out=entry_offs[1:])
    values = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(),
        m + 1,
        [None, pa.py_buffer(entry_offs), pa.py_buffer(np.append(entries, np.uint8(0)))],
    )
    indices = arr.indices
    kind = "i" if pa.types.is_signed_integer(indices.type) else "u"
    width = indices.type.bit_width // 8
    raw = np.frombuffer(
        indices.buffers()[1], dtype=f"<{kind}{width}", count=len(indices), offset=indices.offset * width
    )
    if valid is None and m and np.all(sizes[:-1] == sizes[0]):
        # every value the same length (codes, symbols, hashes): a gather of fixed-size items
        items = np.frombuffer(entries, dtype=f"V{sizes[0]}", count=m)
        step = max(1, _CHUNK_BYTES // int(sizes[0]))
        for start in range(0, raw.size, step):
            yield np.take(items, raw[start : start + step]).view(np.uint8)
        return
    order = raw.astype(np.int64)  # a copy: null rows (any index) are pointed at the null marker
    if valid is not None:
        order[~valid] = m
    row_ends = np.cumsum(sizes[order])
    start = 0
    while start < order.size:
        end = min(order.size, start + CHUNK_ROWS)
        base = row_ends[start - 1] if start else 0
        if row_ends[end - 1] - base > _CHUNK_BYTES:
            end = max(start + 1, int(np.searchsorted(row_ends, base + _CHUNK_BYTES, side="right")))
        yield _gather(values, order[start:end])
        start = end


def _encode(arr: pa.Array, valid: np.ndarray | None, need_sizes: bool) -> tuple[Any, np.ndarray | None]:
    """The bytes one array contributes to its column hasher, and (for list items) per-value sizes.

    `valid` is the effective validity (None: every value is hashed as a value, even over the array's
    own nulls); it is never taken from the array itself.
    """
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    t = arr.type
    n = len(arr)
    if valid is not None and valid.all():
        valid = None  # same bytes as the no-null path
    if pa.types.is_null(t):
        if n == 0:
            return _EMPTY, np.zeros(0, dtype=np.int64)
        raise UnhashableDataError("Arrow type null cannot be hashed by the ODF logical hash")
    if n == 0:
        return _EMPTY, np.zeros(0, dtype=np.int64)

    width = fixed_width(t)
    if width is not None:
        raw = fixed_raw(arr, width)
        if valid is None:
            return raw, (np.full(n, width, dtype=np.int64) if need_sizes else None)
        keep = np.empty((n, width), dtype=np.bool_)
        keep[:] = valid[:, None]
        keep[:, 0] = True
        out = raw[keep.reshape(-1)]
        sizes = np.where(valid, width, 1)
        starts = np.cumsum(sizes) - sizes
        out[starts[~valid]] = 0
        return out, sizes

    if pa.types.is_boolean(t):
        out = _unpack_bits(arr.buffers()[1], arr.offset, n) + np.uint8(1)
        if valid is not None:
            out[~valid] = 0
        return out, (np.ones(n, dtype=np.int64) if need_sizes else None)

    if is_varlen(t):
        offs = _offsets(arr, pa.types.is_large_binary(t) or pa.types.is_large_string(t))
        data_buf = arr.buffers()[2]
        data = _EMPTY if data_buf is None else np.frombuffer(data_buf, dtype=np.uint8)
        return _prefixed(np.diff(offs), data, offs, valid, need_sizes)

    if _is_view(t):
        target = pa.large_string() if is_type("is_string_view", t) else pa.large_binary()
        return _encode(arr.cast(target), valid, need_sizes)

    if pa.types.is_fixed_size_binary(t):
        w = t.byte_width
        raw = fixed_raw(arr, w)
        if valid is None:
            out2 = np.empty((n, 8 + w), dtype=np.uint8)
            out2[:, :8] = np.frombuffer(_u64(w), dtype=np.uint8)
            out2[:, 8:] = raw.reshape(n, w)
            return out2.reshape(-1), (np.full(n, 8 + w, dtype=np.int64) if need_sizes else None)
        span_offs = np.arange(n + 1, dtype=np.int64) * w
        return _prefixed(np.full(n, w, dtype=np.int64), raw, span_offs, valid, need_sizes)

    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        if pa.types.is_fixed_size_list(t):
            k = t.list_size
            offs = (np.arange(n + 1, dtype=np.int64) + arr.offset) * k
        else:
            offs = _offsets(arr, pa.types.is_large_list(t))
        o0 = int(offs[0])
        child = arr.values.slice(o0, int(offs[-1]) - o0)
        # each list value's items are hashed with the items' own nulls only
        items, item_sizes = _encode(child, _own_validity(child), True)
        item_offs = np.zeros(len(child) + 1, dtype=np.int64)
        np.cumsum(item_sizes, out=item_offs[1:])
        return _prefixed(np.diff(offs), np.asarray(items), item_offs[offs - o0], valid, need_sizes)

    raise UnhashableDataError(f"Arrow type {t} is not supported by the ODF logical hash")


def _chunk_ranges(arr: pa.Array) -> Iterator[tuple[int, int]]:
    """Row ranges that keep each piece's temporary buffers bounded."""
    n = len(arr)
    t = arr.type
    offs = None
    if is_varlen(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        large = pa.types.is_large_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_list(t)
        offs = _offsets(arr, large)
    start = 0
    while start < n:
        end = min(n, start + CHUNK_ROWS)
        if offs is not None and offs[end] - offs[start] > _CHUNK_BYTES:
            end = int(np.searchsorted(offs, offs[start] + _CHUNK_BYTES, side="right")) - 1
            end = max(end, start + 1)
        yield start, end
        start = end


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


class RecordDigest:
    """arrow-digest `RecordDigestV0<Sha3_256>`: feed batches in record order, then `finalize()`.

    Batch boundaries do not change the result (except where the reference itself depends on them:
    struct columns with nulls at several levels, §D.5). `finalize` does not consume the digest.
    `bytes_hashed` counts the value bytes fed to the column hashers.
    """

    def __init__(self, schema: pa.Schema) -> None:
        top_bytes, leaves = _schema_layout(schema)
        self.schema = schema
        self._top = hashlib.sha3_256(top_bytes)
        self._leaves = leaves
        self._columns = [hashlib.sha3_256(type_bytes) for _, type_bytes in leaves]
        self._layout = (top_bytes, leaves)
        self._hashed = [0] * len(leaves)  # per leaf, so that columns can be fed from several threads
        self._first_leaf: list[int] = []  # per top-level column, the index of its first leaf
        leaf = 0
        for _, _, level, t in _walk_fields(schema, 0, ""):
            if level == 0:
                self._first_leaf.append(leaf)
            if not pa.types.is_struct(t):
                leaf += 1

    @property
    def bytes_hashed(self) -> int:
        return sum(self._hashed)

    def copy(self) -> RecordDigest:
        """A digest fed what this one was, to be fed on its own."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._top = self._top.copy()
        other._columns = [column.copy() for column in self._columns]
        other._hashed = list(self._hashed)
        return other

    def update(self, batch: pa.RecordBatch | pa.Table) -> None:
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self.update(b)
            return
        if not isinstance(batch, pa.RecordBatch):
            raise UnhashableDataError(f"expected a pyarrow RecordBatch or Table, got {type(batch).__name__}")
        if batch.schema is not self.schema and _schema_layout(batch.schema) != self._layout:
            raise UnhashableDataError(
                f"batch schema does not match the digest's schema:\n{batch.schema}\nexpected:\n{self.schema}"
            )
        self._walk(list(batch.columns), batch.schema.names, None, "", 0)

    def update_column(self, index: int, array: pa.Array) -> None:
        """Feeds top-level column `index` only, which touches only its own hashers: different columns can
        be fed from different threads. `array` must have the schema's type for that column, or for a
        string or binary column, be a dictionary of it."""
        self._walk([array], [self.schema.names[index]], None, "", self._first_leaf[index])

    def _walk(
        self, arrays: list[pa.Array], names: list[str], parent: np.ndarray | None, prefix: str, leaf: int
    ) -> int:
        """Flattens structs (combining validity per §D.5) and hashes the leaves; returns the next leaf."""
        for arr, name in zip(arrays, names, strict=True):
            if isinstance(arr, pa.ExtensionArray):
                arr = arr.storage
            path = prefix + name
            t = arr.type
            combined = _combine(parent, _own_validity(arr))
            if pa.types.is_struct(t):
                children = [arr.field(i) for i in range(t.num_fields)]
                leaf = self._walk(children, [f.name for f in t], combined, path + ".", leaf)
            else:
                self._hash_leaf(leaf, path, arr, combined)
                leaf += 1
        return leaf

    def _hash_leaf(self, index: int, path: str, arr: pa.Array, valid: np.ndarray | None) -> None:
        hasher = self._columns[index]
        t = arr.type
        if pa.types.is_null(t):
            raise _unsupported(path, t, ": null-typed columns cannot be hashed")
        if _is_view(t):
            arr = arr.cast(pa.large_string() if is_type("is_string_view", t) else pa.large_binary())
        if valid is not None and valid.all():
            valid = None
        if pa.types.is_dictionary(t):  # a string or binary column read from Parquet as its dictionary
            for stream in _dictionary_stream(arr, valid):
                hasher.update(stream)
                self._hashed[index] += stream.nbytes
            return
        width = fixed_width(t)
        if width is not None and valid is None:
            if len(arr):
                raw = fixed_raw(arr, width)
                hasher.update(raw)
                self._hashed[index] += raw.nbytes
            return
        try:
            for start, end in _chunk_ranges(arr):
                piece = arr.slice(start, end - start)
                stream, _ = _encode(piece, None if valid is None else valid[start:end], False)
                hasher.update(stream)
                self._hashed[index] += memoryview(stream).nbytes
        except UnhashableDataError as e:
            raise UnhashableDataError(f"column {path!r}: {e}") from e

    def finalize(self) -> bytes:
        """The 32-byte digest of everything fed so far."""
        top = self._top.copy()
        for column in self._columns:
            top.update(column.digest())
        return top.digest()

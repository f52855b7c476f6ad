"""The ODF logical data hash in the core's terms: arrow-digest (`airflow_odf.utils.hashing.arrow_digest`,
shared with the engine, which hashes on the executors) with the core's `Multihash` and `OdfFormatError`.

The logical hash is kamu's arrow-digest `RecordDigestV0<Sha3_256>` (FORMAT-NOTES §D), wrapped as
multihash `arrow0-sha3-256` (0x300016, text form `f9680c00120…`). Parquet files, and the physical
hash, are hashed by `parquet_hashes`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pyarrow as pa

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, Multihash
from airflow_odf.utils.hashing import arrow_digest as shared
from airflow_odf.utils.hashing.arrow_digest import (
    CHUNK_ROWS,
    fixed_raw,
    fixed_width,
    is_type,
    is_varlen,
    unwrap,
)

__all__ = [
    "CHUNK_ROWS",
    "RecordDigest",
    "column_type_bytes",
    "fixed_raw",
    "fixed_width",
    "is_type",
    "is_varlen",
    "logical_hash_of_table",
    "unwrap",
]


@contextlib.contextmanager
def _format_errors() -> Iterator[None]:
    """Data the digest cannot hash is a format error in the core (a clear message, never a traceback)."""
    try:
        yield
    except shared.UnhashableDataError as e:
        raise OdfFormatError(str(e)) from None


class RecordDigest(shared.RecordDigest):
    """arrow-digest `RecordDigestV0<Sha3_256>` raising the core's OdfFormatError."""

    def __init__(self, schema: pa.Schema) -> None:
        with _format_errors():
            super().__init__(schema)

    def update(self, batch: pa.RecordBatch | pa.Table) -> None:
        with _format_errors():
            super().update(batch)

    def update_column(self, index: int, array: pa.Array) -> None:
        with _format_errors():
            super().update_column(index, array)


def column_type_bytes(t: pa.DataType, path: str) -> bytes:
    """What a column hasher of type `t` is fed before any value."""
    with _format_errors():
        return shared.column_type_bytes(t, path)


def logical_hash_of_table(table: pa.Table | pa.RecordBatch) -> Multihash:
    """`arrow0-sha3-256` logical hash of in-memory data (a Table is hashed as its `to_batches()`)."""
    digest = RecordDigest(table.schema)
    digest.update(table)
    return Multihash(ARROW0_SHA3_256, digest.finalize())

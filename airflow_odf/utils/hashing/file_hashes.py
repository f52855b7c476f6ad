"""Both hashes of a data file read as a stream, as the reference computes them: the physical hash (SHA3-256
of the bytes) and the logical hash (arrow-digest over the rows read in batches of 10,000, kamu's
`get_parquet_logical_hash`), in multihash text form. The engine runs this on its executors over the
files it wrote; the core hashes local files with the faster column-parallel `parquet_hashes`, which
gives the same digests."""

from __future__ import annotations

import hashlib
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.utils.hashing.arrow_digest import RecordDigest
from airflow_odf.utils.hashing.multihash import ARROW0_SHA3_256, SHA3_256, multihash_text

PARQUET_BATCH_SIZE = 10_000
"""Rows per batch when reading parquet, as the reference (`get_parquet_logical_hash`)."""


READ_CHUNK = 8 << 20
"""Bytes read at a time for the physical hash: memory stays bounded whatever the file's size."""


def physical_hash_of_stream(stream: BinaryIO | pa.NativeFile, copy_to: BinaryIO | None = None) -> str:
    """`sha3-256` multihash text of the bytes of `stream`, read to its end in chunks of READ_CHUNK (and
    written to `copy_to` on the way, when given: one read of a remote file both hashes and fetches it)."""
    digest = hashlib.sha3_256()
    while chunk := stream.read(READ_CHUNK):
        digest.update(chunk)
        if copy_to is not None:
            copy_to.write(chunk)
    return multihash_text(SHA3_256, digest.digest())


def logical_hash_of_parquet(source: pa.NativeFile | BinaryIO) -> str:
    """`arrow0-sha3-256` multihash text of the rows of the Parquet file `source` (random access), read
    one batch at a time."""
    parquet = pq.ParquetFile(source)
    digest = RecordDigest(parquet.schema_arrow)
    for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_SIZE):
        digest.update(batch)
    return multihash_text(ARROW0_SHA3_256, digest.finalize())

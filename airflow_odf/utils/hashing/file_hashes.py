"""Both hashes of a data file held in memory, as the reference computes them: the physical hash (SHA3-256
of the bytes) and the logical hash (arrow-digest over the rows read in batches of 10,000, kamu's
`get_parquet_logical_hash`), in multihash text form. The engine runs this on its executors over the
files it wrote; the core hashes local files with the faster column-parallel `parquet_hashes`, which
gives the same digests."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.utils.hashing.arrow_digest import RecordDigest
from airflow_odf.utils.hashing.multihash import ARROW0_SHA3_256, SHA3_256, multihash_text

PARQUET_BATCH_SIZE = 10_000
"""Rows per batch when reading parquet, as the reference (`get_parquet_logical_hash`)."""


def physical_hash_of_bytes(data: bytes | memoryview | pa.Buffer) -> str:
    """`sha3-256` multihash text of a file's bytes."""
    return multihash_text(SHA3_256, hashlib.sha3_256(memoryview(data)).digest())


def logical_hash_of_parquet_bytes(data: bytes | pa.Buffer) -> str:
    """`arrow0-sha3-256` multihash text of a Parquet file's rows."""
    parquet = pq.ParquetFile(pa.BufferReader(data))
    digest = RecordDigest(parquet.schema_arrow)
    for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_SIZE):
        digest.update(batch)
    return multihash_text(ARROW0_SHA3_256, digest.finalize())

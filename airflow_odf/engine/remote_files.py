"""What the engine wrote into the repository's bucket (`out_dir` a URI such as `s3a://...`), described on
the executors where the bytes are: for each Parquet file its size, rows, offsets, latest event time,
the columns holding nulls, its physical hash (SHA3-256 of the bytes) and its logical hash
(arrow-digest), computed by the shared hashing code (`airflow_odf.utils.hashing`). The driver gets one
small row per file; the core commits the files by copies inside the bucket, never reading them.

Spark reads each file whole as one row (`binaryFile`, through the cluster's own file system client, so
no credentials reach Python), and the rows are handed to Python one file per Arrow batch: an executor
holds a file's bytes twice at most while hashing it (the row and its Arrow copy), plus one decoded
batch of 10,000 rows. Files above 2 GiB (Spark's limit for one binary value) are refused by Spark.
"""

from __future__ import annotations

import base64
import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.slice_footer import describe_slice
from airflow_odf.utils.engine_json import Vocab
from airflow_odf.utils.hashing.file_hashes import logical_hash_of_parquet_bytes, physical_hash_of_bytes

_DESCRIPTION = (
    "path string, size long, num_rows long, offset_start long, offset_end long, max_event_time string, "
    "null_columns array<string>, physical_hash string, logical_hash string, arrow_schema string"
)
_ARROW_BATCH_RECORDS = "spark.sql.execution.arrow.maxRecordsPerBatch"


def is_uri(path: str) -> bool:
    """Whether `out_dir` names a place in a store (`s3a://...`) rather than a folder on this disk."""
    return "://" in path and not path.startswith("file:")


@dataclass(frozen=True)
class RemoteFile:
    """One written file as the executors described it (`offset_*`, `max_event_time`: data files only)."""

    path: str
    size: int
    num_rows: int
    offset_start: int | None
    offset_end: int | None
    max_event_time: str | None
    null_columns: list[str]
    physical_hash: str
    logical_hash: str
    arrow_schema: str  # base64 of the Arrow IPC schema, without metadata


def describe_written(spark: SparkSession, folder: str, vocab: Vocab | None) -> list[RemoteFile]:
    """The Parquet files Spark wrote under `folder`, described and hashed on the executors; `vocab`:
    they are slices (offsets and event times are read), None: a merge state."""
    files = spark.read.format("binaryFile").option("pathGlobFilter", "*.parquet").load(folder)
    describe = functools.partial(_describe_batches, vocab)
    with _one_file_per_batch(spark):
        rows = files.mapInArrow(describe, _DESCRIPTION).collect()
    if not rows:
        raise EngineInputError("internal", f"Spark wrote no Parquet file into {folder}")
    return [RemoteFile(**row.asDict()) for row in rows]


@contextlib.contextmanager
def _one_file_per_batch(spark: SparkSession) -> Iterator[None]:
    """Arrow batches of one row: one file's bytes in a Python worker at a time."""
    before = spark.conf.get(_ARROW_BATCH_RECORDS, None)
    spark.conf.set(_ARROW_BATCH_RECORDS, "1")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(_ARROW_BATCH_RECORDS)
        else:
            spark.conf.set(_ARROW_BATCH_RECORDS, before)


def _describe_batches(vocab: Vocab | None, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs on the executors: one description per `binaryFile` row (path, content)."""
    for batch in batches:
        paths, contents = batch.column("path"), batch.column("content")
        described = [
            describe_parquet(paths[i].as_py(), contents[i].as_buffer(), vocab) for i in range(batch.num_rows)
        ]
        yield pa.RecordBatch.from_pylist([d.__dict__ for d in described], schema=_ARROW_DESCRIPTION)


_ARROW_DESCRIPTION = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("num_rows", pa.int64()),
        ("offset_start", pa.int64()),
        ("offset_end", pa.int64()),
        ("max_event_time", pa.string()),
        ("null_columns", pa.list_(pa.string())),
        ("physical_hash", pa.string()),
        ("logical_hash", pa.string()),
        ("arrow_schema", pa.string()),
    ]
)


def describe_parquet(path: str, data: pa.Buffer, vocab: Vocab | None) -> RemoteFile:
    """A Parquet file's description from its bytes: the footer's numbers (the rows' when the footer has
    no statistics), the columns with nulls, and both hashes."""
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    start = end = max_event_time = None
    if vocab is not None and meta.num_rows:
        described = describe_slice(path, meta, vocab, pa.BufferReader(data))
        start, end, max_event_time = described.offset_start, described.offset_end, described.max_event_time
    schema = meta.schema.to_arrow_schema().remove_metadata()
    return RemoteFile(
        path=path,
        size=data.size,
        num_rows=meta.num_rows,
        offset_start=start,
        offset_end=end,
        max_event_time=max_event_time,
        null_columns=_null_columns(data, meta, schema),
        physical_hash=physical_hash_of_bytes(data),
        logical_hash=logical_hash_of_parquet_bytes(data),
        arrow_schema=base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"),
    )


def _null_columns(data: pa.Buffer, meta: pq.FileMetaData, schema: pa.Schema) -> list[str]:
    """The top-level columns holding a null: from the footer's counts when every column is one Parquet
    column with statistics, else from the values."""
    flat = meta.num_columns == len(schema)
    counts: list[int | None] = [0] * len(schema) if flat else []
    for rg in range(meta.num_row_groups if flat else 0):
        for i in range(meta.num_columns):
            stats = meta.row_group(rg).column(i).statistics
            known = stats is not None and stats.null_count is not None and counts[i] is not None
            counts[i] = counts[i] + stats.null_count if known else None  # type: ignore[operator,union-attr]
    if flat and all(c is not None for c in counts):
        return [name for name, count in zip(schema.names, counts, strict=True) if count]
    table = pq.read_table(pa.BufferReader(data))
    return [name for name, column in zip(table.column_names, table.columns, strict=True) if column.null_count]

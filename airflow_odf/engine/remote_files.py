"""What the engine wrote into the repository's bucket (`out_dir` a URI such as `s3a://...`), described on
the executors where the bytes are: for each Parquet file its size, rows, offsets, latest event time,
the columns holding nulls, its physical hash (SHA3-256 of the bytes) and its logical hash
(arrow-digest), computed by the shared hashing code (`airflow_odf.utils.hashing`). The driver gets one
small row per file; the core commits the files by copies inside the bucket, never reading them.

Spark lists the files (its own file system client); each file is then one task, whose Python opens it
through `executor_fs` and reads it once, as a stream: the physical hash in chunks on its way to a
temporary copy on the executor's disk, then the logical hash a batch of 10,000 rows at a time from that
copy, so an executor's memory is bounded by a row group, not by the file.
"""

from __future__ import annotations

import base64
import functools
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.executor_fs import StoreAccess, store_access
from airflow_odf.engine.slice_footer import describe_slice
from airflow_odf.utils.engine_json import Vocab
from airflow_odf.utils.hashing.file_hashes import (
    PARQUET_BATCH_SIZE,
    logical_hash_of_parquet,
    physical_hash_of_stream,
)

DESCRIPTION = (
    "path string, size long, num_rows long, offset_start long, offset_end long, max_event_time string, "
    "null_columns array<string>, physical_hash string, logical_hash string, arrow_schema string"
)


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
    """The Parquet files Spark wrote under `folder`, described and hashed on the executors (a task per
    file); `vocab`: they are slices (offsets and event times are read), None: a merge state."""
    listing = spark.read.format("binaryFile").option("pathGlobFilter", "*.parquet").load(folder)
    paths = [row.path for row in listing.select("path").collect()]  # no content is read
    if not paths:
        raise EngineInputError("internal", f"Spark wrote no Parquet file into {folder}")
    describe = functools.partial(_describe_batches, store_access(spark), vocab)
    files = spark.createDataFrame([(path,) for path in paths], "path string").repartition(len(paths))
    return [RemoteFile(**row.asDict()) for row in files.mapInArrow(describe, DESCRIPTION).collect()]


def parquet_footer_schema(spark: SparkSession, uri: str) -> pa.Schema | None:
    """The Arrow schema in the footer of a Parquet file in the store, read on an executor (where the
    store's keys are, also when this client cannot read them: Spark Connect); None when it is no
    readable Parquet file."""
    read = functools.partial(_footer_schemas, store_access(spark))
    files = spark.createDataFrame([(uri,)], "path string")
    [row] = files.mapInArrow(read, "arrow_schema string").collect()
    if row.arrow_schema is None:
        return None
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(row.arrow_schema)))


def _footer_schemas(access: StoreAccess, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs on the executors: each path's footer schema (Arrow IPC, base64), or null."""
    for batch in batches:
        found: list[str | None] = []
        for uri in batch.column("path").to_pylist():
            try:
                fs, path = access.open(uri)
                with fs.open_input_file(path) as file:
                    schema = pq.read_schema(file)
                found.append(base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"))
            except (OSError, pa.ArrowException):
                found.append(None)
        yield pa.RecordBatch.from_pydict({"arrow_schema": found}, schema=_ARROW_FOOTER)


_ARROW_FOOTER = pa.schema([("arrow_schema", pa.string())])


def _describe_batches(
    access: StoreAccess, vocab: Vocab | None, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Runs on the executors: one description per path, the file opened where it is."""
    for batch in batches:
        described = [describe_parquet(path, access, vocab) for path in batch.column("path").to_pylist()]
        yield pa.RecordBatch.from_pylist([d.__dict__ for d in described], schema=ARROW_DESCRIPTION)


ARROW_DESCRIPTION = pa.schema(
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


def describe_parquet(uri: str, access: StoreAccess, vocab: Vocab | None) -> RemoteFile:
    """A Parquet file's description: the footer's numbers (the rows' when the footer has no
    statistics), the columns with nulls, and both hashes. The file is read from the store once, as a
    stream that the physical hash sees on its way into a temporary copy on the executor's disk; the rest
    is read from that copy (memory-mapped: bounded by what the reader touches, not by the file)."""
    fs, path = access.open(uri)
    with tempfile.TemporaryDirectory(prefix="odf-describe-", dir=executor_scratch()) as folder:
        copy = os.path.join(folder, "file.parquet")
        with fs.open_input_stream(path) as stream, open(copy, "wb") as sink:
            physical_hash = physical_hash_of_stream(stream, copy_to=sink)
        with pa.memory_map(copy) as file:
            meta = pq.ParquetFile(file).metadata
            start = end = max_event_time = None
            if vocab is not None and meta.num_rows:
                described = describe_slice(uri, meta, vocab, file)
                start, end = described.offset_start, described.offset_end
                max_event_time = described.max_event_time
            schema = meta.schema.to_arrow_schema().remove_metadata()
            nulls = null_columns(file, meta, schema)
            logical_hash = logical_hash_of_parquet(file)
            size = file.size()
    return RemoteFile(
        path=uri,
        size=size,
        num_rows=meta.num_rows,
        offset_start=start,
        offset_end=end,
        max_event_time=max_event_time,
        null_columns=nulls,
        physical_hash=physical_hash,
        logical_hash=logical_hash,
        arrow_schema=base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"),
    )


def executor_scratch() -> str | None:
    """Where Spark keeps the executor's scratch files (`SPARK_LOCAL_DIRS`, as the worker sets it for its
    executors), else the system's temporary directory."""
    return (os.environ.get("SPARK_LOCAL_DIRS") or "").split(",")[0] or None


def null_columns(file: pa.NativeFile, meta: pq.FileMetaData, schema: pa.Schema) -> list[str]:
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
    nulls = [0] * len(schema)
    for batch in pq.ParquetFile(file).iter_batches(batch_size=PARQUET_BATCH_SIZE):
        nulls = [n + column.null_count for n, column in zip(nulls, batch.columns, strict=True)]
    return [name for name, count in zip(schema.names, nulls, strict=True) if count]

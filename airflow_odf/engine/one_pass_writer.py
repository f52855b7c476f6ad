"""The ingest's slices written into a bucket in one pass: each sorted partition is written, counted and
hashed as it streams by, with no counting pass before the write and no reading back after it.

Offsets are contiguous across partitions, so a partition's first offset is known only once the rows of
every partition before it are counted. The partitions therefore run as one barrier stage (all tasks at
once, `mapInArrow(barrier=True)`): each task streams its sorted Arrow batches into Parquet parts on its
executor's own disk (pyarrow; a part per slice, a row group at a time in memory), counting the rows and
feeding the data columns to the logical hash (arrow-digest) as they pass; the tasks then exchange their
row counts (`BarrierTaskContext.allGather`), which gives each its base offset. Each part becomes its
slice by a splice (`parquet_splice`): the part's column chunks copied as they are, next to `offset` and
`system_time` columns written directly from the base (nothing decoded or encoded again), whose digests
follow from the base and the count alone. The slice is uploaded into the bucket (`executor_fs`) with its
SHA3-256 computed over the bytes on their way; the driver gets one small row per slice (`RemoteFile`).

The result is the one of `with_system_columns` + `write_slices_in_place` (records, offsets, op codes,
event and system times, column types and nullability, logical hashes, slice boundaries with
`max_records_per_slice`); only the file layout (row groups, encodings, creator), and so the physical
hash, differ. Where that cannot be promised the caller takes that path instead (`refusal`): a barrier
stage needs a free task slot per partition, and nested columns are left to Spark's writer (the logical
hash of structs depends on batch boundaries, list statistics on the writer).

A failed task fails the stage, and so the request: what it uploaded stays under the operation's staging
folder, which the core never commits without the engine's response (`odf gc` removes it).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.executor_fs import StoreAccess, store_access
from airflow_odf.engine.parquet_splice import (
    INT64,
    TIMESTAMP_UTC_MILLIS,
    ParquetSource,
    Side,
    SteppedColumn,
    required_element,
    splice,
    write_stepped_columns,
)
from airflow_odf.engine.py4j_errors import Py4JError, Py4JJavaError
from airflow_odf.engine.remote_files import (
    ARROW_DESCRIPTION,
    DESCRIPTION,
    RemoteFile,
    executor_scratch,
    null_columns,
)
from airflow_odf.engine.session import default_parallelism, is_connect
from airflow_odf.engine.slice_footer import WrittenSlice, describe_slice
from airflow_odf.engine.spark_types import spark_to_arrow
from airflow_odf.engine.writer import slices_of
from airflow_odf.utils.engine_json import Vocab
from airflow_odf.utils.hashing.arrow_digest import CHUNK_ROWS, RecordDigest
from airflow_odf.utils.hashing.file_hashes import physical_hash_of_stream
from airflow_odf.utils.hashing.multihash import ARROW0_SHA3_256, multihash_text

ENABLED = True
"""Whether an in-place ingest takes this path when it may (off: `with_system_columns` +
`write_slices_in_place`, the path it must match; tests and the benchmark compare the two)."""

TURNED_OFF = "turned off"
_ROW_GROUP_BYTES = 64 * 1024 * 1024  # Arrow bytes a task holds before it writes them as a row group
_EXECUTORS_WAIT = 30.0  # seconds, as Spark's own wait for executors (`maxRegisteredResourcesWaitingTime`)
_MORE_EXECUTORS_WAIT = 3.0
_FAILURE_MARK = "odf-one-pass-failure: "
_FAILURE = re.compile(re.escape(_FAILURE_MARK) + r"(.*)")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"
_SPARK_VERSION = b"org.apache.spark.version"


def refusal(spark: SparkSession, frame: DataFrame, num_partitions: int) -> str | None:
    """Why the rows of `frame` (`op`, event time, data columns; `num_partitions` sorted partitions)
    cannot be written in one pass, or None when they can."""
    if not ENABLED:
        return TURNED_OFF
    nested = [
        f.name for f in frame.schema.fields if isinstance(f.dataType, (T.StructType, T.ArrayType, T.MapType))
    ]
    if nested:
        return f"nested columns ({', '.join(nested)}) are written by Spark's writer"
    untyped = [f.name for f in frame.schema.fields if isinstance(f.dataType, T.NullType)]
    if untyped:  # the two-pass path reports what the logical hash makes of them
        return f"columns of no type ({', '.join(untyped)})"
    slots = task_slots(spark, num_partitions) if num_partitions > 1 else 1  # one partition: one plain task
    if num_partitions > slots:
        return (
            f"{num_partitions} partitions need as many free task slots at once (a barrier stage); "
            f"the cluster has {slots}"
        )
    return None


def task_slots(spark: SparkSession, wanted: int) -> int:
    """How many tasks the cluster runs at once (what Spark checks a barrier stage against): the
    scheduler's count where this process has the SparkContext, else the default parallelism. An
    application that has just started may have no executor yet: then it waits for them (at most
    `_EXECUTORS_WAIT` seconds), and for `_MORE_EXECUTORS_WAIT` more once one is there."""
    if is_connect(spark):
        return default_parallelism(spark)
    sc = spark.sparkContext._jsc.sc()
    try:
        profile = sc.resourceProfileManager().defaultResourceProfile()
    except Py4JError:  # another Spark's internals: its public figure
        return default_parallelism(spark)
    started, first_seen = time.monotonic(), None
    while True:
        slots = int(sc.maxNumConcurrentTasks(profile))
        now = time.monotonic()
        if slots and first_seen is None:
            first_seen = now
        waited_enough = (first_seen is not None and now - first_seen >= _MORE_EXECUTORS_WAIT) or (
            now - started >= _EXECUTORS_WAIT
        )
        if slots >= wanted or waited_enough:
            return slots
        time.sleep(0.5)


@dataclass(frozen=True)
class _Plan:
    """What every task needs (shipped with it): where the slices go and how they are built."""

    access: StoreAccess
    target: str  # the slices' folder in the store
    vocab: Vocab
    part_schema: bytes  # Arrow IPC: op, event time, data columns, as Spark's writer types them
    slice_schema: bytes  # the same with offset and system_time, in the slice's order
    metadata: dict[bytes, bytes]
    next_offset: int
    system_time_ms: int
    max_records: int | None
    barrier: bool


def write_in_one_pass(
    frame: DataFrame,
    out_dir: str,
    *,
    vocab: Vocab,
    system_time: datetime,
    next_offset: int,
    num_partitions: int,
    max_records_per_slice: int | None,
) -> tuple[list[WrittenSlice], str]:
    """Writes `frame` — `op` (Int32), event time, data columns, range-partitioned and sorted within its
    partitions, `num_partitions` of them at most — as slices under `<out_dir>/data`, offsets from
    `next_offset` in partition order. Returns the slices (hashes included) in offset order and the
    output's Arrow schema (base64 of its IPC message), as `write_slices_in_place` does."""
    spark = frame.sparkSession
    part_struct = frame.schema
    slice_struct = T.StructType(
        [
            T.StructField(vocab.offset_column, T.LongType(), False),
            part_struct.fields[0],
            T.StructField(vocab.system_time_column, T.TimestampType(), False),
            *part_struct.fields[1:],
        ]
    )
    slice_schema = spark_to_arrow(slice_struct)
    plan = _Plan(
        access=store_access(spark),
        target=f"{out_dir.rstrip('/')}/data",
        vocab=vocab,
        part_schema=spark_to_arrow(part_struct).serialize().to_pybytes(),
        slice_schema=slice_schema.serialize().to_pybytes(),
        metadata={  # what Spark's writer records, so that Spark reads the slice with its own types back
            _SPARK_VERSION: spark.version.encode(),
            _SPARK_ROW_METADATA: json.dumps(slice_struct.jsonValue(), separators=(",", ":")).encode(),
        },
        next_offset=next_offset,
        system_time_ms=(system_time - _EPOCH) // timedelta(milliseconds=1),
        max_records=max_records_per_slice or None,
        barrier=num_partitions > 1,
    )
    write = functools.partial(_write_partition, plan)
    try:
        rows = frame.mapInArrow(write, DESCRIPTION, barrier=plan.barrier).collect()
    except (PySparkException, Py4JJavaError) as e:
        failure = _FAILURE.search(str(e))  # a task's own error (the store refused a slice, a full disk)
        if failure is None:
            raise
        raise EngineInputError("engine", failure.group(1).strip()) from None
    files = [RemoteFile(**row.asDict()) for row in rows]
    return slices_of(files), base64.b64encode(plan.slice_schema).decode("ascii")


# ---------------------------------------------------------------------------------------------------
# On the executors
# ---------------------------------------------------------------------------------------------------


@dataclass
class _Part:
    """A slice's rows on the executor's disk, without the offset and system time columns."""

    path: str
    writer: pq.ParquetWriter
    digest: RecordDigest
    rows: int = 0
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_bytes: int = 0


class _Parts:
    """The task's sorted rows as parts of at most `max_records` rows each, written a row group at a
    time, their data columns fed to each part's logical hash as they are written."""

    def __init__(self, folder: str, plan: _Plan) -> None:
        self.folder = folder
        self.plan = plan
        self.schema = pa.ipc.read_schema(pa.py_buffer(plan.part_schema))
        self.slice_schema = pa.ipc.read_schema(pa.py_buffer(plan.slice_schema))
        # the part's columns in the slice: op is its second column, event time and data from its fourth
        self.slice_index = [1, *range(3, 3 + len(self.schema) - 1)]
        self.done: list[_Part] = []
        self.current: _Part | None = None

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.done) + (self.current.rows if self.current else 0)

    def add(self, batch: pa.RecordBatch) -> None:
        batch = _conformed(batch, self.schema)
        while batch.num_rows:
            part = self.current or self._open()
            room = batch.num_rows
            if self.plan.max_records:
                room = min(room, self.plan.max_records - part.rows)
            piece, batch = batch.slice(0, room), batch.slice(room)
            part.pending.append(piece)
            part.pending_bytes += piece.nbytes
            part.rows += piece.num_rows
            if part.pending_bytes >= _ROW_GROUP_BYTES:
                self._flush(part)
            if self.plan.max_records and part.rows >= self.plan.max_records:
                self._close(part)

    def finish(self) -> list[_Part]:
        if self.current is not None:
            self._close(self.current)
        return self.done

    def _open(self) -> _Part:
        path = os.path.join(self.folder, f"part-{len(self.done)}.parquet")
        writer = pq.ParquetWriter(path, self.schema, compression="snappy", store_schema=False)
        self.current = _Part(path, writer, RecordDigest(self.slice_schema))
        return self.current

    def _flush(self, part: _Part) -> None:
        if not part.pending:
            return
        table = pa.Table.from_batches(part.pending, schema=self.schema)
        part.pending, part.pending_bytes = [], 0
        for column, index in zip(table.columns, self.slice_index, strict=True):
            for chunk in column.chunks:
                part.digest.update_column(index, chunk)
        part.writer.write_table(table, row_group_size=table.num_rows)

    def _close(self, part: _Part) -> None:
        self._flush(part)
        part.writer.close()
        self.done.append(part)
        self.current = None


def _conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Spark's Arrow batch with the types its Parquet writer gives the columns: timestamps cut to
    milliseconds as it cuts them (towards the past), strings and binaries in their plain layout."""
    columns = []
    for column, target in zip(batch.columns, schema, strict=True):
        if column.type != target.type:
            if pa.types.is_timestamp(column.type) and pa.types.is_timestamp(target.type):
                column = pc.floor_temporal(column, unit="millisecond")
            column = column.cast(target.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _write_partition(plan: _Plan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs on the executors, one call per partition: its slices written into the store, described."""
    from pyspark import BarrierTaskContext, TaskContext

    context = BarrierTaskContext.get() if plan.barrier else TaskContext.get()
    partition = context.partitionId()
    try:
        described = _write_slices(plan, context, partition, batches)
    except (OSError, pa.ArrowException) as e:  # one line for the driver to report (`_FAILURE`)
        message = " ".join(str(e).split())
        raise RuntimeError(f"{_FAILURE_MARK}writing the slices of partition {partition}: {message}") from None
    yield pa.RecordBatch.from_pylist(described, schema=ARROW_DESCRIPTION)


def _write_slices(
    plan: _Plan, context: Any, partition: int, batches: Iterator[pa.RecordBatch]
) -> list[dict[str, Any]]:
    """The partition's slices written into the store; their descriptions (`RemoteFile` fields)."""
    with tempfile.TemporaryDirectory(prefix="odf-one-pass-", dir=executor_scratch()) as folder:
        parts = _Parts(folder, plan)
        for batch in batches:
            parts.add(batch)
        done = parts.finish()
        counts = {partition: sum(p.rows for p in done)}
        if plan.barrier:  # every partition's count, from every task
            messages = context.allGather(json.dumps([partition, counts[partition]]))
            counts = dict(json.loads(message) for message in messages)
        first = plan.next_offset + sum(rows for p, rows in counts.items() if p < partition)
        described = []
        for number, part in enumerate(done):
            uri = f"{plan.target}/part-{partition:05d}-{number:05d}.parquet"
            described.append(_slice(plan, parts.slice_schema, part, uri, first, folder).__dict__)
            first += part.rows
    return described


def _slice(plan: _Plan, schema: pa.Schema, part: _Part, uri: str, first: int, folder: str) -> RemoteFile:
    """The part spliced with its offsets (from `first`) and system time into a slice, uploaded to `uri`
    while its physical hash is computed; its description."""
    vocab = plan.vocab
    source = ParquetSource.open(part.path)
    row_counts = [source.num_rows(i) for i in range(len(source.row_groups))]
    added = [
        SteppedColumn(required_element(vocab.offset_column, INT64), first, 1),
        SteppedColumn(
            required_element(vocab.system_time_column, INT64, *TIMESTAMP_UTC_MILLIS), plan.system_time_ms, 0
        ),
    ]
    columns = write_stepped_columns(os.path.join(folder, "system-columns.parquet"), added, row_counts)
    sides = [
        Side(source, [(source, i) for i in range(len(row_counts))]),
        Side(columns, [(columns, i) for i in range(len(row_counts))]),
    ]
    order = [(1, 0), (0, 0), (1, 1), *[(0, i) for i in range(1, len(source.fields))]]
    path = os.path.join(folder, "slice.parquet")
    splice(path, sides, order, key_value_metadata=plan.metadata)
    _hash_system_columns(part.digest, part.rows, first, plan.system_time_ms)
    meta = pq.read_metadata(path)
    described = describe_slice(uri, meta, vocab, path)
    fs, key = plan.access.open(uri)
    with open(path, "rb") as file, fs.open_output_stream(key) as out:
        physical_hash = physical_hash_of_stream(file, copy_to=out)
    with pa.memory_map(path) as file:
        nulls = null_columns(file, meta, schema)
    size = os.path.getsize(path)
    os.remove(path)
    os.remove(part.path)
    return RemoteFile(
        path=uri,
        size=size,
        num_rows=part.rows,
        offset_start=described.offset_start,
        offset_end=described.offset_end,
        max_event_time=described.max_event_time,
        null_columns=nulls,
        physical_hash=physical_hash,
        logical_hash=multihash_text(ARROW0_SHA3_256, part.digest.finalize()),
        arrow_schema=base64.b64encode(plan.slice_schema).decode("ascii"),
    )


def _hash_system_columns(digest: RecordDigest, rows: int, first: int, system_time_ms: int) -> None:
    """Feeds the offsets `first ..` and the constant system time of `rows` rows to the digest: the
    bytes arrow-digest hashes of such columns (Int64 and Timestamp(ms) values, little-endian)."""
    constant = np.full(min(rows, CHUNK_ROWS), system_time_ms, dtype="<i8")
    for start in range(0, rows, CHUNK_ROWS):
        end = min(rows, start + CHUNK_ROWS)
        offsets = np.arange(first + start, first + end, dtype="<i8")
        digest.update_column(0, pa.array(offsets, pa.int64()))
        digest.update_column(2, pa.array(constant[: end - start]).view(pa.timestamp("ms", tz="UTC")))

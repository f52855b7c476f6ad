"""System columns, offsets and slice files: the last step of every ingest and transform, as the reference
writes them.

Column order and types follow the reference: `offset` Int64, `op` Int32, `system_time` and `event_time`
Timestamp(ms, UTC) (or Date for event time), then the data columns.

Ingest (`with_system_columns` + `write_slices`): offsets follow a total sort order and are contiguous
from `next_offset`; they are assigned without funnelling the rows through one partition: the sorted
frame is range-partitioned, each partition is counted, and each row's offset is its partition's base
plus its position in the partition. Each written file holds a contiguous offset range and becomes one
slice. Into a bucket the ingest takes the same sorted partitions (`sorted_rows`) and writes, counts
and hashes them in one pass instead (`one_pass_writer`), where it can.

Transform (`write_in_frame_order`): offsets follow the frame's own order (partition by partition, in
partition order or in the order of keys the caller gives) and the output is one slice. Spark writes the
partitions in parallel as part files; their column chunks are then spliced, as they are, in that order
with the system columns into the slice (`parquet_splice`): no sort, no shuffle, no counting pass, and no
decoding or encoding of the data again.

The numbers the core needs are read from the Parquet footers, not by another pass over the data.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_odf.engine import thrift_compact as tc
from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.parquet_splice import (
    INT32,
    INT64,
    TIMESTAMP_UTC_MILLIS,
    ParquetSource,
    Side,
    SpliceError,
    SteppedColumn,
    required_element,
    splice,
    write_stepped_columns,
)
from airflow_odf.engine.partition_order import PartitionKey
from airflow_odf.engine.parts_publisher import PartsPublisher, PartsTarget, part_numbers
from airflow_odf.engine.remote_files import RemoteFile, describe_written
from airflow_odf.engine.session import default_parallelism, is_connect, persist_for_request
from airflow_odf.engine.slice_footer import WrittenSlice, describe_slice
from airflow_odf.engine.spark_types import quote_identifier
from airflow_odf.utils.engine_json import Vocab

SOURCE_EVENT_TIME_COLUMN = "__odf_source_event_time"
_PARTITION = "__odf_partition"
_POSITION = "__odf_position"
# pyarrow's largest row group (the system columns' row groups match the parts')
_MAX_ROW_GROUP_ROWS = 64 * 1024 * 1024


def parse_time(text: str) -> datetime:
    """An RFC 3339 time of the contract as an aware UTC datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def normalize_timestamps(df: DataFrame) -> DataFrame:
    """Timestamps without a zone are read as UTC instants (Parquet output is then Timestamp(ms, UTC)).
    A frame without any is returned as it is (its schema stays known: no round trip to Spark)."""
    if not any(isinstance(f.dataType, T.TimestampNTZType) for f in df.schema.fields):
        return df
    casts = [
        F.col(f"`{f.name}`").cast(T.TimestampType()).alias(f.name)
        if isinstance(f.dataType, T.TimestampNTZType)
        else F.col(f"`{f.name}`")
        for f in df.schema.fields
    ]
    return df.select(*casts)


def with_system_columns(
    df: DataFrame,
    sort_columns: list[Column],
    *,
    vocab: Vocab,
    system_time: datetime,
    next_offset: int,
    num_partitions: int = 1,
    gather: bool = False,
    drop_columns: tuple[str, ...] = (),
) -> DataFrame:
    """The final rows: event time coalesced with the source's, one system time, contiguous offsets.

    `num_partitions` range partitions are sorted in parallel; each becomes at least one slice file. One
    partition with `gather` (for inputs too small to be worth reading in parallel) takes the rows into
    one partition where they are (`coalesce(1)`): no shuffle, and no planning of the query beforehand
    just to learn its partition count, the dearest step of a tiny ingest (first-use planning and code
    generation). Without `gather`, a frame that is already one partition is sorted in place, others are
    shuffled into one, so that a large read stays parallel (on Spark Connect, whose frames do not tell
    their partition count, always shuffled: the same rows in the same order). With several partitions,
    the sorted rows are persisted — they are counted, written and folded into the merge state — until the
    request ends.
    """
    ordered = sorted_rows(
        df, sort_columns, vocab=vocab, num_partitions=num_partitions, gather=gather, drop_columns=drop_columns
    )
    return numbered(
        ordered, vocab=vocab, system_time=system_time, next_offset=next_offset, count=num_partitions > 1
    )


def numbered(
    ordered: DataFrame, *, vocab: Vocab, system_time: datetime, next_offset: int, count: bool
) -> DataFrame:
    """`sorted_rows` with their offsets (contiguous from `next_offset`, partition by partition) and
    system time. `count`: the frame may have several partitions, which are persisted and counted for
    their bases (else it has one, whose base is the next offset)."""
    ordered = ordered.withColumn(_PARTITION, F.spark_partition_id())
    ordered = ordered.withColumn(
        _POSITION,
        F.monotonically_increasing_id() - F.shiftleft(F.col(_PARTITION).cast("long"), 33),
    )
    counts = {0: 0}  # one partition: its base is the next offset, no counting pass needed
    if count:
        ordered = persist_for_request(ordered)
        counts = dict(ordered.groupBy(_PARTITION).count().collect())
    base, bases = next_offset, {}
    for partition in sorted(counts):
        bases[partition] = base
        base += counts[partition]
    partition_base = F.lit(next_offset).cast("long")
    for partition, start in bases.items():
        partition_base = F.when(F.col(_PARTITION) == partition, F.lit(start)).otherwise(partition_base)
    op, et = vocab.operation_type_column, vocab.event_time_column
    return ordered.select(
        (partition_base + F.col(_POSITION)).cast("long").alias(vocab.offset_column),
        F.col(f"`{op}`"),
        F.lit(_system_time_ms(system_time)).cast(T.TimestampType()).alias(vocab.system_time_column),
        F.col(f"`{et}`"),
        *[F.col(f"`{c}`") for c in ordered.columns if c not in (op, et, _PARTITION, _POSITION)],
    )


def sorted_rows(
    df: DataFrame,
    sort_columns: list[Column],
    *,
    vocab: Vocab,
    num_partitions: int,
    gather: bool,
    drop_columns: tuple[str, ...] = (),
) -> DataFrame:
    """The rows as `with_system_columns` numbers them: `op` (Int32), the event time (coalesced with the
    source's) and the data columns, range-partitioned by `sort_columns` and sorted within partitions
    (see there for `num_partitions` and `gather`). Also what `one_pass_writer` writes."""
    df = with_event_time(df, vocab)
    if num_partitions <= 1 and (
        gather or (not is_connect(df.sparkSession) and df.rdd.getNumPartitions() == 1)
    ):
        df = df.coalesce(1)
    else:
        df = df.repartitionByRange(max(1, num_partitions), *sort_columns)
    ordered = df.sortWithinPartitions(*sort_columns)
    hidden = {SOURCE_EVENT_TIME_COLUMN, *drop_columns}
    op, et = vocab.operation_type_column, vocab.event_time_column
    return ordered.select(
        F.col(f"`{op}`").cast("int").alias(op),
        F.col(f"`{et}`"),
        *[F.col(f"`{c}`") for c in df.columns if c not in hidden and c not in (op, et)],
    )


def with_event_time(df: DataFrame, vocab: Vocab) -> DataFrame:
    """The rows' event time coalesced with their source's (the column holding it stays)."""
    et = F.col(f"`{vocab.event_time_column}`")
    if SOURCE_EVENT_TIME_COLUMN in df.columns:
        source_et = F.col(SOURCE_EVENT_TIME_COLUMN)
        if isinstance(df.schema[vocab.event_time_column].dataType, T.DateType):
            source_et = F.to_date(source_et)
        et = F.coalesce(et, source_et)
    return df.withColumn(vocab.event_time_column, et)


def _system_time_ms(system_time: datetime) -> datetime:
    return system_time.replace(microsecond=system_time.microsecond // 1000 * 1000)


def write_in_frame_order(
    df: DataFrame,
    out_dir: str,
    *,
    vocab: Vocab,
    system_time: datetime,
    next_offset: int,
    partition_keys: Future[list[PartitionKey | None] | None] | None = None,
    publish_to: PartsTarget | None = None,
    accept: Callable[[list[str]], bool] | None = None,
) -> tuple[list[WrittenSlice], str] | None:
    """Writes `df` (event time, data columns, optionally `op`) as one slice, in the frame's order.

    The frame's order is partition by partition — in partition order, or in the order of the partitions'
    `partition_keys` when given (a future: they may be read while Spark writes; if they turn out None,
    the order is unknown, nothing is assembled and None is returned) — each partition's rows in the
    order Spark produces them. Offsets are contiguous from `next_offset` in that order. Spark writes the
    partitions in parallel into part files; their row groups are then spliced in that order into the
    slice's file, next to the added `offset` (its position plus `next_offset`), `system_time` and, when
    the frame has none, `op` = 0 (+A): no row goes through one partition, no sort, no shuffle and no
    counting pass. The file is Spark's own but for the system columns: its encodings, its schema
    metadata, snappy. Returns the slice (none when the frame is empty) and a file holding the schema.
    `publish_to`: where the parts are published as Spark commits them, with `partition_keys` only
    (`parts_publisher`). `accept`: given the part files in the slice's order, whether to assemble them
    (if not, nothing is assembled and None is returned).
    """
    frame = _parts_frame(df, vocab)
    parts_dir = os.path.join(out_dir, "parts")
    # the slice keeps these column chunks: snappy, row groups no longer than the system columns' writer
    # allows, and no dictionary where one would overflow and be thrown away (Spark's writer tries, at a
    # cost: a third of its time in the benchmark)
    parts_writer = frame.write.mode("overwrite").option("parquet.block.row.count.limit", _MAX_ROW_GROUP_ROWS)
    for name in _plain_columns(df.schema):  # the frame's types (its own schema would cost a round trip)
        parts_writer = parts_writer.option(f"parquet.enable.dictionary#{name}", "false")
    publisher = None
    if publish_to is not None and partition_keys is not None:
        cores = default_parallelism(frame.sparkSession)
        publisher = PartsPublisher(parts_dir, publish_to, partition_keys, cores)
    with publisher or contextlib.nullcontext():
        parts_writer.parquet(parts_dir)
    keys = None if partition_keys is None else partition_keys.result()
    parts = None if partition_keys is not None and keys is None else _part_files(parts_dir, keys)
    if parts is not None and accept is not None and not accept(parts):
        parts = None
    if parts is None:  # the partitions' order is unknown, or not the one wanted
        shutil.rmtree(parts_dir, ignore_errors=True)
        return None
    target = os.path.join(out_dir, "data")
    os.makedirs(target, exist_ok=True)
    path = os.path.join(target, "slice.parquet")
    rows = _assemble(parts, path, vocab, _system_time_ms(system_time), next_offset)
    shutil.rmtree(parts_dir, ignore_errors=True)
    if not rows:
        return [], path  # a file with the schema and no row group
    return [describe_slice(path, pq.ParquetFile(path).metadata, vocab)], path


def write_in_frame_order_in_place(
    df: DataFrame, out_dir: str, *, vocab: Vocab, system_time: datetime, next_offset: int
) -> tuple[list[WrittenSlice], str]:
    """`write_in_frame_order` into a bucket (`out_dir` a URI): the partitions, in partition order, are
    concatenated into one task (`coalesce(1)`: no shuffle, the frame's order kept) that adds the system
    columns and writes the one slice there; the executors then describe and hash it (`remote_files`).
    Returns the slice (none when the frame is empty) and the output's Arrow schema (base64)."""
    frame = _parts_frame(df, vocab).coalesce(1)
    op = vocab.operation_type_column
    offset = (F.lit(next_offset).cast("long") + F.monotonically_increasing_id()).cast("long")
    written = frame.select(
        offset.alias(vocab.offset_column),
        F.col(quote_identifier(op)) if op in frame.columns else F.lit(0).cast("int").alias(op),
        F.lit(_system_time_ms(system_time)).cast(T.TimestampType()).alias(vocab.system_time_column),
        *[F.col(quote_identifier(c)) for c in frame.columns if c != op],
    )
    target = f"{out_dir.rstrip('/')}/data"
    _write_parquet(written, target, None)
    files = describe_written(df.sparkSession, target, vocab)
    return slices_of(files), min(files, key=lambda f: f.path).arrow_schema


def _parts_frame(df: DataFrame, vocab: Vocab) -> DataFrame:
    """`df` as the parts hold it: `op` (Int32) if the frame has one, the event time, the data columns.
    A frame in that order already is taken as it is; another is reordered in one SQL select: 10 JVM
    round trips before the job starts, where a select of column objects costs about 100 (0.03 s)."""
    columns = [
        vocab.event_time_column,
        *(c for c in df.columns if c not in (vocab.operation_type_column, vocab.event_time_column)),
    ]
    if vocab.operation_type_column not in df.columns:
        return df if df.columns == columns else df.selectExpr(*map(quote_identifier, columns))
    op = quote_identifier(vocab.operation_type_column)
    return df.selectExpr(f"CAST({op} AS INT) AS {op}", *map(quote_identifier, columns))


def _plain_columns(schema: T.StructType) -> list[str]:
    """The top-level columns of 64-bit numbers, floats and timestamps: values that seldom repeat, so a
    dictionary of them outgrows its page and is dropped after it was built."""
    wide = (T.LongType, T.DoubleType, T.FloatType, T.TimestampType, T.TimestampNTZType)
    return [
        f.name
        for f in schema.fields
        if isinstance(f.dataType, wide)
        or (isinstance(f.dataType, T.DecimalType) and f.dataType.precision > 9)
    ]


def _part_files(parts_dir: str, partition_keys: Sequence[PartitionKey | None] | None) -> list[str] | None:
    """Spark's part files in partition order, or in their partitions' key order (a task writes
    `part-<partition>-<job>[-c<n>]...parquet`); None when a partition without a key (which must hold
    no rows) wrote rows: the order is then unknown."""
    keyed = []
    for path in Path(parts_dir).glob("*.parquet"):
        numbers = part_numbers(path.name)
        if numbers is None:
            raise EngineInputError("internal", f"unexpected file name from Spark's writer: {path}")
        partition, file = numbers
        if partition_keys is not None and partition >= len(partition_keys):
            raise EngineInputError(
                "internal", f"Spark wrote partition {partition}; the plan showed {len(partition_keys)}"
            )
        key = partition_keys[partition] if partition_keys is not None else (partition,)
        if key is None and pq.read_metadata(path).num_rows:
            return None
        # a partition without a key wrote no rows: last (only its schema may be needed)
        keyed.append(((1,) if key is None else (0, *key), file, str(path)))
    if not keyed:
        raise EngineInputError("internal", f"Spark wrote no Parquet file into {parts_dir}")
    return [path for *_, path in sorted(keyed)]


_SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class _SliceLayout:
    """How part files' columns become a slice's: Spark's metadata for it, and `op` present or added."""

    metadata: dict[bytes, bytes]
    has_op: bool


def _slice_layout(part_schema: pa.Schema, vocab: Vocab) -> _SliceLayout:
    """`offset`, `op`, `system_time`, then the part's event time and data columns: the key-value
    metadata Spark would have written for that (its row schema, with the added columns)."""
    has_op = part_schema.names[0] == vocab.operation_type_column
    metadata = dict(part_schema.metadata or {})
    if _SPARK_ROW_METADATA in metadata:
        row = json.loads(metadata[_SPARK_ROW_METADATA])
        spark_types = {
            vocab.offset_column: "long",
            vocab.operation_type_column: "integer",
            vocab.system_time_column: "timestamp",
        }

        def spark_field(name: str) -> dict[str, object]:
            return {"name": name, "type": spark_types[name], "nullable": False, "metadata": {}}

        fields = row["fields"]
        op_field = fields.pop(0) if has_op else spark_field(vocab.operation_type_column)
        row["fields"] = [
            spark_field(vocab.offset_column),
            op_field,
            spark_field(vocab.system_time_column),
            *fields,
        ]
        metadata[_SPARK_ROW_METADATA] = json.dumps(row, separators=(",", ":")).encode()
    return _SliceLayout(metadata, has_op)


def _assemble(parts: list[str], path: str, vocab: Vocab, system_time: datetime, next_offset: int) -> int:
    """Splices the part files' row groups, in order, with the system columns into the slice at `path`:
    `offset` (from `next_offset`), `system_time` and `op` if missing, written directly (`stepped
    columns`) into a file of their own with row groups of the parts' sizes; Spark's column chunks are
    copied as they are. Returns the row count. With no rows, the file holds only the schema."""
    try:
        sources = [ParquetSource.open(part) for part in parts]
        schema = _schema_bytes(sources[0])
        for source in sources[1:]:
            if _schema_bytes(source) != schema:
                raise SpliceError(f"{source.path} has another schema than {sources[0].path}")
        data = Side(sources[0], [(source, i) for source in sources for i in range(len(source.row_groups))])
        layout = _slice_layout(pq.read_schema(parts[0]), vocab)
        row_counts = [source.num_rows(i) for source, i in data.row_groups]
        system_ms = (system_time - _EPOCH) // timedelta(milliseconds=1)
        added = {  # as pyarrow would write them
            vocab.offset_column: SteppedColumn(required_element(vocab.offset_column, INT64), next_offset, 1),
            vocab.operation_type_column: SteppedColumn(
                required_element(vocab.operation_type_column, INT32), 0, 0
            ),
            vocab.system_time_column: SteppedColumn(
                required_element(vocab.system_time_column, INT64, *TIMESTAMP_UTC_MILLIS), system_ms, 0
            ),
        }
        if layout.has_op:
            del added[vocab.operation_type_column]
        columns_path = os.path.join(os.path.dirname(parts[0]), "system-columns.parquet")
        columns = write_stepped_columns(columns_path, list(added.values()), row_counts)
        # sides: 0 = Spark's parts (the slice keeps their root element and creator), 1 = the system columns
        sides = [data, Side(columns, [(columns, i) for i in range(len(row_counts))])]
        side = {name: (1, index) for index, name in enumerate(added)}
        data_fields = [(0, i) for i in range(len(data.schema.fields))]
        if layout.has_op:  # the parts: op, event time, data
            order = [
                side[vocab.offset_column],
                data_fields[0],
                side[vocab.system_time_column],
                *data_fields[1:],
            ]
        else:  # the parts: event time, data
            order = [
                side[vocab.offset_column],
                side[vocab.operation_type_column],
                side[vocab.system_time_column],
                *data_fields,
            ]
        return splice(path, sides, order, key_value_metadata=layout.metadata)
    except SpliceError as e:
        raise EngineInputError(
            "internal", f"cannot assemble the slice from Spark's part files: {e}"
        ) from None


def _schema_bytes(source: ParquetSource) -> list[bytes]:
    return [tc.encode(element) for field in source.fields for element in field.elements]


def write_slices(
    df: DataFrame, out_dir: str, *, vocab: Vocab, max_records_per_slice: int | None
) -> tuple[list[WrittenSlice], str]:
    """Writes `df` (already sorted by offset within range partitions) as Parquet files under `out_dir`.

    Returns the non-empty slices ordered by offset and the path of one written file for the schema
    (Spark writes a schema-only file when the frame is empty, so the schema is known without data).
    """
    target = os.path.join(out_dir, "data")
    _write_parquet(df, target, max_records_per_slice)
    files = sorted(str(p) for p in Path(target).glob("*.parquet"))
    if not files:
        raise EngineInputError("internal", f"Spark wrote no Parquet file into {target}")
    slices: list[WrittenSlice] = []
    for path in files:
        meta = pq.ParquetFile(path).metadata
        if meta.num_rows == 0:
            continue
        slices.append(describe_slice(path, meta, vocab))
    return _in_offset_order(slices), files[0]


def write_slices_in_place(
    df: DataFrame, out_dir: str, *, vocab: Vocab, max_records_per_slice: int | None
) -> tuple[list[WrittenSlice], str]:
    """`write_slices` into a bucket (`out_dir` a URI): the executors write the files, then describe and
    hash them where they are (`remote_files`). Returns the slices, hashes included, and the output's
    Arrow schema (base64 of its IPC message)."""
    target = f"{out_dir.rstrip('/')}/data"
    _write_parquet(df, target, max_records_per_slice)
    files = describe_written(df.sparkSession, target, vocab)
    return slices_of(files), min(files, key=lambda f: f.path).arrow_schema


def slices_of(files: list[RemoteFile]) -> list[WrittenSlice]:
    """The non-empty files the executors described, as slices in offset order."""
    slices = [
        WrittenSlice(
            f.path,
            f.offset_start,
            f.offset_end,
            f.num_rows,
            f.max_event_time,
            physical_hash=f.physical_hash,
            logical_hash=f.logical_hash,
            size=f.size,
            null_columns=f.null_columns,
        )
        for f in files
        if f.num_rows and f.offset_start is not None and f.offset_end is not None
    ]
    return _in_offset_order(slices)


def _write_parquet(df: DataFrame, target: str, max_records_per_slice: int | None) -> None:
    writer = df.write.mode("overwrite")  # partitions are already in offset order
    if max_records_per_slice:
        writer = writer.option("maxRecordsPerFile", max_records_per_slice)
    writer.parquet(target)


def _in_offset_order(slices: list[WrittenSlice]) -> list[WrittenSlice]:
    """The slices by offset; their offsets must follow each other without a gap."""
    slices = sorted(slices, key=lambda s: s.offset_start)
    for before, after in itertools.pairwise(slices):
        if after.offset_start != before.offset_end + 1:
            raise EngineInputError(
                "internal",
                f"written slices are not contiguous: {before.path} ends at {before.offset_end}, "
                f"{after.path} starts at {after.offset_start}",
            )
    return slices

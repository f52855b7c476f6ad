"""System columns, offsets and slice files: the last step of every ingest, as the reference writes them.

Column order and types follow the reference: `offset` Int64, `op` Int32, `system_time` and `event_time`
Timestamp(ms, UTC) (or Date for event time), then the data columns. Offsets follow a total sort order
and are contiguous from `next_offset`; they are assigned without funnelling the rows through one
partition: the sorted frame is range-partitioned, each partition is counted, and each row's offset is
its partition's base plus its position in the partition. Each written file holds a contiguous offset
range and becomes one slice; the numbers the core needs are read from the Parquet footers, not by
another pass over the data.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError

SOURCE_EVENT_TIME_COLUMN = "__odf_source_event_time"
_PARTITION = "__odf_partition"
_POSITION = "__odf_position"


@dataclass(frozen=True)
class Vocabulary:
    offset: str = "offset"
    op: str = "op"
    system_time: str = "system_time"
    event_time: str = "event_time"

    @classmethod
    def from_request(cls, vocab: dict[str, str]) -> Vocabulary:
        return cls(
            offset=vocab.get("offset_column", "offset"),
            op=vocab.get("operation_type_column", "op"),
            system_time=vocab.get("system_time_column", "system_time"),
            event_time=vocab.get("event_time_column", "event_time"),
        )

    def as_dict(self) -> dict[str, str]:
        return {
            "offset_column": self.offset,
            "operation_type_column": self.op,
            "system_time_column": self.system_time,
            "event_time_column": self.event_time,
        }


@dataclass(frozen=True)
class WrittenSlice:
    path: str
    offset_start: int
    offset_end: int
    num_records: int
    max_event_time: str | None


def parse_time(text: str) -> datetime:
    """An RFC 3339 time of the contract as an aware UTC datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def normalize_timestamps(df: DataFrame) -> DataFrame:
    """Timestamps without a zone are read as UTC instants (Parquet output is then Timestamp(ms, UTC))."""
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
    vocab: Vocabulary,
    system_time: datetime,
    next_offset: int,
    num_partitions: int = 1,
    drop_columns: tuple[str, ...] = (),
) -> DataFrame:
    """The final rows: event time coalesced with the source's, one system time, contiguous offsets.

    `num_partitions` range partitions are sorted in parallel; each becomes at least one slice file (a
    frame that is already one partition is sorted in place, without a shuffle). The sorted rows are
    persisted — they are counted, written and folded into the merge state — until the job clears the
    session's cache.
    """
    et = F.col(f"`{vocab.event_time}`")
    if SOURCE_EVENT_TIME_COLUMN in df.columns:
        source_et = F.col(SOURCE_EVENT_TIME_COLUMN)
        if isinstance(df.schema[vocab.event_time].dataType, T.DateType):
            source_et = F.to_date(source_et)
        et = F.coalesce(et, source_et)
    df = df.withColumn(vocab.event_time, et)
    if num_partitions > 1 or df.rdd.getNumPartitions() > 1:
        df = df.repartitionByRange(max(1, num_partitions), *sort_columns)
    ordered = df.sortWithinPartitions(*sort_columns).withColumn(_PARTITION, F.spark_partition_id())
    ordered = ordered.withColumn(
        _POSITION,
        F.monotonically_increasing_id() - F.shiftleft(F.col(_PARTITION).cast("long"), 33),
    )
    counts = {0: 0}  # one partition: its base is the next offset, no counting pass needed
    if num_partitions > 1:
        ordered = ordered.persist(StorageLevel.MEMORY_AND_DISK)
        counts = dict(ordered.groupBy(_PARTITION).count().collect())
    base, bases = next_offset, {}
    for partition in sorted(counts):
        bases[partition] = base
        base += counts[partition]
    partition_base = F.lit(next_offset).cast("long")
    for partition, start in bases.items():
        partition_base = F.when(F.col(_PARTITION) == partition, F.lit(start)).otherwise(partition_base)
    hidden = {_PARTITION, _POSITION, SOURCE_EVENT_TIME_COLUMN, *drop_columns}
    data_columns = [
        F.col(f"`{c}`") for c in df.columns if c not in hidden and c not in (vocab.op, vocab.event_time)
    ]
    system_time_ms = system_time.replace(microsecond=system_time.microsecond // 1000 * 1000)
    result = ordered.select(
        (partition_base + F.col(_POSITION)).cast("long").alias(vocab.offset),
        F.col(f"`{vocab.op}`").cast("int").alias(vocab.op),
        F.lit(system_time_ms).cast(T.TimestampType()).alias(vocab.system_time),
        F.col(f"`{vocab.event_time}`"),
        *data_columns,
    )
    return result


def write_slices(
    df: DataFrame, out_dir: str, *, vocab: Vocabulary, max_records_per_slice: int | None
) -> tuple[list[WrittenSlice], str]:
    """Writes `df` (already sorted by offset within range partitions) as Parquet files under `out_dir`.

    Returns the non-empty slices ordered by offset and the path of one written file for the schema
    (Spark writes a schema-only file when the frame is empty, so the schema is known without data).
    """
    target = os.path.join(out_dir, "data")
    writer = df.write.mode("overwrite")  # partitions are already in offset order
    if max_records_per_slice:
        writer = writer.option("maxRecordsPerFile", max_records_per_slice)
    writer.parquet(target)
    files = sorted(str(p) for p in Path(target).glob("*.parquet"))
    if not files:
        raise EngineInputError("internal", f"Spark wrote no Parquet file into {target}")
    slices: list[WrittenSlice] = []
    for path in files:
        meta = pq.ParquetFile(path).metadata
        if meta.num_rows == 0:
            continue
        slices.append(_describe_slice(path, meta, vocab))
    slices.sort(key=lambda s: s.offset_start)
    for before, after in itertools.pairwise(slices):
        if after.offset_start != before.offset_end + 1:
            raise EngineInputError(
                "internal",
                f"written slices are not contiguous: {before.path} ends at {before.offset_end}, "
                f"{after.path} starts at {after.offset_start}",
            )
    return slices, files[0]


def _describe_slice(path: str, meta: pq.FileMetaData, vocab: Vocabulary) -> WrittenSlice:
    names = meta.schema.to_arrow_schema().names
    offset_idx, et_idx = names.index(vocab.offset), names.index(vocab.event_time)
    lo, hi, max_et = None, None, None
    for rg in range(meta.num_row_groups):
        row_group = meta.row_group(rg)
        offsets, ets = row_group.column(offset_idx).statistics, row_group.column(et_idx).statistics
        if offsets is None or not offsets.has_min_max:
            return _describe_slice_by_reading(path, vocab)
        lo = offsets.min if lo is None else min(lo, offsets.min)
        hi = offsets.max if hi is None else max(hi, offsets.max)
        if ets is not None and ets.has_min_max:
            max_et = ets.max if max_et is None else max(max_et, ets.max)
        elif row_group.num_rows and (ets is None or ets.null_count != row_group.num_rows):
            return _describe_slice_by_reading(path, vocab)
    if hi - lo + 1 != meta.num_rows:
        raise EngineInputError("internal", f"{path}: offsets {lo}..{hi} do not match {meta.num_rows} rows")
    return WrittenSlice(path, lo, hi, meta.num_rows, _rfc3339(max_et))


def _describe_slice_by_reading(path: str, vocab: Vocabulary) -> WrittenSlice:
    table = pq.read_table(path, columns=[vocab.offset, vocab.event_time])
    lo, hi = pc.min_max(table[vocab.offset]).values()
    max_et = pc.max(table[vocab.event_time]).as_py()
    return WrittenSlice(path, lo.as_py(), hi.as_py(), table.num_rows, _rfc3339(max_et))


def _rfc3339(value: datetime | date | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

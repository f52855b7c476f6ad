"""The transform job: a derivative dataset's SQL over its inputs' new records (docs/engine-contract.md).

Each input is a view named by its query alias (dots allowed), holding exactly the input's records in the
request's offset range, in offset order; the queries run in order and the last one is the output. As the
reference requires, the output has no `offset` / `system_time` columns and has an event-time column of
date or timestamp type; `op` is optional (+A when absent). Offsets follow the query's output order:
partition by partition, each partition's rows in the order Spark produces them. The output is one
slice: one ExecuteTransform consumes one interval of every input, so its data is not split.

How an input view gets offset order without a shuffle: slices hold contiguous offset ranges, stored in
offset order, and the request lists them in offset order. Each slice file is read on its own and the
reads are concatenated in that order (one read of all files would not do: Spark packs files into
partitions largest first), so the view's partitions are the files' pieces in file order. A file larger
than a split is read as several partitions, in byte order: Spark sorts splits by size, stably, and all
splits of a file but the last have the same size (a test pins this down with many splits per file, on
the pinned Spark version).
What is checked, not assumed, before Spark reads anything: the Parquet footers must show each file's
offsets as a gap-free range (min, max, row count) after the previous file's, and the files' offset
columns, read on the driver row group by row group (a few ms per million rows, files in parallel), must
count up by one from there. A file wholly inside the request's offset range is read without a filter
(Spark then does not even decode its offsets). When the footers or the offsets do not show the order, or
the input is many small files (a read per file costs about 0.1-0.2 s of planning and set-up), the input
is sorted by offset instead (range partitions, sorted in parallel).
"""

from __future__ import annotations

import base64
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.preprocess import run_sql
from airflow_odf.engine.spark_types import arrow_to_spark, quote_identifier
from airflow_odf.engine.writer import (
    Vocabulary,
    normalize_timestamps,
    parse_time,
    write_in_frame_order,
)

# Reading slices in place costs one Spark read (relation, scan, task set-up: about 0.1-0.2 s) per file;
# sorting costs a shuffle of the input. In place pays off unless there are many small files.
MAX_FILES_READ_IN_PLACE = 256
MIN_MEAN_FILE_BYTES_IN_PLACE = 4 * 1024 * 1024
_CHECK_THREADS = 4


@dataclass(frozen=True)
class SliceRange:
    """A slice file's offsets as its Parquet footer states them: `first..last`, one row per offset (the
    footer is kept, so that checking the offsets does not read it again)."""

    path: str
    first: int
    last: int
    footer: pq.FileMetaData = field(compare=False, repr=False)


def _input_view(spark: SparkSession, item: dict[str, Any]) -> DataFrame:
    """The input's records with offsets in `[offset_start, offset_end]`, in offset order: the slices read
    in place when their footers and offsets show that order (checked first), else sorted."""
    struct = arrow_to_spark(pa.ipc.read_schema(pa.py_buffer(base64.b64decode(item["schema"]))))
    reader = spark.read.schema(struct)
    vocab = Vocabulary.from_request(item.get("vocab", {}))
    paths = item.get("data_paths") or []
    if not paths or item.get("offset_end") is None:
        return spark.createDataFrame([], struct)
    start, end = item["offset_start"], item["offset_end"]
    offset = F.col(quote_identifier(vocab.offset))
    in_range = offset.between(start, end)
    ranges = slice_ranges(paths, vocab.offset) if _in_place_pays_off(paths) else None
    wanted = [r for r in ranges or [] if r.last >= start and r.first <= end]  # others: not read at all
    if ranges is None or not all_in_offset_order(wanted, vocab.offset):
        return reader.parquet(*paths).filter(in_range).orderBy(offset)
    reads = []
    for r in wanted:
        df = reader.parquet(r.path)
        # a file wholly in range needs no filter: Spark then does not even decode its offsets
        reads.append(df if start <= r.first and r.last <= end else df.filter(in_range))
    return reduce(DataFrame.union, reads) if reads else spark.createDataFrame([], struct)


def _in_place_pays_off(paths: list[str]) -> bool:
    if len(paths) <= 4:
        return True
    if len(paths) > MAX_FILES_READ_IN_PLACE:
        return False
    try:
        return sum(os.path.getsize(p) for p in paths) / len(paths) >= MIN_MEAN_FILE_BYTES_IN_PLACE
    except OSError:
        return False


def slice_ranges(paths: list[str], offset: str) -> list[SliceRange] | None:
    """The files' offset ranges, if their Parquet footers show each as gap-free (`max - min + 1` = rows)
    and after the previous one; None otherwise, or if a footer cannot be read or lacks offset statistics.
    Files without rows are left out."""
    ranges: list[SliceRange] = []
    for path in paths:
        try:
            meta = pq.read_metadata(path)
        except (OSError, pa.ArrowException):
            return None
        leaves = [meta.schema.column(i).path for i in range(meta.num_columns)]
        if offset not in leaves:
            return None
        index, lo, hi = leaves.index(offset), None, None
        for rg in range(meta.num_row_groups):
            if meta.row_group(rg).num_rows == 0:
                continue
            stats = meta.row_group(rg).column(index).statistics
            if stats is None or not stats.has_min_max:
                return None
            lo = stats.min if lo is None else min(lo, stats.min)
            hi = stats.max if hi is None else max(hi, stats.max)
        if lo is None or hi is None:
            continue
        if hi - lo + 1 != meta.num_rows or (ranges and lo <= ranges[-1].last):
            return None
        ranges.append(SliceRange(path, lo, hi, meta))
    return ranges


def all_in_offset_order(ranges: list[SliceRange], offset: str) -> bool:
    """Whether every file's offset column counts up by one from its first offset (files in parallel)."""
    if not ranges:
        return True
    with ThreadPoolExecutor(min(_CHECK_THREADS, len(ranges))) as pool:
        return all(pool.map(lambda r: _in_offset_order(r, offset), ranges))


def _in_offset_order(piece: SliceRange, offset: str) -> bool:
    """Reads only the offset column, a row group at a time (memory stays bounded)."""
    expected = piece.first
    try:
        with pq.ParquetFile(piece.path, metadata=piece.footer) as f:
            for group in range(f.num_row_groups):
                values = f.read_row_group(group, columns=[offset]).column(0)
                if values.null_count:
                    return False
                found = values.to_numpy()
                if found.size and not np.array_equal(found, np.arange(expected, expected + found.size)):
                    return False
                expected += found.size
    except (OSError, pa.ArrowException):
        return False
    return expected == piece.last + 1


def _check_output(df: DataFrame, vocab: Vocabulary) -> DataFrame:
    for name in (vocab.offset, vocab.system_time):
        if name in df.columns:
            raise EngineInputError(
                "bad-schema",
                f"the transform's result has a column '{name}': the engine adds the system columns, "
                "leave it out of the query's select list",
            )
    if vocab.event_time not in df.columns:
        raise EngineInputError(
            "bad-schema",
            f"the transform's result has no event-time column '{vocab.event_time}' (columns: "
            f"{', '.join(df.columns)}); select one of date or timestamp type",
        )
    found = df.schema[vocab.event_time].dataType
    if not isinstance(found, T.DateType | T.TimestampType | T.TimestampNTZType):
        raise EngineInputError(
            "bad-schema",
            f"the event-time column '{vocab.event_time}' has type {found.simpleString()}, "
            "expected date or timestamp",
        )
    if vocab.op in df.columns and not isinstance(
        df.schema[vocab.op].dataType, T.ByteType | T.ShortType | T.IntegerType
    ):
        raise EngineInputError(
            "bad-schema", f"the operation-type column '{vocab.op}' must be an integer (Int32)"
        )
    return df  # without `op`, the writer adds +A


def transform(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    """Runs one transform request; raises EngineInputError on bad queries or output."""
    vocab = Vocabulary.from_request(request.get("vocab", {}))
    views = {item["alias"]: _input_view(spark, item) for item in request["inputs"]}
    result = run_sql(spark, views, request["queries"], "transform")
    output = _check_output(normalize_timestamps(result), vocab)
    slices, schema_file = write_in_frame_order(
        output,
        request["out_dir"],
        vocab=vocab,
        system_time=parse_time(request["system_time"]),
        next_offset=request["next_offset"],
    )
    schema = pq.read_schema(schema_file).remove_metadata()
    return {
        "output_schema": base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"),
        "slices": [s.__dict__ for s in slices],
        "max_event_time": slices[0].max_event_time if slices else None,
    }

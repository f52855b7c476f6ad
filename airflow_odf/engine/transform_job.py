"""The transform job: a derivative dataset's SQL over its inputs' new records (docs/engine-contract.md).

Each input is a view named by its query alias (dots allowed), holding exactly the input's records in the
request's offset range, in offset order; the queries run in order and the last one is the output. As the
reference requires, the output has no `offset` / `system_time` columns and has an event-time column of
date or timestamp type; `op` is optional (+A when absent). Offsets follow the query's output order:
partition by partition, each partition's rows in the order Spark produces them. The output is one
slice: one ExecuteTransform consumes one interval of every input, so its data is not split.

How an input view gets offset order without a shuffle: slices hold contiguous offset ranges, stored in
offset order, and the request lists them in offset order. What is checked, not assumed, before Spark
reads anything: the Parquet footers must show each file's offsets as a gap-free range (min, max, row
count) after the previous file's, and the files' offset columns, read on the driver row group by row
group (a few ms per million rows, files in parallel, while Spark plans the query), must count up by
one from there. A file wholly inside the request's offset range is read without a filter (Spark then
does not even decode its offsets). The files wholly in range are read in one Spark read, one split per
partition; when the query passes those partitions on row by row (filters, projections, unions), the
plan tells which file and split each output partition came from (read while Spark writes, and even
planned then when the analyzed plan shows a plain filter or projection), and the writer puts the
partitions in offset order (partition_order.py; on Spark Connect, for one input, from the server's
formatted plan and one job telling which row groups each partition reads, run while Spark writes).
Any other query is planned again over one read per file, concatenated in offset order (one read of
all files would not do there: Spark orders partitions largest first), so that the view is in offset
order before Spark exchanges rows. When the footers or the offsets do not show the order, or the
input is many small files (a read per file costs about 0.04 s of planning and set-up), the input is
sorted by offset instead (range partitions, sorted in parallel).
"""

from __future__ import annotations

import base64
import dataclasses
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial, reduce
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_odf.engine.checks import evaluate_checks, refuse_hostile_checks
from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.partition_order import (
    PartitionKey,
    RowGroup,
    ScanTree,
    can_read_plans,
    looks_row_by_row,
    one_split_per_partition,
    output_scans,
    partition_keys,
    served_partition_keys,
    served_scan_count,
    split_settings,
)
from airflow_odf.engine.parts_publisher import PartsTarget, row_group_midpoints
from airflow_odf.engine.preprocess import run_sql
from airflow_odf.engine.remote_files import is_uri
from airflow_odf.engine.slice_footer import WrittenSlice
from airflow_odf.engine.spark_types import arrow_to_spark, quote_identifier
from airflow_odf.engine.writer import (
    normalize_timestamps,
    parse_time,
    write_in_frame_order,
    write_in_frame_order_in_place,
)
from airflow_odf.utils.engine_json import Vocab

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


@dataclass(frozen=True)
class _Input:
    """One input of the request, checked once: its slices in offset order (`in_place`), or None when
    they must be sorted."""

    alias: str
    struct: T.StructType
    offset: str
    paths: list[str]
    start: int
    end: int
    in_place: list[SliceRange] | None


def _input_from_footers(item: dict[str, Any]) -> _Input:
    """The input, its slices in place when their footers show offset order (see the module doc); their
    offset columns are checked next (`_offsets_checked`)."""
    struct = arrow_to_spark(pa.ipc.read_schema(pa.py_buffer(base64.b64decode(item["schema"]))))
    vocab = Vocab.from_json(item.get("vocab", {}))
    end = item.get("offset_end")
    paths = (item.get("data_paths") or []) if end is not None else []
    start = item.get("offset_start") or 0
    in_place = None
    if paths and _in_place_pays_off(paths):
        ranges = slice_ranges(paths, vocab.offset_column)
        if ranges is not None:
            in_place = [r for r in ranges if r.last >= start and r.first <= end]  # others: not read
    return _Input(item["alias"], struct, vocab.offset_column, paths, start, end or 0, in_place)


def _offsets_checked(inputs: list[_Input]) -> tuple[list[_Input], bool]:
    """The inputs with `in_place` kept only where every file's offset column counts up by one, and
    whether all were kept."""
    checked = [
        source
        if source.in_place is None or all_in_offset_order(source.in_place, source.offset)
        else dataclasses.replace(source, in_place=None)
        for source in inputs
    ]
    return checked, checked == inputs


def _input_view(spark: SparkSession, source: _Input, *, file_by_file: bool) -> DataFrame:
    """The input's records with offsets in `[start, end]`: sorted, or the slices read in place —
    `file_by_file` (in offset order) or the files wholly in range in one read (in Spark's partition
    order, which `partition_keys` maps back to offset order)."""
    if not source.paths:
        return spark.createDataFrame([], source.struct)
    if source.in_place is None:
        offset = _offset(source)
        reader = spark.read.schema(source.struct)
        return reader.parquet(*source.paths).filter(_in_range(offset, source)).orderBy(offset)
    reads = _reads(spark, source, file_by_file=file_by_file)
    in_range = _in_range(_offset(source), source) if any(filtered for _, filtered in reads) else None
    views = [read.filter(in_range) if filtered else read for read, filtered in reads]
    return reduce(DataFrame.union, views) if views else spark.createDataFrame([], source.struct)


def _reads(spark: SparkSession, source: _Input, *, file_by_file: bool) -> list[tuple[DataFrame, bool]]:
    """The reads of an input's slices in place, in offset order, and whether each must be filtered to
    the request's range: a read per file (`file_by_file`), or the files wholly in range in one read."""
    groups: list[tuple[list[str], bool]] = []  # (files, filtered to the range), in offset order
    for r in source.in_place or []:
        # a file wholly in range needs no filter: Spark then does not even decode its offsets
        whole = source.start <= r.first and r.last <= source.end
        if whole and not file_by_file and groups and not groups[-1][1]:
            groups[-1][0].append(r.path)
        else:
            groups.append(([r.path], not whole))
    reader = spark.read.schema(source.struct)
    return [(reader.parquet(*files), filtered) for files, filtered in groups]


def _offset(source: _Input) -> Column:
    """Built only where a read needs it: a Spark column costs a dozen JVM round trips."""
    return F.col(quote_identifier(source.offset))


def _in_range(offset: Column, source: _Input) -> Column:
    return offset.between(source.start, source.end)


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


def _check_output(df: DataFrame, vocab: Vocab) -> DataFrame:
    for name in (vocab.offset_column, vocab.system_time_column):
        if name in df.columns:
            raise EngineInputError(
                "bad-schema",
                f"the transform's result has a column '{name}': the engine adds the system columns, "
                "leave it out of the query's select list",
            )
    if vocab.event_time_column not in df.columns:
        raise EngineInputError(
            "bad-schema",
            f"the transform's result has no event-time column '{vocab.event_time_column}' (columns: "
            f"{', '.join(df.columns)}); select one of date or timestamp type",
        )
    found = df.schema[vocab.event_time_column].dataType
    if not isinstance(found, T.DateType | T.TimestampType | T.TimestampNTZType):
        raise EngineInputError(
            "bad-schema",
            f"the event-time column '{vocab.event_time_column}' has type {found.simpleString()}, "
            "expected date or timestamp",
        )
    if vocab.operation_type_column in df.columns and not isinstance(
        df.schema[vocab.operation_type_column].dataType, T.ByteType | T.ShortType | T.IntegerType
    ):
        raise EngineInputError(
            "bad-schema",
            f"the operation-type column '{vocab.operation_type_column}' must be an integer (Int32)",
        )
    return df  # without `op`, the writer adds +A


def transform(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    """Runs one transform request, then its checks on the written slice (`checks`); raises
    EngineInputError on bad queries or output."""
    refuse_hostile_checks(request.get("checks"))  # before anything is read or written
    response = _transform(spark, request)
    if request.get("checks") and response["slices"]:
        paths = [s["path"] for s in response["slices"]]
        response["check_results"] = evaluate_checks(spark, request["checks"], paths)
    return response


def _transform(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    vocab = Vocab.from_json(request.get("vocab", {}))
    footers = [_input_from_footers(item) for item in request["inputs"]]
    in_place = [r for source in footers for r in source.in_place or []]
    with ThreadPoolExecutor(2, thread_name_prefix="odf-plan-helper") as helper:
        # the offset columns are read (pyarrow, without the GIL) while Spark plans the one-scan query
        check = helper.submit(_offsets_checked, footers)
        # into a bucket, the partitions are written in their own order (`write_in_frame_order_in_place`)
        if in_place and _keys_can_be_had(spark, footers) and not is_uri(request["out_dir"]):
            settings = helper.submit(split_settings, spark)  # on Connect, a job: while the views are made
            sizes = [os.path.getsize(r.path) for r in in_place]
            target = _parts_target(request, in_place)
            # the parts published: in the files' order where it can be had
            middles = None if target is None else list(target.midpoints.values())
            # analysed only: the split settings apply when Spark plans the scan, in the body below
            output = _output(spark, request, footers, vocab, file_by_file=False)
            with one_split_per_partition(spark, sizes, middles, settings.result()):
                find_keys = _keys_finder(spark, output, footers, _first_offsets(in_place))
                inputs, all_in_order = check.result()
                if find_keys is not None and all_in_order:
                    keys = helper.submit(find_keys)
                    written = _written(output, request, vocab, keys, target)
                    if written is not None:
                        return written
        inputs, _ = check.result()
    # the query exchanges rows (joins, aggregates, windows, sorts), an input is sorted, or a partition
    # reads more than one split: a read per file
    output = _output(spark, request, inputs, vocab, file_by_file=True)
    written = _written(output, request, vocab, None, None)
    assert written is not None  # without keys, the frame's own partition order
    return written


def _written(
    output: DataFrame,
    request: dict[str, Any],
    vocab: Vocab,
    keys: Future[list[PartitionKey | None] | None] | None,
    publish_to: PartsTarget | None,
) -> dict[str, Any] | None:
    """The response for `output` written as one slice; None when `keys` (from the plan) end up unknown.
    `publish_to`: where its parts are published while Spark writes them (`parts_publisher`). Into a
    bucket (`out_dir` a URI), the slice is written and hashed there, in the frame's partition order."""
    if is_uri(request["out_dir"]):
        slices, schema_text = write_in_frame_order_in_place(
            output,
            request["out_dir"],
            vocab=vocab,
            system_time=parse_time(request["system_time"]),
            next_offset=request["next_offset"],
        )
        return _response(slices, schema_text)
    written = write_in_frame_order(
        output,
        request["out_dir"],
        vocab=vocab,
        system_time=parse_time(request["system_time"]),
        next_offset=request["next_offset"],
        partition_keys=keys,
        publish_to=publish_to,
    )
    if written is None:
        return None
    slices, schema_file = written
    schema = pq.read_schema(schema_file).remove_metadata()
    return _response(slices, base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"))


def _response(slices: list[WrittenSlice], schema_text: str) -> dict[str, Any]:
    return {
        "output_schema": schema_text,
        "slices": [s.__dict__ for s in slices],
        "max_event_time": slices[0].max_event_time if slices else None,
    }


def _output(
    spark: SparkSession,
    request: dict[str, Any],
    inputs: list[_Input],
    vocab: Vocab,
    *,
    file_by_file: bool,
) -> DataFrame:
    views = {source.alias: _input_view(spark, source, file_by_file=file_by_file) for source in inputs}
    result = run_sql(spark, views, request["queries"], "transform")
    return _check_output(normalize_timestamps(result), vocab)


def _keys_can_be_had(spark: SparkSession, inputs: list[_Input]) -> bool:
    """Whether the output partitions' keys can be had: from the plan's JVM objects (a classic session),
    or on Spark Connect from the data of the one input's reads (`served_partition_keys`; with several
    inputs the formatted plan does not tell which scan is which). On Connect the server's Spark writes
    the parts and this process splices them: it sees them where the server wrote them, as it sees the
    request's files (`connect_runner` refuses a server that does not); into a bucket, nothing is
    spliced here (`write_in_frame_order_in_place`)."""
    return can_read_plans(spark) or len(inputs) == 1


def _keys_finder(
    spark: SparkSession, output: DataFrame, inputs: list[_Input], first_offsets: dict[str, int]
) -> Callable[[], list[PartitionKey | None] | None] | None:
    """What reads the output partitions' keys while Spark writes (in the helper thread), or None when
    the plan shows now that the output does more than pass its scans' partitions on row by row."""
    if not can_read_plans(spark):
        (source,) = inputs
        reads = _reads(spark, source, file_by_file=False)
        # one read (all files wholly in range, as a transform's whole slices are): the partition ids of
        # a union's children are not tested on Connect. Another plan, or the input read twice: none
        if len(reads) != 1 or served_scan_count(output) != 1:
            return None
        row_groups = {first: group for r in source.in_place or [] for first, group in _row_groups(r)}
        return partial(served_partition_keys, [read for read, _ in reads], _offset(source), row_groups)
    # a plain filter or projection is planned while Spark writes; anything else now (the optimizer may
    # still make it row by row: a CTE, say)
    row_by_row = looks_row_by_row(output)
    scans = None if row_by_row else output_scans(output)
    if not row_by_row and scans is None:
        return None
    return partial(_keys_while_writing, output, scans, first_offsets)


def _row_groups(piece: SliceRange) -> list[tuple[int, RowGroup]]:
    """The row groups holding rows of a slice file whose offsets count up by one, by first offset."""
    groups, first = [], piece.first
    middles = iter(row_group_midpoints(piece.footer))  # of the row groups with rows, in order
    for index in range(piece.footer.num_row_groups):
        group = piece.footer.row_group(index)
        if group.num_rows and group.num_columns:
            groups.append((first, (piece.first, index, next(middles))))
        first += group.num_rows
    return groups


def _keys_while_writing(
    output: DataFrame, scans: ScanTree | None, first_offsets: dict[str, int]
) -> list[PartitionKey | None] | None:
    """The output partitions' keys, read in the helper thread while Spark writes (a few JVM round trips
    per split), after planning the query when that was not done yet (`scans` None)."""
    if scans is None:
        scans = output_scans(output)
    return None if scans is None else partition_keys(scans, first_offsets)


def _parts_target(request: dict[str, Any], in_place: list[SliceRange]) -> PartsTarget | None:
    """Where the coordinator wants the parts while Spark writes them, if it does (`parts_publisher`)."""
    ready_dir = request.get("parts_ready_dir")
    if not ready_dir:
        return None
    return PartsTarget(ready_dir, {r.first: row_group_midpoints(r.footer) for r in in_place})


def _first_offsets(ranges: list[SliceRange]) -> dict[str, int]:
    """Slice file name -> first offset; a name given to two different slices is left out (no keys)."""
    firsts: dict[str, set[int]] = {}
    for r in ranges:
        firsts.setdefault(os.path.basename(r.path), set()).add(r.first)
    return {name: next(iter(found)) for name, found in firsts.items() if len(found) == 1}

"""The ingest handler: read the inputs (one reader per format), preprocess, merge against the previous
state, add the system columns and offsets, write the slices and the new merge state. Also what schema
inference shares with it (reading the inputs, the output frame).
"""

from __future__ import annotations

import base64
import logging
import os
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_odf.engine import one_pass_writer
from airflow_odf.engine.checks import evaluate_checks, failed, refuse_hostile_checks
from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.event_time_order import write_if_in_order
from airflow_odf.engine.merge import (
    ROW_COLUMN,
    keeps_state,
    load_state,
    merge,
    next_state,
    orders_by_event_time,
    write_state,
    write_state_in_place,
)
from airflow_odf.engine.preprocess import default_preprocess, run_queries, validate_input
from airflow_odf.engine.readers import BAD_RECORDS_QUARANTINE, LINE_FORMATS, file_index, read_input
from airflow_odf.engine.remote_files import is_uri
from airflow_odf.engine.session import default_parallelism
from airflow_odf.engine.slice_footer import WrittenSlice
from airflow_odf.engine.spark_types import spark_to_arrow
from airflow_odf.engine.writer import (
    SOURCE_EVENT_TIME_COLUMN,
    normalize_timestamps,
    numbered,
    parse_time,
    sorted_rows,
    with_event_time,
    with_system_columns,
    write_slices,
    write_slices_in_place,
)
from airflow_odf.utils.engine_json import Vocab

_FILE_COLUMN = "__odf_input_file"
_POSITION_BITS = 44  # row positions below 2**44: up to 2,048 Spark partitions per input
# Inputs up to this size (with no merge state joined in) are read in one task, together with their sort:
# a parallel read would save less than the shuffle (and planning) that gathers them into one partition.
_GATHER_BYTES = 16 * 1024 * 1024
_log = logging.getLogger(__name__)


def arrow_schema(text: str | None) -> pa.Schema | None:
    return None if text is None else pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def read_inputs(spark: SparkSession, request: dict[str, Any], vocab: Vocab) -> tuple[DataFrame | None, int]:
    """The new records of all inputs, in input order, each tagged with its source's event time.

    Input order is kept in ROW_COLUMN: the input's index in the high bits, the row's position (Spark's
    monotonically increasing id, which follows the file) in the low ones. Several files of a line
    format without preprocess queries are read in one scan; otherwise each file is read and preprocessed
    on its own (as the reference ingests one file per iteration) and the results are unioned.
    """
    inputs = request["inputs"]
    read_schema = arrow_schema(request.get("read_schema"))
    batch = _read_in_one_scan(request)
    groups = [inputs] if batch else [[item] for item in inputs]
    frames, quarantined = [], 0
    if request.get("bad_records") == BAD_RECORDS_QUARANTINE and is_uri(request["out_dir"]):
        raise EngineInputError(
            "unsupported",
            "bad_records 'quarantine' keeps the broken records in a file on the engine's disk, which an "
            f"engine writing into the bucket ({request['out_dir']}) has not: use 'fail', or turn s3a off",
        )
    for group in groups:
        result = read_input(
            spark,
            request["read"],
            [item["path"] for item in group],
            read_schema,
            bad_records=request.get("bad_records", "fail"),
            quarantine_dir=os.path.join(request["out_dir"], "quarantine"),
            file_column=_FILE_COLUMN if batch else None,
            defer_check=True,
        )
        quarantined += result.num_quarantined
        if result.df is None:
            continue
        df = result.df
        if request.get("preprocess"):
            df = run_queries(spark, df, request["preprocess"])
        elif read_schema is None:
            df = default_preprocess(df, request["merge"]["kind"], vocab.to_json())
        frames.append(_tag_rows(df, group, first_index=inputs.index(group[0]), by_file=batch))
    if not frames:
        return None, quarantined
    first = frames[0]
    for i, df in enumerate(frames[1:], start=1):
        if sorted(df.columns) != sorted(first.columns):
            raise EngineInputError(
                "bad-schema",
                f"{inputs[i]['path']}: columns {df.columns} differ from {inputs[0]['path']}: {first.columns}",
            )
        first = first.unionByName(df)
    return first, quarantined


def _read_in_one_scan(request: dict[str, Any]) -> bool:
    """Several files of a line format without preprocess queries are read in one scan, whose partitions
    Spark orders by size, not by file: their partition order is then not the input order."""
    return (
        len(request["inputs"]) > 1
        and not request.get("preprocess")
        and request["read"].get("kind") in LINE_FORMATS
    )


def _tag_rows(df: DataFrame, group: list[dict[str, Any]], *, first_index: int, by_file: bool) -> DataFrame:
    """Adds ROW_COLUMN (input order) and the source event time of each row's input."""

    def literal_time(item: dict[str, Any]) -> Column:
        et = item.get("source_event_time")
        return F.lit(parse_time(et) if et else None).cast(T.TimestampType())

    position = F.monotonically_increasing_id()
    index, source_et = F.lit(first_index).cast("long"), literal_time(group[0])
    if by_file:
        index = file_index(F.col(_FILE_COLUMN), [item["path"] for item in group])
        if len({item.get("source_event_time") for item in group}) > 1:
            source_et = F.element_at(F.array(*[literal_time(item) for item in group]), index + 1)
    df = df.withColumn(ROW_COLUMN, F.shiftleft(index.cast("long"), _POSITION_BITS) + position)
    return df.withColumn(SOURCE_EVENT_TIME_COLUMN, source_et).drop(_FILE_COLUMN)


def _with_event_time(df: DataFrame, vocab: Vocab, dataset_schema: pa.Schema | None) -> DataFrame:
    """Adds a typed all-null event-time column when the data has none (filled from the source later)."""
    if vocab.event_time_column in df.columns:
        return df
    et_type: T.DataType = T.TimestampType()
    known = dataset_schema is not None and vocab.event_time_column in dataset_schema.names
    if known and pa.types.is_date(dataset_schema.field(vocab.event_time_column).type):
        et_type = T.DateType()
    return df.withColumn(vocab.event_time_column, F.lit(None).cast(et_type))


def _input_bytes(request: dict[str, Any]) -> int:
    """The inputs' size: local files' own, others' as the request states it."""
    return sum(
        os.path.getsize(i["path"]) if os.path.isfile(i["path"]) else i.get("size") or 0
        for i in request["inputs"]
    )


def _num_partitions(spark: SparkSession, request: dict[str, Any], size: int) -> int:
    """One sorted partition (and so at least one slice) per `target_slice_bytes` of input."""
    target = max(1, request.get("target_slice_bytes") or 1024 * 1024 * 1024)
    wanted = -(-size // target)
    # the cores are asked only when they may bound it (a job of its own on Spark Connect)
    return 1 if wanted <= 1 else min(wanted, 4 * default_parallelism(spark))


def _merged(
    new: DataFrame, state: DataFrame | None, request: dict[str, Any], vocab: Vocab
) -> tuple[DataFrame, list[Column]]:
    """The new rows validated, event time present, merged against `state`, data columns in input
    order; and the order their offsets follow."""
    strategy = request["merge"]
    validate_input(new, strategy["kind"], vocab.to_json())
    new = normalize_timestamps(new)
    new = _with_event_time(new, vocab, arrow_schema(request.get("dataset_schema")))
    merged = merge(strategy, new, state, vocab=vocab.to_json())
    # joins may move key columns first: the data columns keep the order the input gives them
    ordered = [c for c in new.columns if c in merged.data.columns]
    data = merged.data.select(*ordered, *[c for c in merged.data.columns if c not in ordered])
    return data, merged.sort_columns


def ingest_output(
    new: DataFrame,
    state: DataFrame | None,
    request: dict[str, Any],
    vocab: Vocab,
    *,
    system_time: datetime,
    next_offset: int,
    num_partitions: int = 1,
    gather: bool = False,
) -> DataFrame:
    """The ingest's output as it will be written: validated, event time set, merged against `state`
    (None: the first ingest), data columns in input order, system columns added. Shared with `infer`.

    `gather`: see `with_system_columns` (for a small input and no state: with a state joined in, the
    join would run in the one task too, however large the state)."""
    data, sort_columns = _merged(new, state, request, vocab)
    return with_system_columns(
        data,
        sort_columns,
        vocab=vocab,
        system_time=system_time,
        next_offset=next_offset,
        num_partitions=num_partitions,
        gather=gather,
        drop_columns=(ROW_COLUMN,),
    )


def ingest(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    refuse_hostile_checks(request.get("checks"))  # before anything is read or written
    vocab = Vocab.from_json(request.get("vocab", {}))
    strategy = request["merge"]
    # before the inputs are read: asking for withheld slices (NEEDS_PREVIOUS_DATA) leaves nothing behind
    state = load_state(
        spark,
        strategy,
        request.get("prev_checkpoint_path"),
        request.get("prev_data_paths", []),
        vocab=vocab.to_json(),
        prev_data_withheld=request.get("prev_data_withheld", 0),
    )
    new, quarantined = read_inputs(spark, request, vocab)
    response: dict[str, Any] = {"num_quarantined": quarantined}
    if quarantined:
        response["quarantine_path"] = os.path.join(request["out_dir"], "quarantine")
    if new is None:
        return response
    size = _input_bytes(request)
    num_partitions = _num_partitions(spark, request, size)
    gather = state is None and size <= _GATHER_BYTES
    out_dir = request["out_dir"]
    in_place = is_uri(out_dir)
    written = None
    if not (in_place or gather) and num_partitions == 1 and _may_be_in_order(request, state):
        written = _write_if_in_order(new, request, vocab)
    if written is None:
        data, sort_columns = _merged(new, state, request, vocab)
        rows = sorted_rows(
            data,
            sort_columns,
            vocab=vocab,
            num_partitions=num_partitions,
            gather=gather,
            drop_columns=(ROW_COLUMN,),
        )
        if in_place:
            written = _write_in_one_pass(rows, request, vocab, num_partitions=num_partitions)
    if written is None:
        # the same sorted rows, numbered after a counting pass (`with_system_columns`, as `ingest_output`)
        output = numbered(
            rows,
            vocab=vocab,
            system_time=parse_time(request["system_time"]),
            next_offset=request["next_offset"],
            count=num_partitions > 1,
        )
        spark_to_arrow(output.schema)  # a column Spark holds but Parquet/ODF cannot (an interval) fails here
        write = write_slices_in_place if in_place else write_slices
        written = write(
            output, out_dir, vocab=vocab, max_records_per_slice=request.get("max_records_per_slice")
        )
    slices, schema = written
    response["output_schema"] = schema if in_place else _schema_text(schema)
    response["slices"] = [s.__dict__ for s in slices]
    ets = [s.max_event_time for s in slices if s.max_event_time]
    response["max_event_time"] = max(ets, key=parse_time) if ets else None
    if slices and request.get("checks"):
        response["check_results"] = evaluate_checks(spark, request["checks"], [s.path for s in slices])
        if failed(response["check_results"]):
            return response  # nothing of it will be committed: no merge state to write
    if slices and keeps_state(strategy):  # folds in what was written: read back, not recomputed
        written = spark.read.parquet(*[s.path for s in slices])
        new_state = next_state(strategy, state, written, vocab=vocab.to_json())
        if new_state is not None and in_place:
            checkpoint = write_state_in_place(new_state, f"{out_dir.rstrip('/')}/checkpoint", strategy)
            response["new_checkpoint_path"] = checkpoint.path
            response["new_checkpoint_physical_hash"] = checkpoint.physical_hash
            response["new_checkpoint_size"] = checkpoint.size
        elif new_state is not None:
            path = os.path.join(out_dir, "checkpoint.parquet")
            write_state(new_state, path, strategy)
            response["new_checkpoint_path"] = path
    return response


def _may_be_in_order(request: dict[str, Any], state: DataFrame | None) -> bool:
    """Whether the ingest's rows, as read, may already be in the order of their offsets: a merge that
    orders by event time and joins no state, one slice, and partitions in input order."""
    return (
        state is None
        and orders_by_event_time(request["merge"])
        and not request.get("max_records_per_slice")
        and not _read_in_one_scan(request)
    )


def _write_in_one_pass(
    rows: DataFrame, request: dict[str, Any], vocab: Vocab, *, num_partitions: int
) -> tuple[list[WrittenSlice], str] | None:
    """The sorted rows (`sorted_rows`) written into the bucket, counted and hashed in one pass
    (`one_pass_writer`), or None when that path cannot promise the two-pass result (the reason is
    logged; the caller then numbers the same rows after a counting pass)."""
    reason = one_pass_writer.refusal(rows.sparkSession, rows, num_partitions)
    if reason is not None:
        level = logging.INFO if reason == one_pass_writer.TURNED_OFF else logging.WARNING
        _log.log(level, "the ingest writes its slices, then counts and hashes them apart: %s", reason)
        return None
    return one_pass_writer.write_in_one_pass(
        rows,
        request["out_dir"],
        vocab=vocab,
        system_time=parse_time(request["system_time"]),
        next_offset=request["next_offset"],
        num_partitions=num_partitions,
        max_records_per_slice=request.get("max_records_per_slice"),
    )


def _write_if_in_order(
    new: DataFrame, request: dict[str, Any], vocab: Vocab
) -> tuple[list[WrittenSlice], str] | None:
    """The slice written without a sort if the rows are in event-time order as read (`event_time_order`),
    else None."""
    data, sort_columns = _merged(new, None, request, vocab)
    data = with_event_time(data, vocab)
    spark_to_arrow(data.drop(ROW_COLUMN, SOURCE_EVENT_TIME_COLUMN).schema)
    return write_if_in_order(
        data,
        request["out_dir"],
        vocab=vocab,
        sort_columns=sort_columns,
        hidden=(ROW_COLUMN, SOURCE_EVENT_TIME_COLUMN),
        system_time=parse_time(request["system_time"]),
        next_offset=request["next_offset"],
    )


def _schema_text(schema_file: str) -> str:
    """The Arrow schema of a written file, as the contract carries it (base64 of its IPC message)."""
    schema = pq.read_schema(schema_file).remove_metadata()
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def locate_bad_records(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any] | None:
    """After a job met a broken record: read the inputs again with the full check, to name file and line."""
    schema = arrow_schema(request.get("read_schema"))
    try:
        for item in request["inputs"]:
            read_input(spark, request["read"], [item["path"]], schema)
    except EngineInputError as e:
        return {"error": {"kind": e.kind, "message": e.message}}
    return None

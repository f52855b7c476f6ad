"""An ingest whose input already is in event-time order is written as it was read: no shuffle, no sort,
no counting pass.

The reference numbers an Append or Ledger ingest's rows in the order (event time ASC NULLS FIRST, input
order): `row_number() OVER (ORDER BY event_time)`, ties kept in input order. Most appends arrive in that
order already. Here the rows stay in the partitions Spark read them into; in the frame's partition order
the tie-breaker (the rows' input order, `ROW_COLUMN`) only grows, so the order is the reference's as soon
as the event times never decrease along the partitions, nulls first. That is checked twice, cheaply:

- before the write, on the first rows of the input (`PREFIX_ROWS`, read by a job that stops there): an
  input out of order there goes straight to the global sort, and costs nothing more than that look;
- after the write, on the written parts' event-time column alone (read back from the local disk with
  Arrow: milliseconds per million rows), over every row and across the parts' boundaries.

When both hold, Spark's parts are spliced in partition order with the offsets and system columns into
the one slice (`writer.write_in_frame_order`): the offsets come from the parts' row counts. Otherwise
the parts are dropped and the ingest sorts globally (`writer.with_system_columns`).

With `SKIP_SORT` off, each partition is sorted on its own first (the same sort keys as the global sort)
and the same check decides: for an input in order that sort changes nothing, and the slice is the same
byte for byte — the tests and the benchmark compare the two. The slice's row groups follow the parts:
the records, offsets and logical hash are the global sort's, the file's layout is the read's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame

from airflow_odf.engine.slice_footer import WrittenSlice
from airflow_odf.engine.writer import write_in_frame_order
from airflow_odf.utils.engine_json import Vocab

SKIP_SORT = True
"""Skip the sort of an input found in order; off: sort each read partition (the comparison's path)."""
PREFIX_ROWS = 10_000
"""How many of the input's first rows are looked at before the write is tried."""


def write_if_in_order(
    df: DataFrame,
    out_dir: str,
    *,
    vocab: Vocab,
    sort_columns: Sequence[Column],
    hidden: Sequence[str],
    system_time: datetime,
    next_offset: int,
) -> tuple[list[WrittenSlice], str] | None:
    """Writes `df` (event time set, op, data and the `hidden` columns) as one slice in its partitions'
    order if that is the order of `sort_columns`; None, with nothing left behind, if it is not."""
    et = vocab.event_time_column
    if not _prefix_in_order(df, et):
        return None
    frame = df if SKIP_SORT else df.sortWithinPartitions(*sort_columns)
    frame = frame.drop(*hidden)
    return write_in_frame_order(
        frame,
        out_dir,
        vocab=vocab,
        system_time=system_time,
        next_offset=next_offset,
        accept=lambda parts: parts_in_order(parts, et),
    )


def _prefix_in_order(df: DataFrame, column: str) -> bool:
    # every column of the first rows, not the event time's alone: an event time that is not in the data
    # (a push's) would leave the scan with the corrupt-record column only, which Spark refuses for CSV/JSON
    first = df.limit(PREFIX_ROWS).toArrow()
    return _in_order([first.column(column).combine_chunks()], None) is not None


def parts_in_order(parts: Sequence[str], column: str) -> bool:
    """Whether `column` never decreases along the part files, in their order, with its nulls first."""
    last: pa.Scalar | None = None
    for part in parts:
        values = pq.read_table(part, columns=[column]).column(0).combine_chunks()
        state = _in_order([values], last)
        if state is None:
            return False
        last = state
    return True


_NULLS_ONLY = pa.scalar(None)


def _in_order(arrays: list[pa.Array], last: pa.Scalar | None) -> pa.Scalar | None:
    """The last value seen after `arrays` (nulls only: a null scalar), or None if they are out of order
    after `last` (the last value before them; None: nothing before)."""
    for array in arrays:
        if not len(array):
            continue
        nulls = array.null_count
        if nulls:
            # nulls first: all of them before any value, here and before
            if (last is not None and last.is_valid) or array.slice(0, nulls).null_count != nulls:
                return None
            array = array.slice(nulls)
            last = _NULLS_ONLY
            if not len(array):
                continue
        steps = pc.greater_equal(array.slice(1), array.slice(0, len(array) - 1))
        if len(array) > 1 and not pc.all(steps).as_py():
            return None
        if last is not None and last.is_valid and pc.less(array[0], last).as_py():
            return None
        last = array[len(array) - 1]
    return last if last is not None else _NULLS_ONLY

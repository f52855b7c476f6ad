"""What a written slice file holds, as the engine reports it: its offsets, rows and latest event time,
read from the Parquet footer's statistics (from the two columns' values when the footer has none).
Used where the file was written: on the driver for a local folder, on the executors for a bucket
(`remote_files`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.utils.engine_json import Vocab


@dataclass(frozen=True)
class WrittenSlice:
    """One slice of the response (OutputSlice of the contract). The hashes, size and null columns are
    given when the engine hashed the file itself (written into a bucket: `remote_files`)."""

    path: str
    offset_start: int
    offset_end: int
    num_records: int
    max_event_time: str | None
    physical_hash: str | None = None
    logical_hash: str | None = None
    size: int | None = None
    null_columns: list[str] | None = None


def describe_slice(
    path: str, meta: pq.FileMetaData, vocab: Vocab, source: str | pa.NativeFile | None = None
) -> WrittenSlice:
    """The slice file at `path` (read from `source` when given: an open file of a store)."""
    names = meta.schema.to_arrow_schema().names
    offset_idx, et_idx = names.index(vocab.offset_column), names.index(vocab.event_time_column)
    lo, hi, max_et = None, None, None
    for rg in range(meta.num_row_groups):
        row_group = meta.row_group(rg)
        offsets, ets = row_group.column(offset_idx).statistics, row_group.column(et_idx).statistics
        if offsets is None or not offsets.has_min_max:
            return _describe_slice_by_reading(path, vocab, source)
        lo = offsets.min if lo is None else min(lo, offsets.min)
        hi = offsets.max if hi is None else max(hi, offsets.max)
        if ets is not None and ets.has_min_max:
            max_et = ets.max if max_et is None else max(max_et, ets.max)
        elif row_group.num_rows and (ets is None or ets.null_count != row_group.num_rows):
            return _describe_slice_by_reading(path, vocab, source)
    if hi - lo + 1 != meta.num_rows:
        raise EngineInputError("internal", f"{path}: offsets {lo}..{hi} do not match {meta.num_rows} rows")
    return WrittenSlice(path, lo, hi, meta.num_rows, rfc3339(max_et))


def _describe_slice_by_reading(path: str, vocab: Vocab, source: str | pa.NativeFile | None) -> WrittenSlice:
    columns = [vocab.offset_column, vocab.event_time_column]
    table = pq.read_table(path if source is None else source, columns=columns)
    lo, hi = pc.min_max(table[vocab.offset_column]).values()
    max_et = pc.max(table[vocab.event_time_column]).as_py()
    return WrittenSlice(path, lo.as_py(), hi.as_py(), table.num_rows, rfc3339(max_et))


def rfc3339(value: datetime | date | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

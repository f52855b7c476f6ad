"""Reading a dataset's data back: its slices newest first, and the last records (`odf tail`)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model


def iter_slices(dataset: Dataset) -> Iterator[model.DataSlice]:
    """Data slices of AddData and ExecuteTransform blocks, newest first."""
    for _, block in dataset.iter_blocks():
        event = block.event
        if isinstance(event, model.AddData | model.ExecuteTransform) and event.new_data is not None:
            yield event.new_data


def read_slice(dataset: Dataset, data_slice: model.DataSlice) -> pa.Table:
    key = f"data/{data_slice.physical_hash}"
    local = dataset.store.local_path(key)
    try:
        if local is not None:
            return pq.read_table(local)
        return pq.read_table(pa.BufferReader(dataset.store.get(key)))
    except (OSError, pa.ArrowException) as e:
        raise OdfError(f"{key}: cannot read data slice: {e}") from None


def tail(dataset: Dataset, n: int) -> pa.Table | None:
    """The last `n` records in offset order, or None when the dataset has no data yet."""
    tables: list[pa.Table] = []
    rows = 0
    for data_slice in iter_slices(dataset):
        if rows >= n:
            break
        table = read_slice(dataset, data_slice)
        tables.append(table)
        rows += table.num_rows
    if not tables:
        return None
    table = pa.concat_tables(reversed(tables), promote_options="permissive")
    return table.slice(max(0, table.num_rows - n))

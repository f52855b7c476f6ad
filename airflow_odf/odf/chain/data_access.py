"""Reading a dataset's data back: its slices newest first, and the last records (`odf tail`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash


def iter_slices(dataset: Dataset) -> Iterator[model.DataSlice]:
    """Data slices of AddData and ExecuteTransform blocks, newest first."""
    for _, block in dataset.iter_blocks():
        event = block.event
        if isinstance(event, model.AddData | model.ExecuteTransform) and event.new_data is not None:
            yield event.new_data


class BlockNotInChainError(OdfError):
    """An as-of block that is not in the dataset's chain."""


def slices_as_of(dataset: Dataset, state: ChainState, block: Multihash) -> list[str]:
    """The physical hashes (text, oldest first) of the data slices up to and including `block`.

    The state's slice index (from the summary) lists every slice up to its head; the walk goes back
    from that head only as far as `block`, counting the slices committed after it, which are the
    index's last ones: a query as of a recent block reads few blocks, one as of an old block at most
    the chain. A block not in the chain: BlockNotInChainError (after walking to the Seed)."""
    return data_as_of(dataset, state, block)[0]


def data_as_of(
    dataset: Dataset, state: ChainState, block: Multihash
) -> tuple[list[str], model.SetDataSchema | None]:
    """The slices as `slices_as_of` finds them, and the schema in force at `block`: the head's, unless
    a SetDataSchema came after the block — then the walk goes on to the one before it (a table as of
    a block shows the columns it had then, not a column added later as nulls)."""
    newer = 0
    schema_changed = False
    blocks = dataset.iter_blocks(state.head)
    for h, found in blocks:
        if h == block:
            texts = state.data_slices.texts()
            slices = texts[: len(texts) - newer]
            if not schema_changed:
                return slices, state.schema
            for _, older in itertools.chain([(h, found)], blocks):
                if isinstance(older.event, model.SetDataSchema):
                    return slices, older.event
            return slices, None
        event = found.event
        if isinstance(event, model.AddData | model.ExecuteTransform) and event.new_data is not None:
            newer += 1
        elif isinstance(event, model.SetDataSchema):
            schema_changed = True
    raise BlockNotInChainError(f"block {block} is not in the chain (head {state.head})")


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

"""What the ODF view shows, gathered through the core alone (no Airflow, no web framework).

Everything here reads, nothing writes: the repository is opened through `ReadOnlyStore`, so even the
summary cache a reader would refresh stays as it is. Every answer is bounded whatever the history: a page
of the chain is `BLOCKS_PER_PAGE` blocks, the records are the newest `RECORDS` rows, read from the last
row groups of the newest slices (a slice in S3 or behind HTTP is fetched whole), and the records and the
schema history look back at most `SCAN_BLOCKS` blocks. Everything a repository holds is untrusted
text: callers escape it. The datasets' overview, their lineage and the schema history come from the core
(`airflow_odf.odf.repo.overview`, `lineage`, `history`), which `odf inspect` shares.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.checks.record import read_checks_record, summary_of
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import dump_manifest
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.evolution import odf_schema
from airflow_odf.odf.schema.text import schema_ddl, schema_yaml
from airflow_odf.odf.storage.http import ReadOnlyStoreError
from airflow_odf.odf.storage.store import ObjectStore
from airflow_odf.odf.storage.url import StoreCredentials, open_store

BLOCKS_PER_PAGE = 50
RECORDS = 50
SCAN_BLOCKS = 5000
MAX_CELL_CHARS = 200


class ReadOnlyStore(ObjectStore):
    """A store that refuses every write (`ReadOnlyStoreError`): what the view opens repositories with."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return repr(self.inner)

    def _refuse(self, key: str) -> ReadOnlyStoreError:
        return ReadOnlyStoreError(f"{self!r}: the ODF view is read-only (refused to write {key})")

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def size(self, key: str) -> int:
        return self.inner.size(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list(self, prefix: str) -> Iterator[str]:
        return self.inner.list(prefix)

    def local_path(self, key: str) -> Path | None:
        return self.inner.local_path(key)

    def child(self, prefix: str) -> ObjectStore:
        return ReadOnlyStore(self.inner.child(prefix))

    def put(self, key: str, data: bytes) -> None:
        raise self._refuse(key)

    def put_file(self, key: str, source: Path, *, move: bool = False) -> None:
        raise self._refuse(key)

    def delete(self, key: str) -> None:
        raise self._refuse(key)

    def compare_and_swap(self, key: str, expected: bytes | None, new: bytes | None) -> None:
        raise self._refuse(key)


def open_read_only(url: str, credentials: StoreCredentials | None = None) -> Repository:
    """The repository at `url` (file://, s3://), every write refused; RepositoryError when nothing marks
    it as a repository."""
    return Repository.in_store(ReadOnlyStore(open_store(url, credentials=credentials)), url)


# ----- schemas -----


@dataclass(frozen=True)
class SchemaText:
    ddl: str | None  # one line per column; None when a type has no DDL form
    yaml: str  # the whole schema, attributes included


def schema_text(schema: model.DataSchema) -> SchemaText:
    try:
        ddl: str | None = schema_ddl(schema).text
    except OdfError:
        ddl = None
    return SchemaText(ddl, schema_yaml(schema))


def current_schema(state: ChainState) -> SchemaText | None:
    """The schema at the head; None before the first SetDataSchema."""
    return None if state.schema is None else schema_text(odf_schema(state.schema))


# ----- a dataset's chain -----


@dataclass(frozen=True)
class BlockEntry:
    hash: str
    sequence_number: int
    system_time: str
    event: str  # the event's type, e.g. AddData
    summary: str
    prev: str | None
    checks: str | None = None  # `7/7 passed` for a commit whose quality checks ran (`info/checks`)


def _offsets(new_data: model.DataSlice | None) -> str:
    if new_data is None:
        return "no new records"
    interval = new_data.offset_interval
    count = interval.end - interval.start + 1
    return f"{count} record(s), offsets {interval.start}–{interval.end}"


def _watermark(event: Any) -> str:
    return f"; watermark {event.new_watermark}" if event.new_watermark is not None else ""


def event_summary(event: Any) -> str:
    """One line about a block's event, for the chain's list."""
    if isinstance(event, model.AddData):
        return _offsets(event.new_data) + _watermark(event)
    if isinstance(event, model.ExecuteTransform):
        return f"{_offsets(event.new_data)} from {len(event.query_inputs)} input(s){_watermark(event)}"
    if isinstance(event, model.Seed):
        return f"{event.dataset_kind.name.capitalize()} dataset {event.dataset_id}"
    if isinstance(event, model.SetDataSchema):
        legacy = " (legacy raw Arrow)" if event.schema is None else ""
        try:
            return f"{len(odf_schema(event).fields)} column(s){legacy}"
        except OdfError as e:
            return f"unreadable schema: {e}"
    if isinstance(event, model.SetTransform):
        return "inputs: " + ", ".join(i.alias or i.dataset_ref for i in event.inputs)
    if isinstance(event, model.AddPushSource):
        return f"push source {event.source_name}"
    if isinstance(event, model.SetInfo):
        return event.description or ""
    return ""


def _entry(
    block_hash: Multihash, block: model.MetadataBlock, checks: dict[str, list[dict[str, Any]]] | None = None
) -> BlockEntry:
    entry = (checks or {}).get(str(block_hash))
    return BlockEntry(
        hash=str(block_hash),
        sequence_number=block.sequence_number,
        system_time=str(block.system_time),
        event=type(block.event).__name__,
        summary=event_summary(block.event),
        prev=None if block.prev_block_hash is None else str(block.prev_block_hash),
        checks=None if entry is None else summary_of(entry),
    )


@dataclass(frozen=True)
class ChainPage:
    blocks: list[BlockEntry]  # newest first
    older: str | None  # where the next page starts; None: this page reaches the Seed


def chain_page(dataset: Dataset, start: Multihash, limit: int = BLOCKS_PER_PAGE) -> ChainPage:
    """`limit` blocks from `start` back towards the Seed, each commit with the checks it passed."""
    checks = read_checks_record(dataset)
    blocks: list[BlockEntry] = []
    for block_hash, block in dataset.iter_blocks(start):
        if len(blocks) == limit:
            return ChainPage(blocks, str(block_hash))
        blocks.append(_entry(block_hash, block, checks))
    return ChainPage(blocks, None)


@dataclass(frozen=True)
class BlockDetail:
    entry: BlockEntry
    manifest: str  # the block in manifest YAML (what `odf log` prints)


def block_detail(dataset: Dataset, block_hash: Multihash) -> BlockDetail:
    block = dataset.block(block_hash)
    return BlockDetail(_entry(block_hash, block), dump_manifest(block))


# ----- the latest records -----


@dataclass(frozen=True)
class Records:
    columns: list[str]
    rows: list[list[str]]  # newest first, each cell as text (long values cut)


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


def _parquet(dataset: Dataset, key: str) -> pq.ParquetFile:
    local = dataset.store.local_path(key)
    return pq.ParquetFile(local if local is not None else pa.BufferReader(dataset.store.get(key)))


def _last_rows(dataset: Dataset, data_slice: model.DataSlice, wanted: int) -> pa.Table:
    """The slice's last `wanted` rows, reading only its last row groups."""
    key = f"data/{data_slice.physical_hash}"
    try:
        parquet = _parquet(dataset, key)
        groups: list[pa.Table] = []
        rows = 0
        for index in reversed(range(parquet.num_row_groups)):
            if rows >= wanted:
                break
            group = parquet.read_row_group(index)
            groups.append(group)
            rows += group.num_rows
    except (OSError, pa.ArrowException) as e:
        raise OdfError(f"{key}: cannot read data slice: {e}") from None
    if not groups:
        return pa.table({})
    table = pa.concat_tables(reversed(groups), promote_options="permissive")
    return table.slice(max(0, table.num_rows - wanted))


def latest_records(dataset: Dataset, start: Multihash, limit: int = RECORDS) -> Records | None:
    """The newest `limit` records as of block `start`, newest first; None when there is no data yet (or
    none within `SCAN_BLOCKS` blocks)."""
    columns: list[str] | None = None
    rows: list[list[str]] = []
    for scanned, (_, block) in enumerate(dataset.iter_blocks(start)):
        if scanned == SCAN_BLOCKS:
            break
        event = block.event
        if not isinstance(event, model.AddData | model.ExecuteTransform) or event.new_data is None:
            continue
        table = _last_rows(dataset, event.new_data, limit - len(rows))
        if columns is None:
            columns = table.column_names
        for record in reversed(table.to_pylist()):
            rows.append([_cell(record.get(c)) for c in columns])
        if len(rows) >= limit:
            break
    return None if columns is None else Records(columns, rows)

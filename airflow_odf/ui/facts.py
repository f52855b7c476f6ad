"""What the ODF view shows, gathered through the core alone (no Airflow, no web framework).

Everything here reads, nothing writes: the repository is opened through `ReadOnlyStore`, so even the
summary cache a reader would refresh stays as it is. Every answer is bounded whatever the history: a page
of the chain is `BLOCKS_PER_PAGE` blocks, the records are the newest `RECORDS` rows, read from the last
row groups of the newest slices (a slice in S3 or behind HTTP is fetched whole), and the records and the
schema history look back at most `SCAN_BLOCKS` blocks. Everything a repository holds is untrusted
text: callers escape it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.chain.verification import read_record
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import dump_manifest
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.repo.repository import ListedDataset, Repository
from airflow_odf.odf.schema.evolution import SchemaChange, diff_schemas, odf_schema
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


# ----- the last verification (the record kept beside the chain) -----


@dataclass(frozen=True)
class Verification:
    """Which head was last verified, when and how."""

    head: str
    time: str
    how: str


def last_verification(dataset: Dataset) -> Verification | None:
    """The dataset's verification record as a person reads it; None when there is none (or it is
    unreadable: the core then ignores it too)."""
    record = read_record(dataset)
    entry = record.integrity
    if entry is None:
        return None
    how = "full" if entry.full else "incremental"
    if record.replay is not None and record.replay.head == entry.head:
        engine = record.replay.engine
        how += ", transforms replayed" + (f" on {engine}" if engine else "")
    return Verification(head=str(entry.head), time=str(entry.verified_at), how=how)


# ----- the repository: its datasets and their lineage -----


@dataclass(frozen=True)
class DatasetRow:
    """One dataset of the repository; a dataset that cannot be read has `error` and no state."""

    name: str
    dataset_id: str | None
    kind: str | None = None
    head: str | None = None
    blocks: int | None = None
    records: int | None = None
    last_update: str | None = None
    verification: Verification | None = None
    inputs: tuple[tuple[str, str], ...] = ()  # (dataset id, alias) of a derivative's inputs
    error: str | None = None


def dataset_row(dataset: Dataset, name: str) -> tuple[DatasetRow, ChainState]:
    """A dataset's row and its state; OdfError when it cannot be read."""
    dataset.existing_head()
    state = dataset.state()
    inputs = state.transform.inputs if state.transform is not None else []
    row = DatasetRow(
        name=name,
        dataset_id=None if state.dataset_id is None else str(state.dataset_id),
        kind=state.kind.name.capitalize() if state.kind is not None else None,
        head=str(state.head),
        blocks=state.num_blocks,
        records=state.num_records,
        last_update=None if state.system_time is None else str(state.system_time),
        verification=last_verification(dataset),
        inputs=tuple((str(DatasetId.parse(i.dataset_ref)), i.alias or i.dataset_ref) for i in inputs),
    )
    return row, state


def _listed_row(repo: Repository, entry: ListedDataset) -> DatasetRow:
    try:
        return dataset_row(repo.dataset_of(entry), entry.name)[0]
    except OdfError as e:
        did = None if entry.dataset_id is None else str(entry.dataset_id)
        return DatasetRow(entry.name, did, error=str(e))


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


def dataset_rows(repo: Repository) -> list[DatasetRow]:
    """Every dataset, sorted by name; a broken one is listed with its error, never hiding the others."""
    return [_listed_row(repo, entry) for entry in repo.scan()]


@dataclass(frozen=True)
class LineageNode:
    key: str  # the dataset id
    name: str
    kind: str | None  # None: not in this repository (an input known only by its alias)


@dataclass(frozen=True)
class Lineage:
    nodes: list[LineageNode]
    edges: list[tuple[str, str]]  # (input's key, derivative's key)


def lineage(rows: Sequence[DatasetRow]) -> Lineage:
    """Datasets as nodes, each derivative's inputs as edges; an input that is not in the repository is a
    node of its own, named by the alias the derivative gives it."""
    nodes = {r.dataset_id: LineageNode(r.dataset_id, r.name, r.kind or "?") for r in rows if r.dataset_id}
    edges = []
    for row in rows:
        for input_id, alias in row.inputs:
            nodes.setdefault(input_id, LineageNode(input_id, alias, None))
            if row.dataset_id:
                edges.append((input_id, row.dataset_id))
    return Lineage(list(nodes.values()), edges)


# ----- a dataset's chain -----


@dataclass(frozen=True)
class BlockEntry:
    hash: str
    sequence_number: int
    system_time: str
    event: str  # the event's type, e.g. AddData
    summary: str
    prev: str | None


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


def _entry(block_hash: Multihash, block: model.MetadataBlock) -> BlockEntry:
    return BlockEntry(
        hash=str(block_hash),
        sequence_number=block.sequence_number,
        system_time=str(block.system_time),
        event=type(block.event).__name__,
        summary=event_summary(block.event),
        prev=None if block.prev_block_hash is None else str(block.prev_block_hash),
    )


@dataclass(frozen=True)
class ChainPage:
    blocks: list[BlockEntry]  # newest first
    older: str | None  # where the next page starts; None: this page reaches the Seed


def chain_page(dataset: Dataset, start: Multihash, limit: int = BLOCKS_PER_PAGE) -> ChainPage:
    """`limit` blocks from `start` back towards the Seed."""
    blocks: list[BlockEntry] = []
    for block_hash, block in dataset.iter_blocks(start):
        if len(blocks) == limit:
            return ChainPage(blocks, str(block_hash))
        blocks.append(_entry(block_hash, block))
    return ChainPage(blocks, None)


@dataclass(frozen=True)
class BlockDetail:
    entry: BlockEntry
    manifest: str  # the block in manifest YAML (what `odf log` prints)


def block_detail(dataset: Dataset, block_hash: Multihash) -> BlockDetail:
    block = dataset.block(block_hash)
    return BlockDetail(_entry(block_hash, block), dump_manifest(block))


# ----- schema history -----


@dataclass(frozen=True)
class SchemaVersion:
    block: BlockEntry
    text: SchemaText
    legacy: bool
    changes: list[SchemaChange] | None  # from the version before; None: the first (or none seen before)


@dataclass(frozen=True)
class SchemaHistory:
    versions: list[SchemaVersion]  # newest first
    complete: bool  # False: the scan stopped after SCAN_BLOCKS blocks


def schema_history(dataset: Dataset, start: Multihash, max_blocks: int = SCAN_BLOCKS) -> SchemaHistory:
    """Every SetDataSchema from `start` back (within `max_blocks` blocks), each with its evolution from
    the one before, by the core's evolution rules."""
    found: list[tuple[Multihash, model.MetadataBlock]] = []
    complete = True
    for scanned, (block_hash, block) in enumerate(dataset.iter_blocks(start)):
        if scanned == max_blocks:
            complete = False
            break
        if isinstance(block.event, model.SetDataSchema):
            found.append((block_hash, block))
    schemas = [odf_schema(block.event) for _, block in found]
    versions = []
    for i, (block_hash, block) in enumerate(found):
        older = found[i + 1][1].event if i + 1 < len(found) else None
        changes = None
        if older is not None:
            changes = diff_schemas(schemas[i + 1], schemas[i], ignore_optionality=older.schema is None)
        versions.append(
            SchemaVersion(
                _entry(block_hash, block), schema_text(schemas[i]), block.event.schema is None, changes
            )
        )
    return SchemaHistory(versions, complete)


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

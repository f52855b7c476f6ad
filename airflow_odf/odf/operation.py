"""One engine operation, as ingest and transform both run it: the operation's scratch folder, the SQL
steps and declared schemas in the engine contract's form, the schema events of the engine's output, the
staging of written slices and checkpoints for the commit, and the result a task reports.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from airflow_odf.odf.chain.dataset import STAGING_PREFIX, Dataset, StagedObject
from airflow_odf.odf.chain.offsets import Interval, consumed_interval, interval_plain, merged
from airflow_odf.odf.chain.reconcile import Reconciliation
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.engine_client.contract import (
    IngestResponse,
    InputFile,
    OutputSlice,
    SqlStep,
    schema_from_text,
    schema_to_text,
)
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, SHA3_256, Multihash
from airflow_odf.odf.format.sql_policy import PREPROCESS_INPUT, SqlPolicyError, sql_refusal, steps_of
from airflow_odf.odf.hashing.parquet_hashes import (
    HashedParts,
    KnownColumn,
    parquet_hashes,
    physical_hash_of_file,
)
from airflow_odf.odf.repo.operation_folders import create_claimed
from airflow_odf.odf.schema.data_schema import data_schema_from_arrow, data_schema_to_arrow, strip_encoding
from airflow_odf.odf.schema.ddl import parse_ddl_schema
from airflow_odf.odf.schema.policy import schema_events_for
from airflow_odf.odf.storage.local import fsync_path
from airflow_odf.odf.storage.store import ObjectStore


class IngestError(OdfError):
    """The ingest was refused; nothing was committed. `kind` is the engine's or the core's reason."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class IngestResult:
    """What an ingest or transform did. `new_blocks` and `records` are its own commits; `new_head` is
    the head it left the dataset at, which after a lost race (`reconciliation`) may hold blocks another
    writer committed meanwhile."""

    dataset: str
    dataset_id: str
    prev_head: str | None
    new_head: str | None
    new_blocks: list[str] = field(default_factory=list)
    records: int = 0
    quarantined: int = 0
    reconciliation: Reconciliation = field(default_factory=Reconciliation)
    # a transform's: input DID -> the offsets its own ExecuteTransforms read of it (merged); None: an ingest
    input_offsets: dict[str, list[Interval]] | None = None
    # the quality checks' results (docs/checks.md), one per check; None when no checks were declared
    checks: list[dict[str, Any]] | None = None

    @property
    def up_to_date(self) -> bool:
        return not self.new_blocks

    def as_dict(self) -> dict[str, Any]:
        """The XCom / `--format json` form; `reconciled` only when another writer got there first."""
        plain = {
            "dataset": self.dataset,
            "dataset_id": self.dataset_id,
            "prev_head": self.prev_head,
            "new_head": self.new_head,
            "new_blocks": list(self.new_blocks),
            "records": self.records,
            "up_to_date": self.up_to_date,
        }
        if self.reconciliation.lost_races:
            plain["reconciled"] = self.reconciliation.as_dict()
        if self.input_offsets is not None:
            plain["input_offsets"] = {
                did: [interval_plain(i) for i in intervals] for did, intervals in self.input_offsets.items()
            }
        if self.checks is not None:
            plain["checks"] = [dict(c) for c in self.checks]
        return plain

    def add_checks(self, results: list[dict[str, Any]]) -> None:
        """The results of one commit's checks: each check keeps one entry, that of its last commit."""
        by_name = {c["name"]: c for c in self.checks or []}
        by_name.update({c["name"]: c for c in results})
        self.checks = list(by_name.values())

    def add_inputs_read(self, event: model.ExecuteTransform) -> None:
        """Counts what one committed ExecuteTransform read of each input into `input_offsets`."""
        offsets = self.input_offsets if self.input_offsets is not None else {}
        for qi in event.query_inputs:
            interval = consumed_interval(qi.prev_offset, qi.new_offset)
            read = offsets.get(str(qi.dataset_id), [])
            offsets[str(qi.dataset_id)] = (
                read if interval is None else merged([*read, (interval.start, interval.end)])
            )
        self.input_offsets = offsets


class operation_dir:
    """A fresh scratch directory for one engine run, removed afterwards whatever happens; while it runs,
    this process holds the folder's owner lock, which tells `odf gc` that it is alive."""

    def __init__(self, work_dir: Path) -> None:
        self.path = work_dir / "operations" / uuid.uuid4().hex

    def __enter__(self) -> Path:
        self._owner = create_claimed(self.path)
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._owner.close()


def read_schema_text(read: Any, alias: str) -> str | None:
    """The read step's declared schema (`schema` or `ddlSchema`) as engine-contract text, if any."""
    try:
        if getattr(read, "schema", None) is not None:
            return schema_to_text(data_schema_to_arrow(read.schema))
        if getattr(read, "ddl_schema", None):
            return schema_to_text(data_schema_to_arrow(parse_ddl_schema(read.ddl_schema)))
    except OdfError as e:
        raise IngestError("bad-schema", f"{alias}: read.schema: {e}") from None
    return None


def sql_steps(sql: model.TransformSql, inputs: list[str], dataset: str, what: str) -> list[SqlStep]:
    """The SQL steps of a `what` (transform, preprocess) of `dataset`, in the engine contract's form, once
    the SQL policy accepts them over `inputs`; SqlPolicyError naming the dataset and the step if not."""
    refusal = sql_refusal(sql, inputs, what)
    if refusal is not None:
        raise SqlPolicyError(f"{dataset}: {refusal}")
    return [SqlStep(query, alias) for query, alias in steps_of(sql)]


def preprocess_steps(preprocess: model.TransformSql | None, dataset: str) -> list[SqlStep] | None:
    """A source's preprocess (SQL over its read data, `input`) as the engine's steps, once the SQL policy
    accepts them; None for a source without one."""
    return None if preprocess is None else sql_steps(preprocess, [PREPROCESS_INPUT], dataset, "preprocess")


def local_object(dataset: Dataset, key: str, op_dir: Path) -> str:
    """Where the engine reads an object: in place when it can (local disk, or a bucket the cluster
    reads itself), else a copy staged in the operation's folder."""
    direct = dataset.store.engine_uri(key)
    if direct is not None:
        return direct
    path = op_dir / "objects" / key.replace("/", "_")
    path.parent.mkdir(parents=True, exist_ok=True)
    dataset.store.get_file(key, path)
    return str(path)


def response_schema(response: IngestResponse) -> model.DataSchema | None:
    """The ODF schema of the engine's output (without Arrow encoding hints), if it reported one."""
    if response.output_schema is None:
        return None
    return strip_encoding(data_schema_from_arrow(schema_from_text(response.output_schema)))


def schema_events(state: ChainState, response: IngestResponse, alias: str, policy: str) -> list[Any]:
    """SetDataSchema when the dataset has none yet or `policy` lets the new data's schema evolve it;
    raises SchemaEvolutionError when the new data does not fit (`schema.policy`)."""
    slice_schema = response_schema(response)
    if slice_schema is None:
        return []
    return list(
        schema_events_for(
            state.schema,
            slice_schema,
            policy=policy,
            alias=alias,
            has_no_nulls=lambda column: _no_nulls(response, column),
        )
    )


@dataclass(frozen=True)
class Staging:
    """Where the engine writes an operation's output when it writes into the dataset's bucket itself
    (`ObjectStore.engine_writes_in_place`): `cache/operations/<operation id>/` in the dataset's store.
    The commit copies what it names from there, and the folder is emptied once the commit is done; a
    failed or killed operation leaves it to `odf gc` (by age: S3 has no locks to tell a live one)."""

    key: str  # the folder's key in the dataset's store
    uri: str  # the same folder as the engine names it (`s3a://bucket/...`)

    @classmethod
    def of(cls, dataset: Dataset, op_dir: Path) -> Staging | None:
        """The operation's staging folder, or None when the engine writes to the local folder."""
        return cls.in_store(dataset.store, op_dir)

    @classmethod
    def in_store(cls, store: ObjectStore, op_dir: Path) -> Staging | None:
        """The operation's staging folder in `store` (a dataset's, or a repository's for a query, which
        reads several datasets and writes none), or None when the engine writes to the local folder."""
        if not store.engine_writes_in_place:
            return None
        key = f"{STAGING_PREFIX}/{op_dir.name}"
        uri = store.engine_uri(key)
        return None if uri is None else cls(key, uri)

    @property
    def out_dir(self) -> str:
        return f"{self.uri}/out"

    def key_of(self, uri: str) -> str:
        """The store key of a file the engine wrote (it must be inside this folder)."""
        if not uri.startswith(f"{self.uri}/"):
            raise IngestError("engine", f"the engine wrote {uri}, outside the operation's folder {self.uri}")
        return f"{self.key}/{uri.removeprefix(self.uri + '/')}"

    def clear(self, dataset: Dataset) -> None:
        """Removes everything the operation staged (after its commit, or when it had nothing to commit)."""
        self.clear_in(dataset.store)

    def clear_in(self, store: ObjectStore) -> None:
        """Removes everything the operation staged in `store` (the one `in_store` was given)."""
        for key, _ in list(store.list_tree(self.key)):
            store.delete(key)


def engine_out_dir(staging: Staging | None, op_dir: Path) -> str:
    """Where the engine writes: the staging folder in the bucket, else the local operation folder."""
    return staging.out_dir if staging is not None else str(op_dir / "out")


def engine_inputs(dataset: Dataset, staging: Staging | None, inputs: list[InputFile]) -> list[InputFile]:
    """The inputs as the engine reads them: files on this disk are uploaded into the staging folder
    first when the engine runs where it cannot see this disk (that is the source data entering the
    repository's bucket, once); others are left as they are."""
    if staging is None:
        return inputs
    staged = []
    for index, item in enumerate(inputs):
        local = Path(item.path)
        if "://" in item.path or not local.is_file():
            staged.append(item)
            continue
        key = f"{staging.key}/inputs/{index:05d}-{_safe_name(local.name)}"
        dataset.store.put_file(key, local)
        uri = dataset.store.engine_uri(key)
        assert uri is not None  # the store writes in place, so it names its objects for the engine
        staged.append(InputFile(uri, item.source_event_time, size=local.stat().st_size))
    return staged


def _safe_name(name: str) -> str:
    """A file name as a key part that every S3 client and URI parser reads back unchanged (the
    extension is kept: readers go by it, e.g. for compression)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "input"


def stage_slice(
    written: OutputSlice,
    known: Mapping[str, KnownColumn] | None = None,
    parts: HashedParts | None = None,
    *,
    flush: bool = False,
    staging: Staging | None = None,
) -> tuple[model.DataSlice, StagedObject]:
    """The DataSlice of a written file (both hashes, offsets, size) and its move into `data/`; `known`,
    `parts`: columns hashed ahead (`parquet_hashes`). `flush`: the file will stay on this disk, so its
    pages are written out while it is hashed (I/O under CPU work), and the commit's fsync finds them
    there. `staging`: the engine wrote the file into the bucket and hashed it there (the engine is
    trusted, as the ODF model has it): its hashes and size are taken, and the commit copies it."""
    interval = model.OffsetInterval(start=written.offset_start, end=written.offset_end)
    if staging is not None:
        physical = _engine_hash(written.physical_hash, SHA3_256, written.path)
        logical = _engine_hash(written.logical_hash, ARROW0_SHA3_256, written.path)
        if written.size is None:
            raise IngestError("engine", f"the engine did not say the size of {written.path}")
        data_slice = model.DataSlice(
            logical_hash=logical, physical_hash=physical, offset_interval=interval, size=written.size
        )
        return data_slice, StagedObject(f"data/{physical}", source_key=staging.key_of(written.path))
    path = Path(written.path)
    with ThreadPoolExecutor(1, thread_name_prefix="odf-flush") as flusher:
        flushed = flusher.submit(fsync_path, path) if flush else None
        logical, physical = parquet_hashes(path, known, parts)
        if flushed is not None:
            flushed.result()
    data_slice = model.DataSlice(
        logical_hash=logical, physical_hash=physical, offset_interval=interval, size=path.stat().st_size
    )
    return data_slice, StagedObject(f"data/{physical}", path)


def fetch_written(
    slices: list[OutputSlice], dataset: Dataset, staging: Staging | None
) -> Callable[[Path], list[Path]]:
    """Puts the slice files the engine wrote into a folder (moved from the operation's folder, or
    copied out of the bucket's staging folder): what a rejected slice's quarantine keeps."""

    def fetch(into: Path) -> list[Path]:
        kept = []
        for index, written in enumerate(slices):
            target = into / f"slice-{index:03d}.parquet"
            if staging is not None:
                dataset.store.get_file(staging.key_of(written.path), target)
            else:
                shutil.move(written.path, target)
            kept.append(target)
        return kept

    return fetch


def stage_checkpoint(path: Path) -> tuple[model.Checkpoint, StagedObject]:
    """The Checkpoint of a written file and its move into `checkpoints/`."""
    checkpoint = model.Checkpoint(physical_hash=physical_hash_of_file(path), size=path.stat().st_size)
    return checkpoint, StagedObject(f"checkpoints/{checkpoint.physical_hash}", path)


def stage_engine_checkpoint(
    response: IngestResponse, staging: Staging | None
) -> tuple[model.Checkpoint, StagedObject] | None:
    """The engine's new merge state, if it wrote one: a local file hashed here, or a file in the
    bucket with the hash and size the engine gave (`stage_slice`)."""
    path = response.new_checkpoint_path
    if path is None:
        return None
    if staging is None:
        return stage_checkpoint(Path(path))
    physical = _engine_hash(response.new_checkpoint_physical_hash, SHA3_256, path)
    if response.new_checkpoint_size is None:
        raise IngestError("engine", f"the engine did not say the size of {path}")
    checkpoint = model.Checkpoint(physical_hash=physical, size=response.new_checkpoint_size)
    return checkpoint, StagedObject(f"checkpoints/{physical}", source_key=staging.key_of(path))


def _engine_hash(text: str | None, code: int, path: str) -> Multihash:
    """A hash the engine reported for a file it wrote, checked for its form."""
    try:
        found = Multihash.parse(text or "")
    except OdfError as e:
        raise IngestError("engine", f"the engine's hash of {path} is not a multihash: {e}") from None
    if found.code != code:
        raise IngestError("engine", f"the engine's hash of {path} has multihash code {found.code:#x}")
    return found


def _no_nulls(response: IngestResponse, column: str) -> bool:
    for written in response.slices:
        if written.null_columns is not None:  # the engine looked at the file where it wrote it
            if column in written.null_columns:
                return False
            continue
        meta = pq.ParquetFile(written.path).metadata
        idx = meta.schema.to_arrow_schema().get_field_index(column)
        for rg in range(meta.num_row_groups):
            stats = meta.row_group(rg).column(idx).statistics
            if stats is None or stats.null_count is None or stats.null_count > 0:
                return False
    return True


def committed_with_extra(
    dataset: Dataset, alias: str, marker: Mapping[str, Any], *, since: Multihash | None = None
) -> IngestResult | None:
    """The result of an earlier commit whose AddData blocks carry `marker` in their `extra`, else None.

    A retried task uses this to tell that its first try's commit already landed (walks the chain from
    the head; `since`: only the blocks after that one). The SetDataSchema committed with the first
    AddData (same commit, same system time) is part of that result, so the retry reports exactly what
    the first try would have.
    """
    if not marker:
        return None
    marked: list[tuple[Multihash, model.MetadataBlock]] = []
    for h, block in dataset.iter_blocks(stop=since):
        extra = getattr(block.event, "extra", None) or {}
        schema_of_the_commit = (
            marked
            and isinstance(block.event, model.SetDataSchema)
            and block.system_time == marked[-1][1].system_time
        )
        if all(extra.get(k) == v for k, v in marker.items()) or schema_of_the_commit:
            marked.append((h, block))
        elif marked:
            break
    if not marked:
        return None
    state = dataset.state()
    first = marked[-1][1]
    prev = None if first.prev_block_hash is None else str(first.prev_block_hash)
    records = 0
    for _, block in marked:
        data = getattr(block.event, "new_data", None)
        if data is not None:
            records += data.offset_interval.end - data.offset_interval.start + 1
    new_blocks = [str(h) for h, _ in reversed(marked)]
    result = IngestResult(alias, str(state.dataset_id), prev, str(marked[0][0]), new_blocks)
    result.records = records
    return result

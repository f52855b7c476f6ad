"""Root-dataset ingestion, coordinator side: plan, run the engine, hash, commit.

One iteration (DESIGN.md "Data flow of one ingest task"): read the dataset's state from its summary,
fetch and prepare (polling) or take the given files (push), send the engine one request, hash what it
wrote (physical SHA3-256, logical arrow-digest), then commit SetDataSchema (first time) and one AddData
per written slice, moving the head by compare-and-swap. Bad input fails the iteration before anything
is committed; a polling pull repeats iterations while the source has more.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from airflow_odf.odf import model
from airflow_odf.odf.chain_rules import ChainState
from airflow_odf.odf.data_schema import data_schema_from_arrow, data_schema_to_arrow, strip_encoding
from airflow_odf.odf.dataset import Dataset, StagedObject
from airflow_odf.odf.ddl_schema import parse_ddl_schema
from airflow_odf.odf.engine_contract import (
    BAD_RECORDS_FAIL,
    IngestRequest,
    IngestResponse,
    InputFile,
    OutputSlice,
    SqlStep,
    Vocab,
    schema_from_text,
    schema_to_text,
)
from airflow_odf.odf.engine_runner import EngineRunner
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.fetch import FetchOptions, SourceFetcher
from airflow_odf.odf.logical_hash import HashedParts, KnownColumn, parquet_hashes, physical_hash_of_file
from airflow_odf.odf.manifests import union_to_plain
from airflow_odf.odf.multiformats import Multihash
from airflow_odf.odf.prepare import prepare
from airflow_odf.odf.schema_evolution import odf_schema
from airflow_odf.odf.schema_policy import STRICT, schema_events_for
from airflow_odf.odf.storage import fsync_path
from airflow_odf.odf.timestamps import Timestamp

_log = logging.getLogger(__name__)
ENGINE_EXTRA_KEY = "airflow-provider-odf.dev/engine"
SHELL_STEPS_ENV = "ODF_ALLOW_SHELL_STEPS"
_STATEFUL_MERGES = ("Ledger", "Snapshot", "UpsertStream")


class IngestError(OdfError):
    """The ingest was refused; nothing was committed. `kind` is the engine's or the core's reason."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class IngestOptions:
    """How to ingest: scratch space, fetch switches, slicing and the broken-record policy.

    `extra` is recorded in every AddData's `extra` attributes (e.g. the Airflow run that committed it).
    `schema_policy` (`strict` or `additive`) decides whether new data may evolve the schema.
    `source_dir` is where relative FilesGlob paths are resolved (default: the working directory).
    """

    work_dir: Path
    fetch_uncacheable: bool = False
    set_watermark: Timestamp | None = None
    files_per_batch: int = 1
    max_records_per_slice: int | None = None
    target_slice_bytes: int = 1024 * 1024 * 1024
    bad_records: str = BAD_RECORDS_FAIL
    allow_shell: bool = field(default_factory=lambda: os.environ.get(SHELL_STEPS_ENV) == "1")
    max_iterations: int | None = None
    extra: dict[str, Any] | None = None
    schema_policy: str = STRICT
    source_dir: Path | None = None
    log: Callable[[str], None] = _log.info


@dataclass
class IngestResult:
    dataset: str
    dataset_id: str
    prev_head: str | None
    new_head: str | None
    new_blocks: list[str] = field(default_factory=list)
    records: int = 0
    quarantined: int = 0

    @property
    def up_to_date(self) -> bool:
        return not self.new_blocks

    def as_dict(self) -> dict[str, Any]:
        """The XCom / `--format json` form."""
        return {
            "dataset": self.dataset,
            "dataset_id": self.dataset_id,
            "prev_head": self.prev_head,
            "new_head": self.new_head,
            "new_blocks": list(self.new_blocks),
            "records": self.records,
            "up_to_date": self.up_to_date,
        }


@dataclass(frozen=True)
class _Run:
    """What stays the same across the iterations of one pull."""

    dataset: Dataset
    runner: EngineRunner
    options: IngestOptions
    result: IngestResult


@dataclass(frozen=True)
class _Source:
    name: str
    read: Any
    preprocess: model.TransformSql | None
    merge: Any


def _new_result(alias: str, state: ChainState) -> IngestResult:
    head = None if state.head is None else str(state.head)
    return IngestResult(alias, str(state.dataset_id), head, head)


def _root_state(dataset: Dataset, alias: str) -> ChainState:
    state = dataset.state()
    if state.kind is not model.DatasetKind.ROOT:
        raise IngestError("not-root", f"{alias} is not a Root dataset: only Root datasets ingest data")
    return state


def pull_polling(
    dataset: Dataset,
    alias: str,
    runner: EngineRunner,
    options: IngestOptions,
    *,
    system_time: Timestamp | None = None,
) -> IngestResult:
    """Ingests from the dataset's polling source until it has no more (one AddData group per iteration)."""
    state = _root_state(dataset, alias)
    if state.polling_source is None:
        raise IngestError("no-source", f"{alias} has no active polling source (SetPollingSource)")
    source = state.polling_source
    result = _new_result(alias, state)
    cache_dir = options.work_dir / "fetch" / str(state.dataset_id).removeprefix("did:odf:")
    fetcher = SourceFetcher(
        source.fetch,
        FetchOptions(
            cache_dir=cache_dir,
            has_previous_data=state.last_offset is not None,
            fetch_uncacheable=options.fetch_uncacheable,
            files_per_batch=options.files_per_batch,
            allow_shell=options.allow_shell,
            base_dir=options.source_dir,
            log=options.log,
        ),
    )
    run = _Run(dataset, runner, options, result)
    iteration = 0
    while options.max_iterations is None or iteration < options.max_iterations:
        iteration += 1
        now = system_time or Timestamp.now()
        prev_source_state = state.source_states.get("default")
        fetched = fetcher.fetch(prev_source_state, now)
        if fetched.up_to_date and options.set_watermark is None:
            if fetched.uncacheable:
                options.log(f"{alias}: source is uncacheable and was ingested before; use fetch_uncacheable")
            break
        try:
            with operation_dir(options.work_dir) as op_dir:
                inputs = [
                    InputFile(
                        # absolute: the engine's working directory is not ours (a session started elsewhere)
                        os.path.abspath(
                            prepare(source.prepare or [], f.path, op_dir, allow_shell=options.allow_shell)
                        ),
                        (f.source_event_time or now).isoformat(),
                    )
                    for f in fetched.files
                ]
                src = _Source("default", source.read, source.preprocess, source.merge)
                state = _run_and_commit(run, state, src, inputs, fetched.new_source_state, now, op_dir)
        finally:
            for f in fetched.files:  # downloads, not the user's own files (file://, FilesGlob)
                if f.path.is_relative_to(cache_dir):
                    f.path.unlink(missing_ok=True)
        if not fetched.has_more:
            break
    return result


def push_ingest(
    dataset: Dataset,
    alias: str,
    runner: EngineRunner,
    files: Sequence[Path],
    options: IngestOptions,
    *,
    source_name: str | None = None,
    event_time: Timestamp | None = None,
    system_time: Timestamp | None = None,
) -> IngestResult:
    """Ingests the given files through one of the dataset's push sources (AddPushSource)."""
    state = _root_state(dataset, alias)
    push = _push_source(state, alias, source_name)
    result = _new_result(alias, state)
    now = system_time or Timestamp.now()
    for path in files:
        if not Path(path).is_file():
            raise IngestError("bad-input", f"{path}: no such file to ingest")
    with operation_dir(options.work_dir) as op_dir:
        inputs = [InputFile(os.path.abspath(p), (event_time or now).isoformat()) for p in files]
        src = _Source(push.source_name, push.read, push.preprocess, push.merge)
        _run_and_commit(_Run(dataset, runner, options, result), state, src, inputs, None, now, op_dir)
    return result


def push_ingest_bytes(
    dataset: Dataset,
    alias: str,
    runner: EngineRunner,
    data: bytes,
    options: IngestOptions,
    **kwargs: Any,
) -> IngestResult:
    """Ingests in-memory data (spilled to a file first, as the reference does)."""
    with operation_dir(options.work_dir) as spill_dir:
        path = spill_dir / "input-data"
        path.write_bytes(data)
        return push_ingest(dataset, alias, runner, [path], options, **kwargs)


def _push_source(state: ChainState, alias: str, source_name: str | None) -> model.AddPushSource:
    sources = state.push_sources
    if source_name is not None:
        if source_name not in sources:
            known = ", ".join(sorted(sources)) or "none"
            raise IngestError(
                "no-source", f"{alias} has no push source {source_name!r} (push sources: {known})"
            )
        return sources[source_name]
    if not sources:
        raise IngestError("no-source", f"{alias} has no push source (AddPushSource)")
    if len(sources) > 1:
        raise IngestError(
            "no-source", f"{alias} has several push sources ({', '.join(sorted(sources))}): name one"
        )
    return next(iter(sources.values()))


class operation_dir:
    """A fresh scratch directory for one engine run, removed afterwards whatever happens."""

    def __init__(self, work_dir: Path) -> None:
        self.path = work_dir / "operations" / uuid.uuid4().hex

    def __enter__(self) -> Path:
        self.path.mkdir(parents=True)
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


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


def sql_steps(sql: model.TransformSql) -> list[SqlStep]:
    """The SQL steps of a preprocess or transform, in the engine contract's form."""
    if sql.queries:
        return [SqlStep(q.query, q.alias) for q in sql.queries]
    return [SqlStep(sql.query or "")]


def _merge_state_inputs(dataset: Dataset, state: ChainState, op_dir: Path) -> tuple[str | None, list[str]]:
    """The checkpointed merge state, if it is as of the last data, and every previous slice (oldest first,
    for rebuilding the state when the checkpoint is missing, stale or of another strategy) — one walk.

    Our ingests put the checkpoint on the block with the last slice; data added later without one (by
    another tool) makes it stale.
    """
    if state.last_offset is None:
        return None, []
    adds = [
        block.event
        for _, block in dataset.iter_blocks(state.head)
        if isinstance(block.event, model.AddData) and block.event.new_data is not None
    ]
    checkpoint = None
    if state.checkpoint is not None and adds and adds[0].new_checkpoint == state.checkpoint:
        checkpoint = local_object(dataset, f"checkpoints/{state.checkpoint.physical_hash}", op_dir)
    paths = [local_object(dataset, f"data/{e.new_data.physical_hash}", op_dir) for e in reversed(adds)]
    return checkpoint, paths


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


def _run_and_commit(
    run: _Run,
    state: ChainState,
    source: _Source,
    inputs: list[InputFile],
    new_source_state: model.SourceState | None,
    system_time: Timestamp,
    op_dir: Path,
) -> ChainState:
    dataset, runner, options, result = run.dataset, run.runner, run.options, run.result
    alias = result.dataset
    if state.system_time is not None and system_time < state.system_time:
        system_time = state.system_time  # the chain's time may not go back; rows and block share it
    merge_plain = union_to_plain(model.MergeStrategy, source.merge)
    stateful = merge_plain["kind"] in _STATEFUL_MERGES
    merge_checkpoint, merge_slices = (
        _merge_state_inputs(dataset, state, op_dir) if stateful and inputs else (None, [])
    )
    response = IngestResponse()
    if inputs:
        request = IngestRequest(
            operation_id=op_dir.name,
            dataset_id=str(state.dataset_id),
            dataset_alias=alias,
            system_time=system_time.isoformat(),
            next_offset=0 if state.last_offset is None else state.last_offset + 1,
            inputs=inputs,
            read=union_to_plain(model.ReadStep, source.read),
            merge=merge_plain,
            out_dir=str(op_dir / "out"),
            vocab=Vocab.of(state.vocab),
            read_schema=read_schema_text(source.read, alias),
            preprocess=None if source.preprocess is None else sql_steps(source.preprocess),
            dataset_schema=(
                schema_to_text(data_schema_to_arrow(odf_schema(state.schema))) if state.schema else None
            ),
            prev_checkpoint_path=merge_checkpoint,
            prev_data_paths=merge_slices,
            prev_watermark=state.watermark.isoformat() if state.watermark else None,
            max_records_per_slice=options.max_records_per_slice,
            target_slice_bytes=options.target_slice_bytes,
            bad_records=options.bad_records,
        )
        response = IngestResponse.from_json(runner.run(request.to_json(), op_dir))
        if response.error is not None:
            raise IngestError(response.error.kind, f"{alias}: {response.error.message}")
        if response.num_quarantined:
            options.log(f"{alias}: {response.num_quarantined} bad record(s) quarantined in the operation")
            result.quarantined += response.num_quarantined
    events, objects = _events(state, response, new_source_state, options, alias, dataset.on_local_disk)
    if not events:
        return state
    commit = dataset.commit(events, system_time=system_time, expected_head=state.head, objects=objects)
    result.new_head = str(commit.new_head)
    result.new_blocks += [str(h) for h in commit.new_blocks]
    result.records += response.num_records
    options.log(f"{alias}: committed {len(commit.new_blocks)} block(s), {response.num_records} record(s)")
    return commit.state


def _events(
    state: ChainState,
    response: IngestResponse,
    new_source_state: model.SourceState | None,
    options: IngestOptions,
    alias: str,
    flush: bool,
) -> tuple[list[Any], list[StagedObject]]:
    """SetDataSchema (first time) and the AddData blocks for what the engine wrote; [] if nothing changed.
    `flush`: the slices stay on this disk (`stage_slice`)."""
    events: list[Any] = schema_events(state, response, alias, options.schema_policy)
    objects: list[StagedObject] = []
    watermark = state.watermark
    prev_offset = state.last_offset
    prev_checkpoint = state.checkpoint.physical_hash if state.checkpoint else None
    extra = {ENGINE_EXTRA_KEY: response.engine, **(options.extra or {})} if response.engine else options.extra
    checkpoint = None
    if response.new_checkpoint_path:
        checkpoint, staged = stage_checkpoint(Path(response.new_checkpoint_path))
        objects.append(staged)
    *middle, last = response.slices or [None]
    new_data = None
    for written in [*middle, last]:
        if written is None:
            break
        new_data, staged = stage_slice(written, flush=flush)
        objects.append(staged)
        if written.max_event_time is not None:
            watermark = _max(watermark, Timestamp.parse(written.max_event_time))
        if written is not last:
            events.append(
                model.AddData(
                    prev_checkpoint=prev_checkpoint,
                    prev_offset=prev_offset,
                    new_data=new_data,
                    new_watermark=watermark,
                    extra=extra,
                )
            )
            prev_offset = written.offset_end
    # the last block carries the checkpoint, the final watermark and the source state
    new_watermark = _final_watermark(watermark, options)
    source_changed = new_source_state is not None and new_source_state != state.source_states.get(
        new_source_state.source_name
    )
    if new_data is not None or new_watermark != state.watermark or source_changed:
        events.append(
            model.AddData(
                prev_checkpoint=prev_checkpoint,
                prev_offset=prev_offset,
                new_data=new_data,
                new_checkpoint=checkpoint,
                new_watermark=new_watermark,
                new_source_state=new_source_state if new_data is not None or source_changed else None,
                extra=extra,
            )
        )
    return events, objects


def response_schema(response: IngestResponse) -> model.DataSchema | None:
    """The ODF schema of the engine's output (without Arrow encoding hints), if it reported one."""
    if response.output_schema is None:
        return None
    return strip_encoding(data_schema_from_arrow(schema_from_text(response.output_schema)))


def schema_events(state: ChainState, response: IngestResponse, alias: str, policy: str) -> list[Any]:
    """SetDataSchema when the dataset has none yet or `policy` lets the new data's schema evolve it;
    raises SchemaEvolutionError when the new data does not fit (`schema_policy`)."""
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


def stage_slice(
    written: OutputSlice,
    known: Mapping[str, KnownColumn] | None = None,
    parts: HashedParts | None = None,
    *,
    flush: bool = False,
) -> tuple[model.DataSlice, StagedObject]:
    """The DataSlice of a written file (both hashes, offsets, size) and its move into `data/`; `known`,
    `parts`: columns hashed ahead (`parquet_hashes`). `flush`: the file will stay on this disk, so its
    pages are written out while it is hashed (I/O under CPU work), and the commit's fsync finds them
    there."""
    path = Path(written.path)
    with ThreadPoolExecutor(1, thread_name_prefix="odf-flush") as flusher:
        flushed = flusher.submit(fsync_path, path) if flush else None
        logical, physical = parquet_hashes(path, known, parts)
        if flushed is not None:
            flushed.result()
    data_slice = model.DataSlice(
        logical_hash=logical,
        physical_hash=physical,
        offset_interval=model.OffsetInterval(start=written.offset_start, end=written.offset_end),
        size=path.stat().st_size,
    )
    return data_slice, StagedObject(f"data/{physical}", path)


def stage_checkpoint(path: Path) -> tuple[model.Checkpoint, StagedObject]:
    """The Checkpoint of a written file and its move into `checkpoints/`."""
    checkpoint = model.Checkpoint(physical_hash=physical_hash_of_file(path), size=path.stat().st_size)
    return checkpoint, StagedObject(f"checkpoints/{checkpoint.physical_hash}", path)


def _max(a: Timestamp | None, b: Timestamp) -> Timestamp:
    return b if a is None or b > a else a


def _final_watermark(computed: Timestamp | None, options: IngestOptions) -> Timestamp | None:
    """`--set-watermark` wins when it does not move the watermark back (it may not: monotonic)."""
    if options.set_watermark is None:
        return computed
    return _max(computed, options.set_watermark)


def _no_nulls(response: IngestResponse, column: str) -> bool:
    for written in response.slices:
        meta = pq.ParquetFile(written.path).metadata
        idx = meta.schema.to_arrow_schema().get_field_index(column)
        for rg in range(meta.num_row_groups):
            stats = meta.row_group(rg).column(idx).statistics
            if stats is None or stats.null_count is None or stats.null_count > 0:
                return False
    return True


def committed_with_extra(dataset: Dataset, alias: str, key: str, value: str) -> IngestResult | None:
    """The result of an earlier commit whose AddData blocks carry `extra[key] == value`, else None.

    A retried task uses this to tell that its first try's commit already landed (walks the chain from
    the head). The SetDataSchema committed with the first AddData (same commit, same system time) is
    part of that result, so the retry reports exactly what the first try would have.
    """
    marked: list[tuple[Multihash, model.MetadataBlock]] = []
    for h, block in dataset.iter_blocks():
        extra = getattr(block.event, "extra", None) or {}
        schema_of_the_commit = (
            marked
            and isinstance(block.event, model.SetDataSchema)
            and block.system_time == marked[-1][1].system_time
        )
        if extra.get(key) == value or schema_of_the_commit:
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

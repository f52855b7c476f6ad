"""Derivative-dataset transforms, coordinator side: plan, run the engine per batch, commit.

Each batch of the plan (`transform.plan`) becomes one engine request — the SQL of the SetTransform over
each input's records in the planned offset range — and one ExecuteTransform block naming exactly the
input blocks it consumed, preceded by SetDataSchema the first time. The output watermark is the minimum
of the inputs' watermarks as of the consumed blocks (inputs without any are left out, as the reference's
DataFusion engine does); the checkpoint records each input's watermark (`transform.checkpoint`).
Nothing is committed when the engine refuses the query or its output. When an input diverged and
recovery was asked for, the derivative's history is rebuilt without its ExecuteTransforms in the same
head move as the first re-processed batch.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_odf.odf.chain.claims import EngineClaim
from airflow_odf.odf.chain.dataset import Dataset, StagedObject
from airflow_odf.odf.chain.reconcile import reconciling_from
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.checks.gate import after_commit, gate
from airflow_odf.odf.checks.request import check_suite_sql, checks_request
from airflow_odf.odf.checks.results import CheckResult
from airflow_odf.odf.checks.spec import CheckSuite
from airflow_odf.odf.engine_client.contract import (
    IngestResponse,
    OutputSlice,
    TransformInputSpec,
    TransformRequest,
    Vocab,
    schema_to_text,
)
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.format.sql_policy import transform_inputs
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.hashing.hash_ahead import HashAhead
from airflow_odf.odf.operation import (
    IngestError,
    IngestResult,
    Staging,
    engine_out_dir,
    fetch_written,
    local_object,
    operation_dir,
    schema_events,
    sql_steps,
    stage_checkpoint,
    stage_slice,
)
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.data_schema import data_schema_to_arrow
from airflow_odf.odf.schema.evolution import odf_schema
from airflow_odf.odf.schema.policy import STRICT
from airflow_odf.odf.storage.store import ObjectNotFoundError
from airflow_odf.odf.transform.checkpoint import read_checkpoint, write_checkpoint
from airflow_odf.odf.transform.plan import (
    PinnedHeadProcessedError,
    PlannedInput,
    TransformBatch,
    TransformPlan,
    TransformPlanError,
    plan_transform,
)

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransformOptions:
    """How to transform: scratch space, inputs pinned to given heads, the batch size, whether an input
    that diverged (was reset or compacted) makes the derivative re-process everything from scratch, and
    whether the output may evolve the schema (`schema_policy`: strict or additive).
    """

    work_dir: Path
    pinned_heads: Mapping[str, Any] | None = None
    max_input_records: int | None = None
    recover_diverged: bool = False
    schema_policy: str = STRICT
    checks: CheckSuite | None = None  # judged on each batch's output before its commit (docs/checks.md)
    quarantine: bool = False  # keep a rejected output in the scratch space (`odf inspect rejected`)
    log: Callable[[str], None] = _log.info


def run_transform(
    repo: Repository,
    name: str,
    runner: EngineRunner,
    options: TransformOptions,
    *,
    system_time: Timestamp | None = None,
) -> IngestResult:
    """Brings a derivative dataset up to date with its inputs (or their pinned heads), batch by batch.

    The derivative's state is read once: the plan is made against it, the first batch commits onto its
    head (compare-and-swap) and each further batch onto the head the one before committed. Each input
    is opened once, by the plan. When another writer (an overlapping run) moves the head first, the
    transform plans again from that head — often finding the inputs already processed, up to date — and
    goes on from there (`chain.reconcile`). Overlapping transforms sharing a scratch space find out
    before the engine work: the first to need it claims the derivative until it ends, the others wait,
    then see the head moved and plan again — usually up to date (`chain.claims`).
    """
    if options.checks:  # refused before anything is planned or run
        check_suite_sql(options.checks)
    dataset = repo.dataset(name)
    state = dataset.state()
    head = None if state.head is None else str(state.head)
    result = IngestResult(name, str(state.dataset_id), head, head, input_offsets={})
    if options.checks:
        result.checks = []

    def attempt(current: ChainState) -> ChainState:
        return _plan_and_run(repo, dataset, current, name, runner, options, result, system_time, claim)

    with EngineClaim(options.work_dir, dataset, name, options.log) as claim:
        final = reconciling_from(
            dataset, state, attempt, what=name, record=result.reconciliation, log=options.log
        )
    result.new_head = None if final.head is None else str(final.head)
    return result


def _plan_and_run(
    repo: Repository,
    dataset: Dataset,
    state: ChainState,
    name: str,
    runner: EngineRunner,
    options: TransformOptions,
    result: IngestResult,
    system_time: Timestamp | None,
    claim: EngineClaim,
) -> ChainState:
    """Plans against `state` and runs the plan's batches; the state the last one committed."""
    plan = _plan(repo, dataset, state, name, options)
    if plan.up_to_date:
        options.log(f"{name}: up to date ({plan.reason})" if plan.reason else f"{name}: up to date")
        return state
    rebuild = plan.from_scratch
    if rebuild:
        options.log(f"{name}: {plan.reason}; the derivative's own data is reset")
    for batch in plan.batches:
        state = _run_batch(
            repo,
            dataset,
            state,
            name,
            batch,
            runner,
            options,
            result,
            system_time=system_time,
            rebuild=rebuild,
            claim=claim,
        )
        rebuild = False
    return state


def _plan(
    repo: Repository, dataset: Dataset, state: ChainState, name: str, options: TransformOptions
) -> TransformPlan:
    """The plan against `state`. An input pinned to a block the derivative already processed (another
    run got there first) has nothing new: it is planned as if pinned to the last block processed."""
    pins = dict(options.pinned_heads or {})
    while True:
        try:
            return plan_transform(
                repo,
                dataset,
                state=state,
                pinned_heads=pins or None,
                max_input_records=options.max_input_records,
                recover_from_scratch=options.recover_diverged,
            )
        except PinnedHeadProcessedError as e:
            options.log(
                f"{name}: input {e.alias!r} is pinned to {e.pinned}, which was already processed "
                f"(up to {e.processed}): nothing new from it"
            )
            processed = {k: e.processed for k, v in pins.items() if str(v).strip() == str(e.pinned)}
            if not processed:
                raise
            pins.update(processed)


@dataclass(frozen=True)
class BatchOutput:
    """What one batch produced: the events to commit and the objects they reference."""

    events: list[Any]
    objects: list[StagedObject]
    num_records: int
    written: list[OutputSlice] = field(default_factory=list)  # the engine's slice files
    check_results: list[dict[str, Any]] | None = None  # the engine's, with checks in the request

    @property
    def execute_transform(self) -> model.ExecuteTransform:
        event = self.events[-1]
        assert isinstance(event, model.ExecuteTransform)
        return event


def execute_batch(
    repo: Repository,
    state: ChainState,
    name: str,
    batch: TransformBatch,
    runner: EngineRunner,
    op_dir: Path,
    system_time: Timestamp,
    schema_policy: str = STRICT,
    *,
    to_commit: bool = False,
    dataset: Dataset | None = None,
    checks: dict[str, Any] | None = None,
) -> BatchOutput:
    """Runs one batch on the engine against the derivative's `state` (as of before the batch).

    Shared by transforms (`to_commit`: the output goes into the dataset) and by reproducibility
    verification, which replays recorded batches. `dataset`: the derivative, if the caller has it open.
    """
    if dataset is None and state.dataset_id is not None:
        dataset = repo.dataset_by_id(state.dataset_id)
    staging = None if dataset is None else Staging.of(dataset, op_dir)
    vocab = Vocab.of(state.vocab)
    ahead = HashAhead(
        offset=vocab.offset_column,
        op=vocab.operation_type_column,
        system_time=vocab.system_time_column,
        next_offset=_next_offset(state),
        time=system_time,
        max_rows=batch.num_records,
        parts_dir=_parts_ready_dir(op_dir),
    )
    # the engine hashes what it writes into the bucket: nothing to hash ahead here
    with ahead if staging is None else contextlib.nullcontext():
        response = run_engine(repo, state, name, batch, runner, op_dir, system_time, staging, checks)
    events: list[Any] = schema_events(state, response, name, schema_policy)
    objects: list[StagedObject] = []
    new_data = None
    if response.slices:
        [written] = response.slices
        flush = to_commit and dataset is not None and dataset.on_local_disk
        known, parts = (ahead.columns, ahead.parts) if staging is None else (None, None)
        new_data, staged = stage_slice(written, known, parts, flush=flush, staging=staging)
        objects.append(staged)
    if staging is not None and dataset is not None and not to_commit:
        staging.clear(dataset)  # a replay keeps only the hashes
    watermarks = _input_watermarks(repo, dataset, state, batch)
    new_checkpoint = None
    if watermarks:
        path = op_dir / "checkpoint.tar"
        write_checkpoint(watermarks, path)
        new_checkpoint, staged = stage_checkpoint(path)
        objects.append(staged)
    watermark = min(watermarks.values()) if watermarks else None
    if state.watermark is not None and (watermark is None or watermark < state.watermark):
        watermark = state.watermark  # never moves back, never disappears
    events.append(
        model.ExecuteTransform(
            query_inputs=batch.execute_inputs(),
            prev_checkpoint=state.checkpoint.physical_hash if state.checkpoint else None,
            prev_offset=state.last_offset,
            new_data=new_data,
            new_checkpoint=new_checkpoint,
            new_watermark=watermark,
        )
    )
    return BatchOutput(events, objects, response.num_records, response.slices, response.check_results)


def _parts_ready_dir(op_dir: Path) -> Path:
    """Where the engine publishes the output's part files while it writes them (`parts_ahead`)."""
    return op_dir / "parts-ready"


def run_engine(
    repo: Repository,
    state: ChainState,
    name: str,
    batch: TransformBatch,
    runner: EngineRunner,
    op_dir: Path,
    system_time: Timestamp,
    staging: Staging | None = None,
    checks: dict[str, Any] | None = None,
) -> IngestResponse:
    """The engine's response to the SetTransform of `state` over the batch; raises on its errors.
    `staging`: the engine writes into the bucket (and publishes no parts to hash ahead); `checks`: the
    request's quality checks (`checks.request`)."""
    assert state.transform is not None
    request = TransformRequest(
        operation_id=op_dir.name,
        dataset_id=str(state.dataset_id),
        dataset_alias=name,
        system_time=system_time.isoformat(),
        next_offset=_next_offset(state),
        queries=sql_steps(state.transform.transform, transform_inputs(state.transform), name, "transform"),
        inputs=[request_input(repo, planned, op_dir) for planned in batch.inputs],
        out_dir=engine_out_dir(staging, op_dir),
        parts_ready_dir=None if staging is not None else str(_parts_ready_dir(op_dir)),
        vocab=Vocab.of(state.vocab),
        checks=checks,
    )
    response = IngestResponse.from_json(runner.run(request.to_json(), op_dir))
    if response.error is not None:
        raise IngestError(response.error.kind, f"{name}: {response.error.message}")
    return response


def _next_offset(state: ChainState) -> int:
    return 0 if state.last_offset is None else state.last_offset + 1


def _input_dataset(repo: Repository, planned: PlannedInput) -> Dataset:
    """The input as its plan opened it, else opened now (replays and probes plan no run)."""
    return planned.dataset if planned.dataset is not None else repo.dataset_by_id(planned.dataset_id)


def request_input(repo: Repository, planned: PlannedInput, op_dir: Path) -> TransformInputSpec:
    """One input of an engine request: its schema, its slice files (local copies) and offset range."""
    source = _input_dataset(repo, planned)
    interval = planned.offset_interval
    if planned.schema is None:
        raise TransformPlanError(f"input {planned.alias!r} has no schema")
    return TransformInputSpec(
        alias=planned.alias,
        dataset_id=str(planned.dataset_id),
        schema=schema_to_text(data_schema_to_arrow(odf_schema(planned.schema))),
        data_paths=[local_object(source, f"data/{s.physical_hash}", op_dir) for s in planned.slices],
        offset_start=None if interval is None else interval.start,
        offset_end=None if interval is None else interval.end,
        vocab=Vocab.of(planned.vocab),
    )


def _previous_watermarks(dataset: Dataset | None, state: ChainState) -> dict[DatasetId, Timestamp] | None:
    """The inputs' watermarks from the previous checkpoint; None when there is no readable one."""
    if dataset is None or state.checkpoint is None:
        return None
    try:
        data = dataset.store.get(f"checkpoints/{state.checkpoint.physical_hash}")
    except ObjectNotFoundError:
        return None
    return read_checkpoint(data)


def _input_watermarks(
    repo: Repository, dataset: Dataset | None, state: ChainState, batch: TransformBatch
) -> dict[DatasetId, Timestamp]:
    """Each input's watermark as of the last block the batch consumes (inputs with none left out).

    The batch's own explicit watermarks, else the previous checkpoint's; only when a previous run left
    no readable checkpoint (another engine's, or none) is the input's chain walked back for it.
    """
    previous = _previous_watermarks(dataset, state)
    out: dict[DatasetId, Timestamp] = {}
    for planned in batch.inputs:
        watermark: Timestamp | None
        if planned.explicit_watermarks:
            watermark = max(w.event_time for w in planned.explicit_watermarks)
        elif previous is not None:
            watermark = previous.get(planned.dataset_id)
        elif planned.prev_block_hash is not None:
            watermark = _walk_watermark(_input_dataset(repo, planned), planned.prev_block_hash)
        else:
            watermark = None
        if watermark is not None:
            out[planned.dataset_id] = watermark
    return out


def _walk_watermark(dataset: Dataset, start: Multihash) -> Timestamp | None:
    for _, block in dataset.iter_blocks(start):
        event = block.event
        if isinstance(event, model.AddData | model.ExecuteTransform) and event.new_watermark is not None:
            return event.new_watermark
    return None


def _metadata_only(dataset: Dataset) -> tuple[list[Any], Multihash]:
    """The derivative's events without its ExecuteTransforms (oldest first), and its Seed's hash."""
    blocks = list(dataset.iter_blocks())
    seed_hash, _ = blocks[-1]
    kept = [b.event for _, b in reversed(blocks[:-1]) if not isinstance(b.event, model.ExecuteTransform)]
    return kept, seed_hash


def _checks_request(
    dataset: Dataset, state: ChainState, options: TransformOptions, op_dir: Path
) -> dict[str, Any] | None:
    """The request's checks, with the derivative's slices when a check reads the whole dataset."""
    if not options.checks:
        return None
    history = [local_object(dataset, f"data/{h}", op_dir) for h in state.data_slices]
    return checks_request(options.checks, history if options.checks.reads_dataset else None)


def _gate(
    dataset: Dataset,
    state: ChainState,
    name: str,
    output: BatchOutput,
    options: TransformOptions,
    op_dir: Path,
) -> list[CheckResult] | None:
    """The checks' results when all passed (None without checks or output); ChecksFailed otherwise,
    after the staged objects were removed (and the output kept, with `quarantine`)."""
    if not options.checks or not output.written:
        return None
    staging = Staging.of(dataset, op_dir)
    try:
        return gate(
            options.checks,
            output.check_results,
            alias=name,
            dataset_id=str(state.dataset_id),
            head=None if state.head is None else str(state.head),
            records=output.num_records,
            operation_id=op_dir.name,
            quarantine_in=options.work_dir if options.quarantine else None,
            fetch=fetch_written(output.written, dataset, staging),
            input_heads={
                str(qi.dataset_id): str(qi.new_block_hash)
                for qi in output.execute_transform.query_inputs
                if qi.new_block_hash is not None
            },
        )
    except OdfError:
        if staging is not None:
            staging.clear(dataset)
        raise


def _run_batch(
    repo: Repository,
    dataset: Dataset,
    state: ChainState,
    name: str,
    batch: TransformBatch,
    runner: EngineRunner,
    options: TransformOptions,
    result: IngestResult,
    *,
    system_time: Timestamp | None,
    rebuild: bool,
    claim: EngineClaim,
) -> ChainState:
    """Runs and commits one batch onto `state` (the derivative as the run knows it); returns the state
    it committed."""
    head = state.head
    claim.before_engine_work(state)  # one operation at a time, and not from a head that moved meanwhile
    system_time = system_time or Timestamp.now()
    if state.system_time is not None and system_time < state.system_time:
        system_time = state.system_time
    kept: list[Any] = []
    onto = None
    if rebuild:  # the state the metadata-only chain will have: no data, offsets, checkpoint or watermark
        kept, onto = _metadata_only(dataset)
        state = state.without_data()
    with operation_dir(options.work_dir) as op_dir:
        output = execute_batch(
            repo,
            state,
            name,
            batch,
            runner,
            op_dir,
            system_time,
            options.schema_policy,
            to_commit=True,
            dataset=dataset,
            checks=_checks_request(dataset, state, options, op_dir),
        )
        checked = _gate(dataset, state, name, output, options, op_dir)
        commit = dataset.commit(
            kept + output.events,
            system_time=system_time,
            expected_head=head,
            objects=output.objects,
            onto=onto,
        )
        staging = Staging.of(dataset, op_dir)
        if staging is not None:
            staging.clear(dataset)
    if checked is not None:
        after_commit(dataset, str(commit.new_head), checked, options.log)
        result.add_checks([r.as_dict() for r in checked])
    result.new_head = str(commit.new_head)
    result.new_blocks += [str(h) for h in commit.new_blocks]
    result.records += output.num_records
    result.add_inputs_read(output.execute_transform)
    options.log(f"{name}: committed {len(commit.new_blocks)} block(s), {output.num_records} record(s)")
    return commit.state

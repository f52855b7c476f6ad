"""One ingest iteration (DESIGN.md "Data flow of one ingest task"): send the engine one request with
the dataset's state, hash what it wrote (physical SHA3-256, logical arrow-digest), then commit
SetDataSchema (first time) and one AddData per written slice, moving the head by compare-and-swap.
Bad input fails the iteration before anything is committed.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_odf.odf.chain.claims import EngineClaim
from airflow_odf.odf.chain.dataset import Dataset, StagedObject
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.checks.gate import after_commit, gate
from airflow_odf.odf.checks.request import checks_request
from airflow_odf.odf.checks.results import CheckResult
from airflow_odf.odf.engine_client.contract import (
    IngestRequest,
    IngestResponse,
    InputFile,
    Vocab,
    schema_to_text,
)
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import union_to_plain
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.sources import Source
from airflow_odf.odf.operation import (
    IngestError,
    IngestResult,
    Staging,
    engine_inputs,
    engine_out_dir,
    fetch_written,
    local_object,
    preprocess_steps,
    read_schema_text,
    schema_events,
    stage_engine_checkpoint,
    stage_slice,
)
from airflow_odf.odf.schema.data_schema import data_schema_to_arrow
from airflow_odf.odf.schema.evolution import odf_schema
from airflow_odf.utils.engine_json import NEEDS_PREVIOUS_DATA

ENGINE_EXTRA_KEY = "airflow-provider-odf.dev/engine"
_STATEFUL_MERGES = ("Ledger", "Snapshot", "UpsertStream")


@dataclass(frozen=True)
class Run:
    """What stays the same across the iterations of one pull (or the attempts of one push); `claim` is
    taken at the first engine work and held until the operation ends (`chain.claims`)."""

    dataset: Dataset
    runner: EngineRunner
    options: IngestOptions
    result: IngestResult
    claim: EngineClaim


def engine_claim(dataset: Dataset, alias: str, options: IngestOptions) -> EngineClaim:
    """The claim of an ingest of `dataset`, in the scratch space of `options`."""
    return EngineClaim(options.work_dir, dataset, alias, options.log)


def new_result(alias: str, state: ChainState) -> IngestResult:
    head = None if state.head is None else str(state.head)
    return IngestResult(alias, str(state.dataset_id), head, head)


def root_state(dataset: Dataset, alias: str) -> ChainState:
    state = dataset.state()
    if state.kind is not model.DatasetKind.ROOT:
        raise IngestError("not-root", f"{alias} is not a Root dataset: only Root datasets ingest data")
    return state


def _merge_state_inputs(
    dataset: Dataset, state: ChainState, op_dir: Path
) -> tuple[str | None, list[str], int]:
    """What the engine starts its merge from: the checkpointed merge state if it is current, and then
    none of the previous slices, only their number (withheld: the engine asks for them in the rare case
    that it cannot use the checkpoint); else every previous slice, oldest first, to rebuild the state.

    Read from the summary's slice index, not the chain. On a store the engine cannot read itself each
    object handed over is a download, which is why the slices are handed over only when needed.
    """
    if state.last_offset is None:
        return None, [], 0
    if state.checkpoint is None or not state.checkpoint_is_current:
        return None, _previous_slices(dataset, state, op_dir), 0
    checkpoint = local_object(dataset, f"checkpoints/{state.checkpoint.physical_hash}", op_dir)
    return checkpoint, [], len(state.data_slices)


def _previous_slices(dataset: Dataset, state: ChainState, op_dir: Path) -> list[str]:
    """Every data slice of the dataset, oldest first, where the engine reads it."""
    return [local_object(dataset, f"data/{h}", op_dir) for h in state.data_slices]


def _run_engine(run: Run, state: ChainState, request: IngestRequest, op_dir: Path) -> IngestResponse:
    """The engine's answer to `request`. An engine that cannot use the checkpoint whose slices were
    withheld asks for them (NEEDS_PREVIOUS_DATA); they are then staged and the request sent again, from
    an empty output folder — the result is the one a request with all slices would have given."""
    response = IngestResponse.from_json(run.runner.run(request.to_json(), op_dir))
    error = response.error
    if error is None or error.kind != NEEDS_PREVIOUS_DATA or not request.prev_data_withheld:
        return response
    run.options.log(f"{request.dataset_alias}: the engine asked for the previous slices: {error.message}")
    shutil.rmtree(request.out_dir, ignore_errors=True)
    request = dataclasses.replace(
        request, prev_data_paths=_previous_slices(run.dataset, state, op_dir), prev_data_withheld=0
    )
    return IngestResponse.from_json(run.runner.run(request.to_json(), op_dir))


def _checks_request(run: Run, state: ChainState, op_dir: Path) -> dict[str, Any] | None:
    """The request's checks, with the dataset's slices when a check reads the whole dataset."""
    suite = run.options.checks
    if not suite:
        return None
    history = suite.reads_dataset and state.last_offset is not None
    return checks_request(suite, _previous_slices(run.dataset, state, op_dir) if history else None)


def _gate(
    run: Run, state: ChainState, response: IngestResponse, staging: Staging | None, op_dir: Path
) -> list[CheckResult] | None:
    """The checks' results when all passed (None without checks or without new data); ChecksFailed
    otherwise, after the staged objects were removed (and the slice kept, with `quarantine`)."""
    suite = run.options.checks
    if not suite or not response.slices:
        return None
    try:
        return gate(
            suite,
            response.check_results,
            alias=run.result.dataset,
            dataset_id=str(state.dataset_id),
            head=None if state.head is None else str(state.head),
            records=response.num_records,
            operation_id=op_dir.name,
            quarantine_in=run.options.work_dir if run.options.quarantine else None,
            fetch=fetch_written(response.slices, run.dataset, staging),
        )
    except OdfError:
        if staging is not None:
            staging.clear(run.dataset)
        raise


def run_and_commit(
    run: Run,
    state: ChainState,
    source: Source,
    inputs: list[InputFile],
    new_source_state: model.SourceState | None,
    system_time: Timestamp,
    op_dir: Path,
) -> ChainState:
    dataset, options, result = run.dataset, run.options, run.result
    alias = result.dataset
    if state.system_time is not None and system_time < state.system_time:
        system_time = state.system_time  # the chain's time may not go back; rows and block share it
    if inputs:  # engine work ahead: one operation at a time, and not from a head that moved meanwhile
        run.claim.before_engine_work(state)
    merge_plain = union_to_plain(model.MergeStrategy, source.merge)
    stateful = merge_plain["kind"] in _STATEFUL_MERGES
    merge_checkpoint, merge_slices, withheld = (
        _merge_state_inputs(dataset, state, op_dir) if stateful and inputs else (None, [], 0)
    )
    response = IngestResponse()
    staging = Staging.of(dataset, op_dir)
    checked: list[CheckResult] | None = None
    if inputs:
        request = IngestRequest(
            operation_id=op_dir.name,
            dataset_id=str(state.dataset_id),
            dataset_alias=alias,
            system_time=system_time.isoformat(),
            next_offset=0 if state.last_offset is None else state.last_offset + 1,
            inputs=engine_inputs(dataset, staging, inputs),
            read=union_to_plain(model.ReadStep, source.read),
            merge=merge_plain,
            out_dir=engine_out_dir(staging, op_dir),
            vocab=Vocab.of(state.vocab),
            read_schema=read_schema_text(source.read, alias),
            preprocess=preprocess_steps(source.preprocess, alias),
            dataset_schema=(
                schema_to_text(data_schema_to_arrow(odf_schema(state.schema))) if state.schema else None
            ),
            prev_checkpoint_path=merge_checkpoint,
            prev_data_paths=merge_slices,
            prev_data_withheld=withheld,
            prev_watermark=state.watermark.isoformat() if state.watermark else None,
            max_records_per_slice=options.max_records_per_slice,
            target_slice_bytes=options.target_slice_bytes,
            bad_records=options.bad_records,
            checks=_checks_request(run, state, op_dir),
        )
        response = _run_engine(run, state, request, op_dir)
        if response.error is not None:
            raise IngestError(response.error.kind, f"{alias}: {response.error.message}")
        checked = _gate(run, state, response, staging, op_dir)
        if response.num_quarantined:
            options.log(f"{alias}: {response.num_quarantined} bad record(s) quarantined in the operation")
    events, objects = _events(
        state, response, new_source_state, options, alias, dataset.on_local_disk, staging
    )
    if not events:
        result.quarantined += response.num_quarantined
        if staging is not None:
            staging.clear(dataset)
        return state
    commit = dataset.commit(events, system_time=system_time, expected_head=state.head, objects=objects)
    if staging is not None:
        staging.clear(dataset)
    if inputs and checked is not None:
        after_commit(dataset, str(commit.new_head), checked, options.log)
        result.add_checks([r.as_dict() for r in checked])
    result.new_head = str(commit.new_head)
    result.new_blocks += [str(h) for h in commit.new_blocks]
    result.records += response.num_records
    result.quarantined += response.num_quarantined  # counted once the commit landed (a lost race retries)
    options.log(f"{alias}: committed {len(commit.new_blocks)} block(s), {response.num_records} record(s)")
    return commit.state


def _events(
    state: ChainState,
    response: IngestResponse,
    new_source_state: model.SourceState | None,
    options: IngestOptions,
    alias: str,
    flush: bool,
    staging: Staging | None,
) -> tuple[list[Any], list[StagedObject]]:
    """SetDataSchema (first time) and the AddData blocks for what the engine wrote; [] if nothing changed.
    `flush`: the slices stay on this disk; `staging`: the engine wrote and hashed them in the bucket
    (`stage_slice`)."""
    events: list[Any] = schema_events(state, response, alias, options.schema_policy)
    objects: list[StagedObject] = []
    watermark = state.watermark
    prev_offset = state.last_offset
    prev_checkpoint = state.checkpoint.physical_hash if state.checkpoint else None
    extra = {ENGINE_EXTRA_KEY: response.engine, **(options.extra or {})} if response.engine else options.extra
    checkpoint = None
    staged_checkpoint = stage_engine_checkpoint(response, staging)
    if staged_checkpoint is not None:
        checkpoint, staged = staged_checkpoint
        objects.append(staged)
    *middle, last = response.slices or [None]
    new_data = None
    for written in [*middle, last]:
        if written is None:
            break
        new_data, staged = stage_slice(written, flush=flush, staging=staging)
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


def _max(a: Timestamp | None, b: Timestamp) -> Timestamp:
    return b if a is None or b > a else a


def _final_watermark(computed: Timestamp | None, options: IngestOptions) -> Timestamp | None:
    """`--set-watermark` wins when it does not move the watermark back (it may not: monotonic)."""
    if options.set_watermark is None:
        return computed
    return _max(computed, options.set_watermark)

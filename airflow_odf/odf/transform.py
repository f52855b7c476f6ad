"""Derivative-dataset transforms, coordinator side: plan, run the engine per batch, commit.

Each batch of the plan (`transform_plan`) becomes one engine request — the SQL of the SetTransform over
each input's records in the planned offset range — and one ExecuteTransform block naming exactly the
input blocks it consumed, preceded by SetDataSchema the first time. The output watermark is the minimum
of the inputs' watermarks as of the consumed blocks (as the reference). Nothing is committed when the
engine refuses the query or its output.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_odf.odf import model
from airflow_odf.odf.data_schema import data_schema_to_arrow
from airflow_odf.odf.dataset import Dataset, StagedObject
from airflow_odf.odf.engine_contract import (
    IngestResponse,
    SqlStep,
    TransformInputSpec,
    TransformRequest,
    Vocab,
    schema_to_text,
)
from airflow_odf.odf.engine_runner import EngineRunner
from airflow_odf.odf.ingest import (
    IngestError,
    IngestResult,
    local_object,
    operation_dir,
    schema_events,
    stage_slice,
)
from airflow_odf.odf.repository import Repository
from airflow_odf.odf.schema_evolution import odf_schema
from airflow_odf.odf.timestamps import Timestamp
from airflow_odf.odf.transform_plan import PlannedInput, TransformBatch, TransformPlanError, plan_transform

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransformOptions:
    """How to transform: scratch space, inputs pinned to given heads, and the batch size."""

    work_dir: Path
    pinned_heads: Mapping[str, Any] | None = None
    max_input_records: int | None = None
    log: Callable[[str], None] = _log.info


def run_transform(
    repo: Repository,
    name: str,
    runner: EngineRunner,
    options: TransformOptions,
    *,
    system_time: Timestamp | None = None,
) -> IngestResult:
    """Brings a derivative dataset up to date with its inputs (or their pinned heads), batch by batch."""
    dataset = repo.dataset(name)
    state = dataset.state()
    head = None if state.head is None else str(state.head)
    result = IngestResult(name, str(state.dataset_id), head, head)
    plan = plan_transform(
        repo, dataset, pinned_heads=options.pinned_heads, max_input_records=options.max_input_records
    )
    if plan.up_to_date:
        options.log(f"{name}: up to date ({plan.reason})" if plan.reason else f"{name}: up to date")
        return result
    for batch in plan.batches:
        _run_batch(repo, dataset, name, batch, runner, options, system_time or Timestamp.now(), result)
    return result


def _sql_steps(transform: model.TransformSql) -> list[SqlStep]:
    if transform.queries:
        return [SqlStep(q.query, q.alias) for q in transform.queries]
    return [SqlStep(transform.query or "")]


def _request_input(repo: Repository, planned: PlannedInput, op_dir: Path) -> TransformInputSpec:
    source = repo.dataset_by_id(planned.dataset_id)
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


def _input_watermark(repo: Repository, planned: PlannedInput) -> Timestamp | None:
    """The input's watermark as of the last block this batch consumes (its newest data block's)."""
    source = repo.dataset_by_id(planned.dataset_id)
    for _, block in source.iter_blocks(planned.last_block_hash):
        event = block.event
        if isinstance(event, model.AddData | model.ExecuteTransform) and event.new_watermark is not None:
            return event.new_watermark
    return None


def _run_batch(
    repo: Repository,
    dataset: Dataset,
    name: str,
    batch: TransformBatch,
    runner: EngineRunner,
    options: TransformOptions,
    system_time: Timestamp,
    result: IngestResult,
) -> None:
    state = dataset.state()
    if state.system_time is not None and system_time < state.system_time:
        system_time = state.system_time
    assert state.transform is not None
    with operation_dir(options.work_dir) as op_dir:
        request = TransformRequest(
            operation_id=op_dir.name,
            dataset_id=str(state.dataset_id),
            dataset_alias=name,
            system_time=system_time.isoformat(),
            next_offset=0 if state.last_offset is None else state.last_offset + 1,
            queries=_sql_steps(state.transform.transform),
            inputs=[_request_input(repo, planned, op_dir) for planned in batch.inputs],
            out_dir=str(op_dir / "out"),
            vocab=Vocab.of(state.vocab),
        )
        response = IngestResponse.from_json(runner.run(request.to_json(), op_dir))
        if response.error is not None:
            raise IngestError(response.error.kind, f"{name}: {response.error.message}")
        events: list[Any] = schema_events(state, response, name)
        objects: list[StagedObject] = []
        new_data = None
        if response.slices:
            [written] = response.slices
            new_data, staged = stage_slice(written)
            objects.append(staged)
        watermarks = [_input_watermark(repo, planned) for planned in batch.inputs]
        watermark = None if any(w is None for w in watermarks) else min(w for w in watermarks if w)
        if state.watermark is not None and (watermark is None or watermark < state.watermark):
            watermark = state.watermark  # never moves back, never disappears
        events.append(
            model.ExecuteTransform(
                query_inputs=batch.execute_inputs(),
                prev_checkpoint=state.checkpoint.physical_hash if state.checkpoint else None,
                prev_offset=state.last_offset,
                new_data=new_data,
                new_watermark=watermark,
            )
        )
        commit = dataset.commit(events, system_time=system_time, expected_head=state.head, objects=objects)
    result.new_head = str(commit.new_head)
    result.new_blocks += [str(h) for h in commit.new_blocks]
    result.records += response.num_records
    options.log(f"{name}: committed {len(commit.new_blocks)} block(s), {response.num_records} record(s)")

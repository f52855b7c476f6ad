"""Query evolution: a changed SetTransform is checked before it is committed.

The reference commits a new query blindly and fails on the next run (or worse, records data of another
shape). We run the new query on empty inputs — the engine still reports its output schema, taken from
the query plan — and hold that schema against the dataset's under the schema-evolution rules. A denied
change raises SchemaEvolutionError and nothing is committed; an allowed one (a new optional column,
reordered columns) is committed together with the new SetDataSchema it needs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.operation import operation_dir, response_schema
from airflow_odf.odf.repo.repository import DatasetNotFoundError, Repository
from airflow_odf.odf.schema.policy import ADDITIVE, schema_events_for
from airflow_odf.odf.transform.execute import run_engine
from airflow_odf.odf.transform.plan import PlannedInput, TransformBatch, TransformPlanError


def query_output_schema(
    repo: Repository, name: str, transform: model.SetTransform, runner: EngineRunner, work_dir: Path
) -> model.DataSchema:
    """The output schema of `transform` (inputs as DIDs) for the derivative `name`, from empty inputs."""
    state = repo.dataset(name).state()
    planned = []
    for ti in transform.inputs:
        did = DatasetId.parse(ti.dataset_ref)
        alias = ti.alias or ti.dataset_ref
        source = repo.dataset_by_id(did).state()
        if source.schema is None:
            raise TransformPlanError(
                f"{name}: cannot check the new query: its input {alias!r} has no schema yet (pull it first)"
            )
        planned.append(
            PlannedInput(
                dataset_id=did,
                alias=alias,
                prev_block_hash=None,
                new_block_hash=None,
                prev_offset=None,
                new_offset=None,
                slices=[],
                explicit_watermarks=[],
                vocab=source.vocab,
                schema=source.schema,
            )
        )
    probe = dataclasses.replace(state, transform=transform, last_offset=None)
    with operation_dir(work_dir) as op_dir:
        response = run_engine(repo, probe, name, TransformBatch(planned), runner, op_dir, Timestamp.now())
    schema = response_schema(response)
    if schema is None:
        raise TransformPlanError(f"{name}: the engine reported no output schema for the new query")
    return schema


def check_transform_change(
    repo: Repository, snapshot: model.DatasetSnapshot, runner: EngineRunner, work_dir: Path
) -> model.DatasetSnapshot:
    """The snapshot to add: unchanged, or with the SetDataSchema an allowed query change needs.

        Only an existing derivative with a recorded schema whose manifest changes its SetTransform is
        checked; anything else is returned as is. Raises SchemaEvolutionError for a denied change (a column
    the new query makes optional counts as one: an empty run cannot show that it never holds nulls).
    """
    try:
        state = repo.dataset(snapshot.name).state()
    except DatasetNotFoundError:
        return snapshot
    proposed = [e for e in snapshot.metadata if isinstance(e, model.SetTransform)]
    if state.schema is None or not proposed:
        return snapshot
    transform = repo.normalize_event(proposed[-1])
    if transform == state.transform:
        return snapshot
    output = query_output_schema(repo, snapshot.name, transform, runner, work_dir)
    # the engine cannot tell whether a nullable output column will hold nulls: assume it may
    events = schema_events_for(
        state.schema,
        output,
        policy=ADDITIVE,
        alias=f"{snapshot.name} (new query)",
        has_no_nulls=lambda _: False,
    )
    return dataclasses.replace(snapshot, metadata=[*snapshot.metadata, *events])

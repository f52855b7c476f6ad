"""Schema changes on request: migrating a legacy raw Arrow schema to ODF form, and explicit changes.

Datasets written before RFC-016 record `SetDataSchema.rawArrowSchema` (RFC-010). Everything reads it
through the lazy conversion (`schema.evolution.odf_schema`); `migrate_schema` makes the conversion
permanent by appending the equivalent ODF-form SetDataSchema, never rewriting history. As RFC-016
prescribes, this first conversion ignores optionality differences (Arrow could not state them
reliably) — the chain rules apply that leniency whenever the current schema is a legacy one, so
`apply_schema` may also replace a legacy schema by one that states the optionality the author means.

An explicit change (`apply_schema`: column descriptions, a new optional column, reordering) is
appended only when the evolution rules allow it; a denial raises `SchemaEvolutionError` with the whole
diff and commits nothing. `check_proposed` gives that diff without committing (`odf schema diff`).
Proposals may leave out the system columns: those of the current schema are kept, first.

Both are decided against the head they commit onto: when another writer moves it first, they decide
again from the new head (`chain.reconcile`) — a migration or change the other writer already made is
then "nothing to append".
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from airflow_odf.odf.chain.dataset import CommitResult, Dataset
from airflow_odf.odf.chain.reconcile import Reconciliation, reconciling_from
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.engine_client.contract import Vocab
from airflow_odf.odf.errors import OdfError, OdfFormatError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.repo.repository import ALIAS_KEY
from airflow_odf.odf.schema.data_schema import strip_encoding
from airflow_odf.odf.schema.evolution import (
    SchemaChange,
    SchemaEvolutionError,
    check_evolution,
    diff_schemas,
    odf_schema,
)

_log = logging.getLogger(__name__)


class SchemaMigrationError(OdfError):
    """The schema cannot be migrated or changed as asked (no schema yet, unreadable legacy schema)."""


@dataclass(frozen=True)
class SchemaChangeResult:
    """What a migration or change did: `changed` is False when there was nothing to append;
    `reconciliation`: the races lost to other writers on the way."""

    dataset: str
    changed: bool
    message: str
    schema: model.DataSchema
    changes: list[SchemaChange] = field(default_factory=list)
    commit: CommitResult | None = None
    reconciliation: Reconciliation = field(default_factory=Reconciliation)


def dataset_name(dataset: Dataset) -> str:
    """The name a repository gave the dataset, else its identity: for messages."""
    raw = dataset.store.get_or_none(ALIAS_KEY)
    if raw:
        return raw.decode()
    return str(dataset.state().dataset_id)


def is_legacy(event: model.SetDataSchema) -> bool:
    """A SetDataSchema that holds only the RFC-010 raw Arrow schema."""
    return event.schema is None and event.raw_arrow_schema is not None


def current_schema(state: ChainState, name: str) -> model.DataSchema:
    """The dataset's schema in ODF form (a legacy one converted lazily); errors name the dataset."""
    if state.schema is None:
        raise SchemaMigrationError(
            f"{name} has no SetDataSchema yet: its first ingest or transform records one "
            "(or `odf schema infer --commit` before data)"
        )
    try:
        return odf_schema(state.schema)
    except OdfFormatError as e:
        raise SchemaMigrationError(
            f"{name}: the legacy rawArrowSchema cannot be converted to an ODF schema: {e}"
        ) from None


def migrate_schema(
    dataset: Dataset,
    name: str | None = None,
    *,
    system_time: Timestamp | None = None,
    log: Callable[[str], None] = _log.info,
) -> SchemaChangeResult:
    """Appends the ODF-form SetDataSchema equivalent to a legacy raw Arrow one; idempotent."""
    name = name or dataset_name(dataset)
    return _reconciled(dataset, name, log, lambda state: _migrate(dataset, state, name, system_time))


def _migrate(
    dataset: Dataset, state: ChainState, name: str, system_time: Timestamp | None
) -> SchemaChangeResult:
    schema = current_schema(state, name)
    assert state.schema is not None
    if not is_legacy(state.schema):
        return SchemaChangeResult(name, False, f"{name}: the schema is already in ODF form", schema)
    event = model.SetDataSchema(schema=schema)
    changes = check_evolution(state.schema, event)
    commit = dataset.commit([event], system_time=system_time, expected_head=state.head)
    message = f"{name}: the legacy rawArrowSchema was migrated to ODF form (block {commit.new_head})"
    return SchemaChangeResult(name, True, message, schema, changes, commit)


def _reconciled(
    dataset: Dataset,
    name: str,
    log: Callable[[str], None],
    attempt: Callable[[ChainState], SchemaChangeResult],
) -> SchemaChangeResult:
    """`attempt(state)`, decided again from the new head after each race lost to another writer."""
    record = Reconciliation()
    result = reconciling_from(dataset, dataset.state(), attempt, what=name, record=record, log=log)
    return dataclasses.replace(result, reconciliation=record)


def complete_system_columns(
    current: model.DataSchema, proposed: model.DataSchema, vocab: Vocab
) -> model.DataSchema:
    """`proposed` with the current schema's system columns it leaves out, first (RFC-016 leaves the
    system columns to tooling): a proposal may list only the data columns."""
    system = {
        vocab.offset_column,
        vocab.operation_type_column,
        vocab.system_time_column,
        vocab.event_time_column,
    }
    names = {f.name for f in proposed.fields}
    missing = [f for f in current.fields if f.name in system and f.name not in names]
    return dataclasses.replace(proposed, fields=[*missing, *proposed.fields])


def _proposal(state: ChainState, current: model.DataSchema, proposed: model.DataSchema) -> model.DataSchema:
    """The schema to record: logical only (RFC-016: no encoding hints), system columns completed."""
    return complete_system_columns(current, strip_encoding(proposed), Vocab.of(state.vocab))


def check_proposed(
    dataset: Dataset, proposed: model.DataSchema, name: str | None = None
) -> tuple[model.DataSchema, list[SchemaChange]]:
    """The completed proposal and its diff against the current schema, each change allowed or denied."""
    name = name or dataset_name(dataset)
    state = dataset.state()
    current = current_schema(state, name)
    assert state.schema is not None
    schema = _proposal(state, current, proposed)
    return schema, diff_schemas(current, schema, ignore_optionality=is_legacy(state.schema))


def apply_schema(
    dataset: Dataset,
    proposed: model.DataSchema,
    name: str | None = None,
    *,
    system_time: Timestamp | None = None,
    log: Callable[[str], None] = _log.info,
) -> SchemaChangeResult:
    """Appends `proposed` as a new SetDataSchema if the evolution rules allow it (else
    SchemaEvolutionError with the diff, nothing committed). A dataset without a schema takes it as
    its first one — before any data, as push-style datasets need."""
    name = name or dataset_name(dataset)
    return _reconciled(dataset, name, log, lambda state: _apply(dataset, state, proposed, name, system_time))


def _apply(
    dataset: Dataset,
    state: ChainState,
    proposed: model.DataSchema,
    name: str,
    system_time: Timestamp | None,
) -> SchemaChangeResult:
    if state.schema is None:
        schema = strip_encoding(proposed)
        commit = dataset.commit(
            [model.SetDataSchema(schema=schema)], system_time=system_time, expected_head=state.head
        )
        return SchemaChangeResult(
            name, True, f"{name}: schema set (block {commit.new_head})", schema, [], commit
        )
    current = current_schema(state, name)
    schema = _proposal(state, current, proposed)
    if not is_legacy(state.schema) and schema == current:
        return SchemaChangeResult(name, False, f"{name}: the schema is already the proposed one", schema)
    event = model.SetDataSchema(schema=schema)
    try:
        changes = check_evolution(state.schema, event)
    except SchemaEvolutionError as e:
        raise SchemaEvolutionError(f"{name}: the proposed schema was not committed", e.changes) from None
    commit = dataset.commit([event], system_time=system_time, expected_head=state.head)
    message = f"{name}: new schema committed (block {commit.new_head})"
    return SchemaChangeResult(name, True, message, schema, changes, commit)

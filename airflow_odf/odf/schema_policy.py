"""What happens when new data (an ingest's or a transform's output) does not have the dataset's schema.

Two policies: `strict` (the default) refuses any change; `additive` commits a new SetDataSchema before
the data when the change is allowed by the evolution rules (a new optional column, reordered columns).
A denied change (a removed column, a changed type, a column that became optional while holding nulls)
fails under both with SchemaEvolutionError carrying the whole diff, and nothing is committed.

Two differences are not changes: a column the data never leaves null may be declared optional, and a
column declared required may be optional in the file when the file holds no null in it.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_odf.odf import model
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.schema_evolution import SchemaChange, SchemaEvolutionError, diff_schemas, odf_schema

STRICT = "strict"
ADDITIVE = "additive"
SCHEMA_POLICIES = (STRICT, ADDITIVE)


def check_policy(policy: str) -> str:
    if policy not in SCHEMA_POLICIES:
        raise OdfError(f"schema policy {policy!r}: expected one of {', '.join(SCHEMA_POLICIES)}")
    return policy


def _real_changes(
    current: model.DataSchema, new: model.DataSchema, has_no_nulls: Callable[[str], bool]
) -> list[SchemaChange]:
    return [
        c
        for c in diff_schemas(current, new)
        if c.rule != "became-required" and not (c.rule == "became-optional" and has_no_nulls(c.column))
    ]


def schema_events_for(
    current: model.SetDataSchema | None,
    new: model.DataSchema,
    *,
    policy: str,
    alias: str,
    has_no_nulls: Callable[[str], bool],
) -> list[model.SetDataSchema]:
    """The SetDataSchema events to commit before data of schema `new`; raises SchemaEvolutionError."""
    if current is None:
        return [model.SetDataSchema(schema=new)]
    declared = odf_schema(current)
    changes = _real_changes(declared, new, has_no_nulls)
    if not changes:
        return []
    if check_policy(policy) == STRICT or any(not c.allowed for c in changes):
        raise SchemaEvolutionError(
            f"{alias}: the output's schema does not fit the dataset's (policy {policy}); nothing committed",
            changes,
        )
    # keep the declared type of columns whose only difference is tolerated (stricter, or never null)
    tolerated = {c.column for c in diff_schemas(declared, new)} - {c.column for c in changes}
    declared_types = {f.name: f.type for f in declared.fields}
    fields = [
        model.DataField(name=f.name, type=declared_types[f.name], extra=f.extra) if f.name in tolerated else f
        for f in new.fields
    ]
    return [model.SetDataSchema(schema=model.DataSchema(fields=fields, extra=new.extra))]

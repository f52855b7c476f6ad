"""What happens when new data (an ingest's or a transform's output) does not have the dataset's schema.

Two policies: `strict` (the default) refuses any change; `additive` commits a new SetDataSchema before
the data when the change is allowed by the evolution rules (a new optional column, reordered columns).
A denied change (a removed column, a changed type, a column that became optional while holding nulls)
fails under both with SchemaEvolutionError carrying the whole diff, and nothing is committed.

Three differences are not changes: a column the data never leaves null may be declared optional, a
column declared required may be optional in the file when the file holds no null in it, and the
declared attributes (descriptions, ...) which data never carries. A new SetDataSchema keeps them.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.schema.evolution import SchemaChange, SchemaEvolutionError, diff_schemas, odf_schema

STRICT = "strict"
ADDITIVE = "additive"
SCHEMA_POLICIES = (STRICT, ADDITIVE)


def check_policy(policy: str) -> str:
    if policy not in SCHEMA_POLICIES:
        raise OdfError(f"schema policy {policy!r}: expected one of {', '.join(SCHEMA_POLICIES)}")
    return policy


# data never carries attributes (descriptions, ...): those stay as declared
_NOT_CHANGES = ("became-required", "attributes-changed")


def _real_changes(
    current: model.DataSchema, new: model.DataSchema, has_no_nulls: Callable[[str], bool]
) -> list[SchemaChange]:
    return [
        c
        for c in diff_schemas(current, new)
        if c.rule not in _NOT_CHANGES and not (c.rule == "became-optional" and has_no_nulls(c.column))
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
    # an existing column can only differ in what is tolerated: it keeps its declaration (type, attributes)
    declared_fields = {f.name: f for f in declared.fields}
    fields = [declared_fields.get(f.name, f) for f in new.fields]
    return [model.SetDataSchema(schema=model.DataSchema(fields=fields, extra=declared.extra))]

"""Schema evolution: which new SetDataSchema may follow the current one, with a structured diff.

Allowed (as the reference): new optional columns, reordering, attribute changes. Denied: a removed
column, a changed type, a column becoming optional or required, a new required column. When the
current schema is a legacy `rawArrowSchema`, optionality differences are ignored (RFC-016: Arrow
could not express them reliably).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from airflow_odf.odf.errors import ChainRuleError
from airflow_odf.odf.format import model


@dataclass(frozen=True)
class SchemaChange:
    """One difference between two schemas and the rule it falls under."""

    column: str
    old: str | None
    new: str | None
    rule: str
    allowed: bool

    def __str__(self) -> str:
        verdict = "allowed" if self.allowed else "denied"
        return f"{self.column}: {self.old or '-'} -> {self.new or '-'} ({self.rule}, {verdict})"


class SchemaEvolutionError(ChainRuleError):
    """A schema change breaks the evolution rules; `changes` is the whole diff."""

    def __init__(self, message: str, changes: list[SchemaChange]) -> None:
        self.changes = changes
        denied = [c for c in changes if not c.allowed]
        details = "; ".join(str(c) for c in denied or changes)
        super().__init__("schema-evolution", f"{message}: {details}" if details else message)


def odf_schema(event: model.SetDataSchema) -> model.DataSchema:
    """The ODF form of a SetDataSchema, converting a legacy raw Arrow schema lazily (never rewritten)."""
    if event.schema is not None:
        return event.schema
    assert event.raw_arrow_schema is not None
    from airflow_odf.odf.schema.data_schema import data_schema_from_arrow, strip_encoding
    from airflow_odf.odf.schema.raw_arrow import decode_raw_arrow_schema

    return strip_encoding(data_schema_from_arrow(decode_raw_arrow_schema(event.raw_arrow_schema)))


def _without_attributes(t: Any) -> Any:
    if isinstance(t, model.DataTypeStruct):
        return model.DataTypeStruct(fields=[_field_without_attributes(f) for f in t.fields])
    if dataclasses.is_dataclass(t):
        return dataclasses.replace(
            t,
            **{
                f.name: _without_attributes(getattr(t, f.name))
                for f in dataclasses.fields(t)
                if dataclasses.is_dataclass(getattr(t, f.name))
            },
        )
    return t


def _field_without_attributes(f: model.DataField) -> model.DataField:
    return model.DataField(name=f.name, type=_without_attributes(f.type))


def _show(t: Any) -> str:
    name = type(t).__name__.removeprefix("DataType")
    if isinstance(t, model.DataTypeOption):
        return f"Option<{_show(t.inner)}>"
    if isinstance(t, model.DataTypeList):
        return f"List<{_show(t.item_type)}>"
    return name


def diff_schemas(
    old: model.DataSchema, new: model.DataSchema, *, ignore_optionality: bool = False
) -> list[SchemaChange]:
    """Every column-level difference, each marked allowed or denied."""
    old_fields = {f.name: f for f in old.fields}
    new_fields = {f.name: f for f in new.fields}
    changes = []
    for name, f in old_fields.items():
        if name not in new_fields:
            changes.append(SchemaChange(name, _show(f.type), None, "column-removed", False))
            continue
        a, b = _without_attributes(f.type), _without_attributes(new_fields[name].type)
        a_opt, b_opt = isinstance(a, model.DataTypeOption), isinstance(b, model.DataTypeOption)
        a_inner, b_inner = (a.inner if a_opt else a), (b.inner if b_opt else b)
        if a_inner != b_inner:
            changes.append(SchemaChange(name, _show(a), _show(b), "type-changed", False))
        elif a_opt != b_opt:
            rule = "became-optional" if b_opt else "became-required"
            changes.append(SchemaChange(name, _show(a), _show(b), rule, ignore_optionality))
        elif f.extra != new_fields[name].extra or f.type != new_fields[name].type:
            changes.append(SchemaChange(name, _show(a), _show(b), "attributes-changed", True))
    for name, f in new_fields.items():
        if name not in old_fields:
            optional = isinstance(f.type, model.DataTypeOption)
            rule = "optional-column-added" if optional else "required-column-added"
            changes.append(SchemaChange(name, None, _show(f.type), rule, optional))
    if [f.name for f in old.fields if f.name in new_fields] != [
        f.name for f in new.fields if f.name in old_fields
    ]:
        changes.append(SchemaChange("*", None, None, "columns-reordered", True))
    if old.extra != new.extra:
        changes.append(SchemaChange("*", None, None, "attributes-changed", True))
    return changes


def check_evolution(current: model.SetDataSchema, proposed: model.SetDataSchema) -> list[SchemaChange]:
    """Raises SchemaEvolutionError unless `proposed` may follow `current`; returns the (allowed) diff."""
    old, new = odf_schema(current), odf_schema(proposed)
    if current.schema is not None and proposed.schema is not None and old == new:
        raise SchemaEvolutionError("the new SetDataSchema is identical to the current one (no-op)", [])
    changes = diff_schemas(old, new, ignore_optionality=current.schema is None)
    if any(not c.allowed for c in changes):
        raise SchemaEvolutionError("the new schema breaks the evolution rules", changes)
    return changes

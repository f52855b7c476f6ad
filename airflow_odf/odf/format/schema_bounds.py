"""The bounds on a schema that every way into the chain shares: field-name length and field count.

A schema arrives from a manifest, from an engine's answer (inferred or written data), or in a block a
peer sends; each is checked here before it is accepted, so that a 1 MiB column name or a schema of a
million fields never reaches the chain (the limits are in `limits`). Nested struct fields count too.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from airflow_odf.odf import limits
from airflow_odf.odf.errors import quoted
from airflow_odf.odf.format import model


def _nested_fields(t: model.DataType) -> Iterator[model.DataField]:
    """The struct fields inside a type (through Option, List and Map), outermost first."""
    stack: list[model.DataType] = [t]
    while stack:
        current = stack.pop()
        if isinstance(current, model.DataTypeStruct):
            yield from current.fields
            stack.extend(f.type for f in current.fields)
        elif isinstance(current, model.DataTypeOption):
            stack.append(current.inner)
        elif isinstance(current, model.DataTypeList):
            stack.append(current.item_type)
        elif isinstance(current, model.DataTypeMap):
            stack.extend((current.key_type, current.value_type))


def field_name_problem(name: str) -> str | None:
    """Why a field name is refused (too long), or None."""
    limit = limits.max_field_name_chars()
    if len(name) <= limit:
        return None
    return f"field name {quoted(name)} is longer than {limit} characters ({limits.MAX_FIELD_NAME_CHARS_ENV})"


def schema_problem(schema: model.DataSchema) -> str | None:
    """The first reason the schema is refused (too many fields, a field name too long), or None.
    Stops counting at the limit, so a huge schema costs no more than a schema at the limit."""
    limit = limits.max_schema_fields()
    count = 0
    for top in schema.fields:
        for f in itertools.chain((top,), _nested_fields(top.type)):
            count += 1
            if count > limit:
                return f"more than {limit} fields, nested ones included ({limits.MAX_SCHEMA_FIELDS_ENV})"
            problem = field_name_problem(f.name)
            if problem is not None:
                return problem
    return None

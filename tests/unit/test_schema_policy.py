"""The schema policy: which new-data schemas are changes, and what `additive` commits."""

from __future__ import annotations

import pytest

from airflow_odf.odf.format import model
from airflow_odf.odf.schema.evolution import SchemaEvolutionError
from airflow_odf.odf.schema.policy import schema_events_for

DESCRIPTION = "opendatafabric.org/description"


def _field(
    name: str, t: object, optional: bool = True, extra: dict[str, object] | None = None
) -> model.DataField:
    return model.DataField(name=name, type=model.DataTypeOption(inner=t) if optional else t, extra=extra)


DECLARED = model.SetDataSchema(
    schema=model.DataSchema(
        fields=[
            _field("offset", model.DataTypeInt64(), optional=False),
            _field("city", model.DataTypeString(), extra={DESCRIPTION: "the city"}),
            _field("population", model.DataTypeInt64()),
        ],
        extra={DESCRIPTION: "cities"},
    )
)
DATA = model.DataSchema(
    fields=[
        _field("offset", model.DataTypeInt64(), optional=False),
        _field("city", model.DataTypeString()),
        _field("population", model.DataTypeInt64()),
    ]
)


def _events(new: model.DataSchema, policy: str, no_nulls: bool = False) -> list[model.SetDataSchema]:
    return schema_events_for(DECLARED, new, policy=policy, alias="cities", has_no_nulls=lambda _: no_nulls)


def test_declared_attributes_are_not_changes() -> None:
    assert _events(DATA, "strict") == []
    assert _events(DATA, "additive") == []


def test_additive_keeps_declared_attributes_and_adds_the_new_column() -> None:
    wider = model.DataSchema(fields=[*DATA.fields, _field("area", model.DataTypeFloat64())])
    with pytest.raises(SchemaEvolutionError, match=r"policy strict.*area: - -> Option<Float64>"):
        _events(wider, "strict")
    [event] = _events(wider, "additive")
    assert event.schema.fields == [*DECLARED.schema.fields, wider.fields[-1]]
    assert event.schema.extra == DECLARED.schema.extra


def test_optionality_and_removed_columns() -> None:
    required = model.DataSchema(
        fields=[DATA.fields[0], _field("city", model.DataTypeString(), optional=False), DATA.fields[2]]
    )
    assert _events(required, "strict") == []  # stricter data fits an optional declaration
    narrower = model.DataSchema(fields=DATA.fields[:2])
    with pytest.raises(SchemaEvolutionError) as err:
        _events(narrower, "additive")
    assert [(c.column, c.rule, c.allowed) for c in err.value.changes] == [
        ("population", "column-removed", False)
    ]

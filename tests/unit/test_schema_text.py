"""Schemas as text: every accepted form of a proposed schema file, and the ODF YAML and DDL writers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.errors import ManifestError, OdfFormatError
from airflow_odf.odf.format import model as m
from airflow_odf.odf.schema.ddl import DESCRIPTION, parse_ddl_schema
from airflow_odf.odf.schema.text import SchemaFileError, read_proposed_schema, schema_ddl, schema_yaml

MS = m.TimeUnit.MILLISECOND


def _opt(t: Any) -> m.DataTypeOption:
    return m.DataTypeOption(inner=t)


SCHEMA = m.DataSchema(
    fields=[
        m.DataField(name="offset", type=m.DataTypeInt64()),
        m.DataField(name="event_time", type=_opt(m.DataTypeTimestamp(unit=MS, timezone="UTC"))),
        m.DataField(name="city", type=m.DataTypeString(), extra={DESCRIPTION: "City's name"}),
        m.DataField(name="amount", type=_opt(m.DataTypeDecimal(precision=12, scale=2))),
        m.DataField(name="tags", type=_opt(m.DataTypeList(item_type=_opt(m.DataTypeString())))),
        m.DataField(
            name="attrs",
            type=_opt(m.DataTypeMap(key_type=m.DataTypeString(), value_type=_opt(m.DataTypeFloat64()))),
        ),
        m.DataField(
            name="where",
            type=m.DataTypeStruct(
                fields=[
                    m.DataField(name="lat", type=m.DataTypeFloat64()),
                    m.DataField(name="local time", type=_opt(m.DataTypeTimestamp(unit=MS))),
                ]
            ),
        ),
    ]
)

DDL = """\
offset BIGINT NOT NULL,
event_time TIMESTAMP,
city STRING NOT NULL COMMENT 'City\\'s name',
amount DECIMAL(12,2),
tags ARRAY<STRING>,
attrs MAP<STRING, DOUBLE>,
where STRUCT<lat DOUBLE NOT NULL, `local time` TIMESTAMP_NTZ> NOT NULL"""


def test_ddl_of_a_schema_reads_back_as_the_same_schema() -> None:
    ddl = schema_ddl(SCHEMA)
    assert ddl.text == DDL and ddl.notes == []
    assert parse_ddl_schema(ddl.text) == SCHEMA


def test_details_ddl_cannot_carry_are_noted_by_path() -> None:
    schema = m.DataSchema(
        fields=[
            m.DataField(name="ids", type=m.DataTypeList(item_type=m.DataTypeInt32()), extra={"a.com/x": 1}),
            m.DataField(
                name="m",
                type=m.DataTypeMap(key_type=m.DataTypeInt8(), value_type=m.DataTypeInt8(), keys_sorted=True),
            ),
        ],
        extra={"b.com/y": "z"},
    )
    ddl = schema_ddl(schema)
    assert ddl.text == "ids ARRAY<INT> NOT NULL,\nm MAP<TINYINT, TINYINT> NOT NULL"
    assert ddl.notes == [
        "schema attributes ['b.com/y'] have no DDL form",
        "columns.ids.item: required in the schema; DDL arrays always allow null items",
        "columns.ids: attributes ['a.com/x'] have no DDL form",
        "columns.m: keysSorted has no DDL form",
        "columns.m.value: required in the schema; DDL map values always allow null",
    ]


@pytest.mark.parametrize(
    ("t", "message"),
    [
        (m.DataTypeUInt64(), "columns.c: UInt64 has no DDL type"),
        (m.DataTypeFloat16(), "columns.c: Float16 has no DDL type"),
        (m.DataTypeTime(unit=MS), "columns.c: Time {'unit': 'Millisecond'} has no DDL type"),
        (m.DataTypeDuration(), "columns.c: Duration has no DDL type"),
        (m.DataTypeNull(), "columns.c: Null has no DDL type"),
        (m.DataTypeBinary(fixed_length=4), "columns.c: Binary {'fixedLength': 4} has no DDL type"),
        (
            m.DataTypeTimestamp(unit=m.TimeUnit.MICROSECOND, timezone="UTC"),
            "columns.c: Timestamp {'unit': 'Microsecond', 'timezone': 'UTC'} has no DDL type",
        ),
        (m.DataTypeTimestamp(unit=MS, timezone="Europe/Paris"), "columns.c: Timestamp"),
        (m.DataTypeList(item_type=_opt(m.DataTypeUInt8())), "columns.c.item: UInt8 has no DDL type"),
        (
            m.DataTypeMap(key_type=_opt(m.DataTypeInt8()), value_type=m.DataTypeInt8()),
            "columns.c.key: an optional",
        ),
    ],
)
def test_types_ddl_has_no_name_for_are_errors_naming_the_column(t: Any, message: str) -> None:
    with pytest.raises(OdfFormatError, match=re.escape(message)):
        schema_ddl(m.DataSchema(fields=[m.DataField(name="c", type=t)]))


def test_the_spec_default_timestamp_is_ddl_timestamp() -> None:
    ddl = schema_ddl(m.DataSchema(fields=[m.DataField(name="t", type=m.DataTypeTimestamp())]))
    assert ddl.text == "t TIMESTAMP NOT NULL"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("shown.yaml", None),  # what `odf schema show` prints
        (
            "event.yaml",
            "kind: MetadataEvent\nversion: 1\ncontent:\n  kind: SetDataSchema\n  schema:\n{indented}",
        ),
        ("bare-event.yaml", "kind: SetDataSchema\nschema:\n{indented}"),
        ("columns.ddl", DDL),
        ("columns.sql", DDL),
        ("list.yaml", "LIST"),  # DDL as a YAML list of columns, as `ddlSchema`
    ],
)
def test_every_form_of_a_proposed_schema_reads_the_same(tmp_path: Path, name: str, text: str | None) -> None:
    shown = schema_yaml(SCHEMA)
    if text == "LIST":
        columns = [c.strip() for c in re.split(r",\n", DDL)]
        text = "".join("- " + _yaml_quote(c) + "\n" for c in columns)
    elif text is None:
        text = shown
    else:
        text = text.replace("{indented}", "".join(f"    {line}\n" for line in shown.splitlines()))
    path = tmp_path / name
    path.write_text(text)
    assert read_proposed_schema(path) == SCHEMA


def _yaml_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def test_short_forms_of_the_reference_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "short.yaml"
    path.write_text(
        "fields:\n  - name: a\n    type: String\n  - name: b\n    type: {kind: option, inner: int64}\n"
    )
    assert read_proposed_schema(path) == m.DataSchema(
        fields=[
            m.DataField(name="a", type=m.DataTypeString()),
            m.DataField(name="b", type=_opt(m.DataTypeInt64())),
        ]
    )


@pytest.mark.parametrize(
    ("name", "text", "error", "message"),
    [
        ("missing.yaml", None, SchemaFileError, "missing.yaml: cannot read the schema file"),
        ("bad.yaml", "fields: [", SchemaFileError, "bad.yaml: invalid YAML"),
        ("number.yaml", "42", SchemaFileError, "number.yaml: expected a SetDataSchema"),
        ("other.yaml", "name: x", SchemaFileError, "other.yaml: expected a SetDataSchema"),
        ("typo.yaml", "fields:\n  - name: a\n    type: Strin\n", ManifestError, "typo.yaml: fields[0].type"),
        (
            "event.yaml",
            "kind: SetInfo\ndescription: x\n",
            ManifestError,
            "expected a SetDataSchema event, got SetInfo",
        ),
        (
            "raw.yaml",
            "kind: SetDataSchema\nrawArrowSchema: AAAA\n",
            ManifestError,
            "a rawArrowSchema cannot be proposed",
        ),
        ("bad.ddl", "a INTEGR", SchemaFileError, "bad.ddl: ddlSchema[0] 'a INTEGR': unknown type INTEGR"),
        ("list.yaml", "- a INT\n- 3\n", SchemaFileError, "list.yaml: ddlSchema[1]: expected a string"),
    ],
)
def test_bad_files_name_the_file_and_what_was_expected(
    tmp_path: Path, name: str, text: str | None, error: type, message: str
) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(error, match=re.escape(message)):
        read_proposed_schema(path)

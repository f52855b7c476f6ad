"""Schemas as text: reading a proposed schema file, and writing a schema as ODF YAML or DDL.

A proposed schema (`odf schema diff --proposed FILE`, `odf schema apply`) may be written the way that is
handiest: a `MetadataEvent` manifest holding a SetDataSchema, a bare SetDataSchema event
(`kind: SetDataSchema`), a bare DataSchema (`fields: [...]`, what `odf schema show` prints), or DDL — a
YAML list of column definitions, or a `.ddl` / `.sql` file of comma-separated ones. DDL follows the
`ddlSchema` rules (nullable unless NOT NULL, TIMESTAMP = ms UTC, COMMENT = description).

DDL cannot say everything an ODF schema says (unsigned integers, Float16, time, duration, timestamps
other than ms UTC / ms local, fixed lengths, required list items, sorted map keys, attributes other than
the description): a type DDL has no name for is an error naming the column; the other details are
returned as notes, so that the caller shows them instead of dropping them silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from airflow_odf.odf.errors import ManifestError, OdfError, OdfFormatError, Problem
from airflow_odf.odf.format import model
from airflow_odf.odf.format.fields import METADATA_EVENT, fields_of
from airflow_odf.odf.format.manifests import _Loader, dump_yaml, from_plain, load_manifests, table_to_plain
from airflow_odf.odf.schema.ddl import DESCRIPTION, parse_ddl_schema

DDL_SUFFIXES = (".ddl", ".sql")
_SCHEMA_SPEC = next(f.type for f in fields_of(model.SetDataSchema) if f.name == "schema")
_EVENT_SPEC = next(f.type for f in fields_of(model.MetadataBlock) if f.name == "event")
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EXPECTED = (
    "expected a SetDataSchema (MetadataEvent manifest or bare event), a DataSchema (`fields: [...]`), "
    "or DDL (a list of column definitions, or a .ddl file)"
)


class SchemaFileError(OdfError):
    """A proposed schema file cannot be read as any of the accepted forms."""


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------


def read_proposed_schema(path: str | Path) -> model.DataSchema:
    """The ODF schema a file proposes, in any of the accepted forms (see the module doc)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SchemaFileError(f"{path}: cannot read the schema file: {e}") from None
    if path.suffix.lower() in DDL_SUFFIXES:
        return _from_ddl(text, path)
    try:
        data = yaml.load(text, Loader=_Loader)  # the manifests' SafeLoader: YAML 1.2 scalars
    except yaml.YAMLError as e:
        raise SchemaFileError(f"{path}: invalid YAML ({e}); {_EXPECTED}") from None
    source = str(path)
    if isinstance(data, dict) and {"version", "content"} <= set(data):
        return _from_manifest(text, source)
    if isinstance(data, dict) and "kind" in data:
        event = from_plain(_EVENT_SPEC, data, source)
        return _event_schema(event, source, "kind")
    if isinstance(data, dict) and "fields" in data:
        return from_plain(_SCHEMA_SPEC, data, source)
    if isinstance(data, list | str):
        return _from_ddl(data, path)
    raise SchemaFileError(f"{path}: {_EXPECTED}")


def _from_manifest(text: str, source: str) -> model.DataSchema:
    manifests = load_manifests(text, source)
    if len(manifests) != 1 or manifests[0].kind != "MetadataEvent":
        found = ", ".join(m.kind for m in manifests)
        raise ManifestError(source, [Problem("kind", f"expected one MetadataEvent manifest, found: {found}")])
    return _event_schema(manifests[0].content, source, "content.kind")


def _event_schema(event: Any, source: str, where: str) -> model.DataSchema:
    if not isinstance(event, model.SetDataSchema):
        tag = METADATA_EVENT.tag(type(event))
        raise ManifestError(source, [Problem(where, f"expected a SetDataSchema event, got {tag}")])
    if event.schema is None:
        raise ManifestError(
            source, [Problem("schema", "expected an ODF schema (a rawArrowSchema cannot be proposed)")]
        )
    return event.schema


def _from_ddl(columns: list[Any] | str, path: Path) -> model.DataSchema:
    try:
        return parse_ddl_schema(columns)
    except OdfFormatError as e:
        raise SchemaFileError(f"{path}: {e}") from None


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


def schema_yaml(schema: model.DataSchema) -> str:
    """The bare DataSchema in manifest YAML (`fields: [...]`), which `read_proposed_schema` reads back."""
    return dump_yaml(table_to_plain(schema))


@dataclass(frozen=True)
class DdlText:
    """DDL of a schema, one column per line; `notes` names each detail DDL could not carry."""

    text: str
    notes: list[str]


_DDL_NAMES: dict[type, str] = {
    model.DataTypeString: "STRING",
    model.DataTypeBool: "BOOLEAN",
    model.DataTypeInt8: "TINYINT",
    model.DataTypeInt16: "SMALLINT",
    model.DataTypeInt32: "INT",
    model.DataTypeInt64: "BIGINT",
    model.DataTypeFloat32: "FLOAT",
    model.DataTypeFloat64: "DOUBLE",
    model.DataTypeDate: "DATE",
}
_MS = (None, model.TimeUnit.MILLISECOND)


def schema_ddl(schema: model.DataSchema) -> DdlText:
    """The schema as `ddlSchema` columns; raises OdfFormatError naming a column whose type DDL lacks."""
    notes: list[str] = []
    if schema.extra:
        notes.append(f"schema attributes {sorted(schema.extra)} have no DDL form")
    columns = [_ddl_field(f, f"columns.{f.name}", notes) for f in schema.fields]
    return DdlText(",\n".join(columns), notes)


def _ddl_name(name: str) -> str:
    return name if _PLAIN_NAME.match(name) else "`" + name.replace("`", "``") + "`"


def _ddl_field(field: model.DataField, path: str, notes: list[str]) -> str:
    t = field.type
    nullable = isinstance(t, model.DataTypeOption)
    text = f"{_ddl_name(field.name)} {_ddl_type(t.inner if nullable else t, path, notes)}"
    if not nullable:
        text += " NOT NULL"
    extra = dict(field.extra or {})
    description = extra.pop(DESCRIPTION, None)
    if isinstance(description, str):
        text += " COMMENT '" + description.replace("\\", "\\\\").replace("'", "\\'") + "'"
    elif description is not None:
        extra[DESCRIPTION] = description
    if extra:
        notes.append(f"{path}: attributes {sorted(extra)} have no DDL form")
    return text


def _ddl_type(t: Any, path: str, notes: list[str]) -> str:
    """The DDL of a type that is not an Option (nullability is the caller's)."""
    if isinstance(t, model.DataTypeOption):
        raise OdfFormatError(f"{path}: Option of Option has no DDL form")
    if type(t) in _DDL_NAMES:
        return _DDL_NAMES[type(t)]
    if isinstance(t, model.DataTypeBinary) and t.fixed_length is None:
        return "BINARY"
    if isinstance(t, model.DataTypeDecimal) and 1 <= t.precision <= 38 and 0 <= t.scale <= t.precision:
        return f"DECIMAL({t.precision},{t.scale})"
    if isinstance(t, model.DataTypeTimestamp) and t.unit in _MS:
        if t.timezone == "UTC" or (t.timezone is None and t.unit is None):  # no unit, no zone: ms UTC
            return "TIMESTAMP"
        if t.timezone is None:
            return "TIMESTAMP_NTZ"  # as ddlSchema reads it: Timestamp(ms) without a zone
    if isinstance(t, model.DataTypeList) and t.fixed_length is None:
        item = t.item_type
        if not isinstance(item, model.DataTypeOption):
            notes.append(f"{path}.item: required in the schema; DDL arrays always allow null items")
            return f"ARRAY<{_ddl_type(item, f'{path}.item', notes)}>"
        return f"ARRAY<{_ddl_type(item.inner, f'{path}.item', notes)}>"
    if isinstance(t, model.DataTypeMap):
        if isinstance(t.key_type, model.DataTypeOption):
            raise OdfFormatError(f"{path}.key: an optional map key has no DDL form")
        if t.keys_sorted:
            notes.append(f"{path}: keysSorted has no DDL form")
        value = t.value_type
        if not isinstance(value, model.DataTypeOption):
            notes.append(f"{path}.value: required in the schema; DDL map values always allow null")
        else:
            value = value.inner
        key = _ddl_type(t.key_type, f"{path}.key", notes)
        return f"MAP<{key}, {_ddl_type(value, f'{path}.value', notes)}>"
    if isinstance(t, model.DataTypeStruct):
        fields = [_ddl_field(f, f"{path}.{f.name}", notes) for f in t.fields]
        return f"STRUCT<{', '.join(fields)}>"
    raise OdfFormatError(
        f"{path}: {_describe(t)} has no DDL type (show the schema as odf-yaml, arrow or spark instead)"
    )


def _describe(t: Any) -> str:
    plain = {k: v for k, v in table_to_plain(t).items() if not isinstance(v, dict | list)}
    name = type(t).__name__.removeprefix("DataType")
    return f"{name} {plain}" if plain else name

"""OpenLineage for the ODF operators: what a task read and wrote, with the written dataset's schema.

The facts are plain data built from the repository (`OdfLineage`), so they are testable without the
OpenLineage provider; `to_operator_lineage` turns them into the provider's `OperatorLineage`, importing
its classes lazily. Datasets are named as the `odf://` assets are converted (`assets.py`): namespace
`odf`, name the dataset id's multibase part (stable across renames and repositories); the repository
alias is added as a symlink, the SetInfo description as documentation, the SetDataSchema as the schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_odf.assets import SCHEME, dataset_uri
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.evolution import odf_schema

NAMESPACE = SCHEME
_UNITS = {
    model.TimeUnit.SECOND: "s",
    model.TimeUnit.MILLISECOND: "ms",
    model.TimeUnit.MICROSECOND: "us",
    model.TimeUnit.NANOSECOND: "ns",
}


@dataclass(frozen=True)
class LineageField:
    """A column: its name, a readable type (`int64`, `decimal(18,4)`, `list<string>`) and struct members."""

    name: str
    type: str
    fields: tuple[LineageField, ...] = ()


@dataclass(frozen=True)
class LineageDataset:
    """One ODF dataset as OpenLineage sees it."""

    name: str
    alias: str
    fields: tuple[LineageField, ...] | None = None
    description: str | None = None
    namespace: str = NAMESPACE


@dataclass(frozen=True)
class OdfLineage:
    inputs: tuple[LineageDataset, ...] = ()
    outputs: tuple[LineageDataset, ...] = ()


def type_name(t: Any) -> str:
    """A short readable name of an ODF data type (OpenLineage has no place for optionality)."""
    if isinstance(t, model.DataTypeOption):
        return type_name(t.inner)
    if isinstance(t, model.DataTypeDecimal):
        return f"decimal({t.precision},{t.scale})"
    if isinstance(t, model.DataTypeTimestamp | model.DataTypeTime | model.DataTypeDuration):
        base = type(t).__name__.removeprefix("DataType").lower()
        args = [_UNITS[t.unit]] if t.unit is not None else []
        args += [t.timezone] if isinstance(t, model.DataTypeTimestamp) and t.timezone else []
        return f"{base}({', '.join(args)})" if args else base
    if isinstance(t, model.DataTypeList):
        return f"list<{type_name(t.item_type)}>"
    if isinstance(t, model.DataTypeMap):
        return f"map<{type_name(t.key_type)}, {type_name(t.value_type)}>"
    return type(t).__name__.removeprefix("DataType").lower()


def _struct(t: Any) -> model.DataTypeStruct | None:
    while isinstance(t, model.DataTypeOption | model.DataTypeList):
        t = t.inner if isinstance(t, model.DataTypeOption) else t.item_type
    return t if isinstance(t, model.DataTypeStruct) else None


def schema_fields(fields: list[model.DataField]) -> tuple[LineageField, ...]:
    """The lineage form of a schema's columns, nested structs (also inside lists) as member fields."""
    out = []
    for f in fields:
        struct = _struct(f.type)
        out.append(LineageField(f.name, type_name(f.type), schema_fields(struct.fields) if struct else ()))
    return tuple(out)


def dataset_lineage(alias: str, dataset: Dataset) -> LineageDataset:
    """A dataset's identity, schema (None before its first data) and description, from its chain state."""
    state = dataset.state()
    assert state.dataset_id is not None
    schema = None if state.schema is None else schema_fields(odf_schema(state.schema).fields)
    return LineageDataset(
        name=dataset_uri(state.dataset_id).removeprefix(f"{SCHEME}://"),  # as assets.py converts it
        alias=alias,
        fields=schema,
        description=state.info.description if state.info else None,
    )


def repository_dataset_lineage(repo: Repository, ref: str) -> LineageDataset:
    """`dataset_lineage` of a dataset of `repo` by name or `did:odf:` reference."""
    dataset = repo.dataset(ref)
    return dataset_lineage(repo.name_of(dataset), dataset)


def transform_input_lineage(repo: Repository, derivative: str) -> tuple[LineageDataset, ...]:
    """The inputs of a derivative's current SetTransform (recorded in the chain by DID)."""
    transform = repo.dataset(derivative).state().transform
    if transform is None:
        return ()
    return tuple(repository_dataset_lineage(repo, i.dataset_ref) for i in transform.inputs)


def to_operator_lineage(lineage: OdfLineage) -> Any:
    """The OpenLineage provider's `OperatorLineage`, or None when the provider is not installed."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:  # no OpenLineage provider: nothing collects lineage
        return None
    from airflow.providers.common.compat.openlineage.facet import InputDataset, OutputDataset

    return OperatorLineage(
        inputs=[InputDataset(namespace=d.namespace, name=d.name, facets=_facets(d)) for d in lineage.inputs],
        outputs=[
            OutputDataset(namespace=d.namespace, name=d.name, facets=_facets(d)) for d in lineage.outputs
        ],
    )


def _facets(d: LineageDataset) -> dict[str, Any]:
    from airflow.providers.common.compat.openlineage.facet import (
        DocumentationDatasetFacet,
        Identifier,
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
        SymlinksDatasetFacet,
    )

    def fields(fs: tuple[LineageField, ...]) -> list[Any]:
        return [SchemaDatasetFacetFields(name=f.name, type=f.type, fields=fields(f.fields)) for f in fs]

    facets: dict[str, Any] = {
        "symlinks": SymlinksDatasetFacet(
            identifiers=[Identifier(namespace=d.namespace, name=d.alias, type="alias")]
        )
    }
    if d.fields is not None:
        facets["schema"] = SchemaDatasetFacet(fields=fields(d.fields))
    if d.description:
        facets["documentation"] = DocumentationDatasetFacet(description=d.description)
    return facets

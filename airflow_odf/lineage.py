"""OpenLineage for the ODF operators: what a task read and wrote, with the written dataset's schema.

The facts are plain data built from the repository (`OdfLineage`), so they are testable without the
OpenLineage provider; `to_operator_lineage` turns them into the provider's `OperatorLineage`, importing
its classes lazily. Datasets are named as the `odf://` assets are converted (`assets.py`): namespace
`odf`, name the dataset id's multibase part (stable across renames and repositories); the repository
alias is added as a symlink, the SetInfo description as documentation, the SetDataSchema as the schema.

A task that ran adds what its run did (`run_lineage`, from its XCom result and the blocks it committed):
the version of each dataset (the output's new head, the input's block the transform read up to), the
output's statistics (records and bytes of the new slices), the column lineage of the transform's SQL
(`airflow_odf.odf.transform.column_lineage`) and the results of its checks — also of a run they refused,
which committed nothing (no output version). docs/lineage.md.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_odf.assets import SCHEME, dataset_uri
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.format.sql_policy import steps_of, transform_inputs
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.evolution import odf_schema
from airflow_odf.odf.transform.column_lineage import IDENTITY, column_lineage

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
class OutputStatistics:
    """What a run added to a dataset: records (the new slices' offset intervals), bytes and slices."""

    rows: int
    size: int
    files: int


@dataclass(frozen=True)
class InputColumn:
    """A column of an input dataset an output column (or the rows) depends on, and how (`kind`: IDENTITY,
    TRANSFORMATION, AGGREGATION; FILTER, JOIN, GROUP_BY, SORT, WINDOW for the rows)."""

    name: str  # the input dataset's name (as `LineageDataset.name`)
    field: str
    kind: str
    namespace: str = NAMESPACE


@dataclass(frozen=True)
class ColumnLineage:
    fields: Mapping[str, tuple[InputColumn, ...]]  # output column -> direct inputs (none: left out)
    dataset: tuple[InputColumn, ...] = ()  # the columns that decide which rows there are


@dataclass(frozen=True)
class Assertion:
    """One check's result as a data-quality assertion (from the `checks` of the task's XCom)."""

    name: str
    check: str  # null_check, unique_check, min, sql, ...
    success: bool
    column: str | None = None
    expected: str | None = None
    actual: str | None = None


@dataclass(frozen=True)
class LineageDataset:
    """One ODF dataset as OpenLineage sees it; the run's facts (version onwards) once a task ran."""

    name: str
    alias: str
    fields: tuple[LineageField, ...] | None = None
    description: str | None = None
    namespace: str = NAMESPACE
    version: str | None = None  # a block hash: the output's new head, the input's head that was read
    statistics: OutputStatistics | None = None
    column_lineage: ColumnLineage | None = None
    assertions: tuple[Assertion, ...] = field(default=())


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


def run_lineage(repo: Repository, lineage: OdfLineage, result: Mapping[str, Any]) -> OdfLineage:
    """`lineage` with what the run that returned `result` (its XCom dict) did: the output's version (its
    new head, or the head it found up to date), statistics of the slices its new blocks added, column
    lineage of its transform and its checks; each input's version (the block the output's last
    ExecuteTransform read up to).

    A run whose checks refused its data (`committed` false, as `ChecksFailed.as_dict` says) committed
    nothing: the output gets no version and no statistics, the checks (failed ones too) as assertions,
    and each input the block the refused data was read up to (`input_heads`: DID -> block hash)."""
    if len(lineage.outputs) != 1:
        return lineage
    [output] = lineage.outputs
    dataset = repo.dataset(output.alias)
    state = dataset.state()
    committed = result.get("committed") is not False
    blocks = [dataset.block(Multihash.parse(h)) for h in result.get("new_blocks") or []]
    output = dataclasses.replace(
        output,
        version=result.get("new_head") or (str(state.head) if committed and state.head else None),
        statistics=_statistics(blocks) if committed else None,
        column_lineage=transform_column_lineage(state.transform, lineage.inputs, output),
        assertions=check_assertions(result.get("checks") or ()),
    )
    if committed:
        transforms = [b.event for b in blocks if isinstance(b.event, model.ExecuteTransform)]
        read = transforms[-1].query_inputs if transforms else list(state.transform_inputs.values())
        versions = {_name(str(qi.dataset_id)): qi.new_block_hash for qi in read}
    else:
        heads = result.get("input_heads")
        versions = {_name(did): h for did, h in heads.items()} if isinstance(heads, Mapping) else {}
    inputs = tuple(
        dataclasses.replace(d, version=str(versions[d.name])) if versions.get(d.name) else d
        for d in lineage.inputs
    )
    return OdfLineage(inputs=inputs, outputs=(output,))


def _statistics(blocks: list[model.MetadataBlock]) -> OutputStatistics:
    """Records (offset intervals), bytes and count of the slices `blocks` added."""
    slices = [
        b.event.new_data
        for b in blocks
        if isinstance(b.event, model.AddData | model.ExecuteTransform) and b.event.new_data is not None
    ]
    return OutputStatistics(
        rows=sum(s.offset_interval.end - s.offset_interval.start + 1 for s in slices),
        size=sum(s.size for s in slices),
        files=len(slices),
    )


def _name(dataset_id: str) -> str:
    """A dataset's OpenLineage name from its DID, as `dataset_lineage` names it."""
    return dataset_uri(dataset_id).removeprefix(f"{SCHEME}://")


def transform_column_lineage(
    transform: model.SetTransform | None, inputs: tuple[LineageDataset, ...], output: LineageDataset
) -> ColumnLineage | None:
    """The column lineage of a derivative's SQL over its inputs' schemas (`inputs` in the SetTransform's
    order, as `transform_input_lineage` gives them); None without SQL, schemas, or a resolvable query."""
    if transform is None or not isinstance(transform.transform, model.TransformSql):
        return None
    if output.fields is None or len(inputs) != len(transform.inputs):
        return None
    relations = dict(zip(transform_inputs(transform), inputs, strict=True))
    schemas = {rel: [f.name for f in d.fields or ()] for rel, d in relations.items()}
    found = column_lineage(steps_of(transform.transform), schemas, [f.name for f in output.fields])
    if found is None:
        return None

    def column(origin: Any) -> InputColumn:
        source = relations[origin.input]
        return InputColumn(source.name, origin.column, origin.kind, source.namespace)

    fields = {name: tuple(column(o) for o in origins) for name, origins in found.columns.items() if origins}
    return ColumnLineage(fields, tuple(column(o) for o in found.dataset))


def check_assertions(checks: Any) -> tuple[Assertion, ...]:
    """The `checks` of a task's XCom (docs/checks.md) as assertions; anything else in it is skipped."""
    found = []
    for c in checks if isinstance(checks, list | tuple) else ():
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str) or "success" not in c:
            continue
        observed = c.get("observed")
        found.append(
            Assertion(
                name=c["name"],
                check=str(c.get("check") or c.get("kind") or "check"),
                success=bool(c["success"]),
                column=c.get("column") if isinstance(c.get("column"), str) else None,
                expected=None if c.get("expected") is None else str(c["expected"]),
                actual=None if observed is None else json.dumps(observed, default=str),
            )
        )
    return tuple(found)


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
            OutputDataset(
                namespace=d.namespace, name=d.name, facets=_facets(d), outputFacets=_output_facets(d)
            )
            for d in lineage.outputs
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
    if d.version is not None:
        from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet

        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=d.version)
    if d.column_lineage is not None:
        facets["columnLineage"] = _column_lineage_facet(d.column_lineage)
    if d.assertions:
        facets["dataQualityAssertions"] = _assertions_facet(d.assertions)
    return facets


def _output_facets(d: LineageDataset) -> dict[str, Any]:
    if d.statistics is None:
        return {}
    from airflow.providers.common.compat.openlineage.facet import OutputStatisticsOutputDatasetFacet

    s = d.statistics
    return {
        "outputStatistics": OutputStatisticsOutputDatasetFacet(
            rowCount=s.rows, size=s.size, fileCount=s.files
        )
    }


def _column_lineage_facet(lineage: ColumnLineage) -> Any:
    """Direct inputs per field, with their subtype (IDENTITY, TRANSFORMATION, AGGREGATION), and the
    dataset's indirect ones (FILTER, JOIN, GROUP_BY, SORT, WINDOW), as the facet's 1-2-0 version has them."""
    from airflow.providers.common.compat.openlineage.facet import (
        ColumnLineageDatasetFacet,
        Fields,
        InputField,
    )
    from openlineage.client.generated.column_lineage_dataset import Transformation

    def field(c: InputColumn, kind: str) -> Any:
        return InputField(
            namespace=c.namespace,
            name=c.name,
            field=c.field,
            transformations=[Transformation(type=kind, subtype=c.kind, masking=False)],
        )

    fields = {
        name: Fields(
            inputFields=[field(c, "DIRECT") for c in columns],
            # the facet's older, deprecated form of the same, which some consumers still read
            transformationType=("IDENTITY" if all(c.kind == IDENTITY for c in columns) else "TRANSFORMATION"),
            transformationDescription="",
        )
        for name, columns in lineage.fields.items()
    }
    return ColumnLineageDatasetFacet(fields=fields, dataset=[field(c, "INDIRECT") for c in lineage.dataset])


def _assertions_facet(assertions: tuple[Assertion, ...]) -> Any:
    from openlineage.client.generated.data_quality_assertions_dataset import (
        Assertion as OlAssertion,
    )
    from openlineage.client.generated.data_quality_assertions_dataset import (
        DataQualityAssertionsDatasetFacet,
    )

    return DataQualityAssertionsDatasetFacet(
        assertions=[
            OlAssertion(
                assertion=a.check,
                success=a.success,
                column=a.column,
                severity="error",  # a failing check stops the commit
                name=a.name,
                expected=a.expected,
                actual=a.actual,
            )
            for a in assertions
        ]
    )

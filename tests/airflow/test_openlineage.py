"""OpenLineage of the ODF operators: after example DAG 4 ran for real, each operator reports what it read
and wrote (namespace `odf`, name the dataset id, schema from the SetDataSchema); the conversion into the
OpenLineage provider's classes, which are not installed here, is checked against stand-ins with the
same constructor signatures."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_odf import lineage
from airflow_odf.lineage import LineageDataset, LineageField, OdfLineage, schema_fields, to_operator_lineage
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from tests.airflow.dag_runs import load_dag, task_states

ROOT, DAILY = "com.example.weather.readings", "com.example.weather.daily"


def test_schema_fields_types_and_nesting() -> None:
    ms = model.TimeUnit.MILLISECOND
    point = model.DataTypeStruct(
        fields=[
            model.DataField(name="x", type=model.DataTypeFloat64()),
            model.DataField(name="y", type=model.DataTypeOption(inner=model.DataTypeFloat64())),
        ]
    )
    fields = [
        model.DataField(name="offset", type=model.DataTypeInt64()),
        model.DataField(name="event_time", type=model.DataTypeTimestamp(unit=ms, timezone="UTC")),
        model.DataField(
            name="price", type=model.DataTypeOption(inner=model.DataTypeDecimal(precision=18, scale=4))
        ),
        model.DataField(name="tags", type=model.DataTypeList(item_type=model.DataTypeString())),
        model.DataField(
            name="attrs",
            type=model.DataTypeMap(key_type=model.DataTypeString(), value_type=model.DataTypeInt32()),
        ),
        model.DataField(name="path", type=model.DataTypeOption(inner=model.DataTypeList(item_type=point))),
    ]
    assert schema_fields(fields) == (
        LineageField("offset", "int64"),
        LineageField("event_time", "timestamp(ms, UTC)"),
        LineageField("price", "decimal(18,4)"),
        LineageField("tags", "list<string>"),
        LineageField("attrs", "map<string, int32>"),
        LineageField("path", "list<struct>", (LineageField("x", "float64"), LineageField("y", "float64"))),
    )


@pytest.mark.usefixtures("airflow_db", "spark")
def test_operators_report_lineage_after_a_real_run(odf_repo: Path) -> None:
    dag = load_dag("odf_factory.py", "odf_factory_weather")
    run = dag.test()
    assert set(task_states(run).values()) == {"success"}
    repo = Repository.open(odf_repo)
    readings_id = str(repo.dataset(ROOT).state().dataset_id).removeprefix("did:odf:")
    daily_id = str(repo.dataset(DAILY).state().dataset_id).removeprefix("did:odf:")

    ingested = dag.get_task(f"ingest_{ROOT}").lineage()
    [readings] = ingested.outputs
    assert ingested.inputs == ()  # the source files are not ODF datasets
    assert (readings.namespace, readings.name, readings.alias) == ("odf", readings_id, ROOT)
    assert readings.description == "Readings of two example weather stations."
    assert readings.fields == (
        LineageField("offset", "int64"),
        LineageField("op", "int32"),
        LineageField("system_time", "timestamp(ms, UTC)"),
        LineageField("event_time", "timestamp(ms, UTC)"),
        LineageField("station", "string"),
        LineageField("temperature_c", "float64"),
        LineageField("precipitation_mm", "float64"),
    )

    transformed = dag.get_task(f"transform_{DAILY}").lineage()
    assert transformed.inputs == (readings,)
    [daily] = transformed.outputs
    assert (daily.name, daily.alias, daily.description) == (daily_id, DAILY, None)
    assert [f.name for f in daily.fields or ()][3:] == [
        "event_time",
        "station",
        "min_temperature_c",
        "max_temperature_c",
        "precipitation_mm",
    ]

    assert dag.get_task("apply_manifests").lineage() == OdfLineage()  # no dataset of its own
    # the OpenLineage provider is not installed: nothing collects lineage, the method says so
    assert dag.get_task(f"transform_{DAILY}").get_openlineage_facets_on_complete(None) is None


# Stand-ins with the constructor signatures of the OpenLineage client / provider classes
# (openlineage.client.generated.*, airflow.providers.openlineage.extractors.OperatorLineage).
@dataclass
class _Dataset:
    namespace: str
    name: str
    facets: dict[str, Any] = field(default_factory=dict)


@dataclass
class _InputDataset(_Dataset):
    inputFacets: dict[str, Any] = field(default_factory=dict)


@dataclass
class _OutputDataset(_Dataset):
    outputFacets: dict[str, Any] = field(default_factory=dict)


@dataclass
class _SchemaDatasetFacet:
    fields: list[Any] = field(default_factory=list)


@dataclass
class _SchemaDatasetFacetFields:
    name: str
    type: str | None = None
    description: str | None = None
    fields: list[Any] = field(default_factory=list)


@dataclass
class _SymlinksDatasetFacet:
    identifiers: list[Any] = field(default_factory=list)


@dataclass
class _Identifier:
    namespace: str
    name: str
    type: str


@dataclass
class _DocumentationDatasetFacet:
    description: str


@dataclass
class _OperatorLineage:
    inputs: list[Any] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    run_facets: dict[str, Any] = field(default_factory=dict)
    job_facets: dict[str, Any] = field(default_factory=dict)


def test_conversion_to_openlineage_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.common.compat.openlineage import facet

    extractors = types.ModuleType("airflow.providers.openlineage.extractors")
    extractors.OperatorLineage = _OperatorLineage  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "airflow.providers.openlineage.extractors", extractors)
    for name, cls in {
        "InputDataset": _InputDataset,
        "OutputDataset": _OutputDataset,
        "SchemaDatasetFacet": _SchemaDatasetFacet,
        "SchemaDatasetFacetFields": _SchemaDatasetFacetFields,
        "SymlinksDatasetFacet": _SymlinksDatasetFacet,
        "Identifier": _Identifier,
        "DocumentationDatasetFacet": _DocumentationDatasetFacet,
    }.items():
        monkeypatch.setattr(facet, name, cls)

    source = LineageDataset("fed01aa", "org.a", (LineageField("p", "struct", (LineageField("x", "int64"),)),))
    target = LineageDataset("fed01bb", "org.b", None, description="B")
    converted = to_operator_lineage(OdfLineage(inputs=(source,), outputs=(target,)))

    assert converted == _OperatorLineage(
        inputs=[
            _InputDataset(
                "odf",
                "fed01aa",
                facets={
                    "symlinks": _SymlinksDatasetFacet([_Identifier("odf", "org.a", "alias")]),
                    "schema": _SchemaDatasetFacet(
                        [
                            _SchemaDatasetFacetFields(
                                "p", "struct", fields=[_SchemaDatasetFacetFields("x", "int64")]
                            )
                        ]
                    ),
                },
            )
        ],
        outputs=[
            _OutputDataset(
                "odf",
                "fed01bb",
                facets={
                    "symlinks": _SymlinksDatasetFacet([_Identifier("odf", "org.b", "alias")]),
                    "documentation": _DocumentationDatasetFacet("B"),
                },
            )
        ],
    )
    assert lineage.NAMESPACE == "odf"

"""OpenLineage of the ODF operators: after example DAG 4 ran for real, each operator reports what it read
and wrote (namespace `odf`, name the dataset id, schema from the SetDataSchema); the conversion into the
OpenLineage classes is checked against stand-ins with the same constructor signatures, and the events
example DAG 1 sends through OpenLineage's file transport carry each run's facts, checked against the
chain: versions (block hashes), output statistics (records and bytes of the new slices), the column
lineage of the transform's SQL; check results become data-quality assertions, and checks that refuse
a transform's data give a FAIL event with every check's result, the pinned input and no output version."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_odf import lineage
from airflow_odf.lineage import LineageDataset, LineageField, OdfLineage, schema_fields, to_operator_lineage
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from tests.airflow.dag_runs import load_dag, task_states, xcom

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
    # the OpenLineage provider's own class (the `openlineage` extra), without a run's facts
    collected = dag.get_task(f"transform_{DAILY}").get_openlineage_facets_on_complete(None)
    assert [(d.namespace, d.name) for d in collected.outputs] == [("odf", daily_id)]
    assert "version" not in collected.outputs[0].facets


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


def test_check_results_become_assertions() -> None:
    """The `checks` of a task's XCom (the shape the checks write) as the dataQualityAssertions facet."""
    from openlineage.client.serde import Serde

    checks = [
        {"name": "no_nulls", "kind": "column", "column": "symbol", "check": "null_check", "success": True,
         "observed": 0, "expected": "equal_to 0", "failing_rows": []},
        {"name": "positive", "kind": "table", "column": None, "check": "sql", "success": True,
         "observed": True, "expected": None, "failing_rows": []},
        {"name": "max_qty", "kind": "column", "column": "quantity", "check": "max", "success": True,
         "observed": {"value": 250}, "expected": "leq_to 1000", "failing_rows": []},
        "not a check",
    ]  # fmt: skip
    assertions = lineage.check_assertions(checks)
    target = LineageDataset("fed01bb", "org.b", None, assertions=assertions)
    [output] = to_operator_lineage(OdfLineage(outputs=(target,))).outputs
    assert Serde.to_dict(output.facets["dataQualityAssertions"])["assertions"] == [
        {"assertion": "null_check", "success": True, "column": "symbol", "severity": "error",
         "name": "no_nulls", "expected": "equal_to 0", "actual": "0", "params": {}},
        {"assertion": "sql", "success": True, "severity": "error", "name": "positive", "actual": "true",
         "params": {}},
        {"assertion": "max", "success": True, "column": "quantity", "severity": "error", "name": "max_qty",
         "expected": "leq_to 1000", "actual": '{"value": 250}', "params": {}},
    ]  # fmt: skip
    assert lineage.check_assertions(None) == () and lineage.check_assertions("x") == ()


@pytest.fixture
def openlineage_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """OpenLineage on, sending to a file, configured as a deployment would (`[openlineage] transport`).

    Airflow loads the provider's plugin once per process, and it registers its listener only if
    OpenLineage was configured then; so the listener is registered here too (and removed after), with
    the task SDK's listeners (task events) and the core's (DAG run events). The
    task events are sent from a thread and the DAG run's from a thread pool: a process forked from this
    one (the provider's default) would close the shared SparkSession's py4j sockets as it exits."""
    from airflow.listeners.listener import get_listener_manager
    from airflow.providers.openlineage.plugins.listener import get_openlineage_listener
    from airflow.sdk.listener import get_listener_manager as get_task_listener_manager

    path = tmp_path / "openlineage.jsonl"
    transport = {"type": "file", "log_file_path": str(path), "append": True}
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps(transport))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", "odf-tests")
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD", "True")
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT", "300")  # a busy machine: wait for each
    listener = get_openlineage_listener()
    _forget_configuration(listener)  # a test before this one may have set up another file
    added = [
        m for m in (get_task_listener_manager(), get_listener_manager()) if not m.pm.is_registered(listener)
    ]
    for manager in added:
        manager.add_listener(listener)
    monkeypatch.setattr(listener, "_executor", ThreadPoolExecutor(max_workers=1))
    yield path
    listener._executor.shutdown(wait=True)
    for manager in added:
        manager.pm.unregister(listener)
    _forget_configuration(listener)


def _forget_configuration(listener: Any) -> None:
    """The provider reads its configuration (cached) and makes its client (with the transport) once per
    process: forgotten, the next event is sent as the environment configures it now."""
    from airflow.providers.openlineage import conf

    for value in vars(conf).values():
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()
    listener.adapter._client = None


def completed(path: Path, job: str) -> dict[str, Any]:
    """The one COMPLETE event of a task (OpenLineage job `<dag id>.<task id>`)."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    [found] = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == job]
    return found


def slices_added(dataset: Any, blocks: list[str]) -> list[model.DataSlice]:
    from airflow_odf.odf.format.multiformats import Multihash

    events = [dataset.block(Multihash.parse(h)).event for h in blocks]
    return [
        e.new_data for e in events if isinstance(e, model.AddData | model.ExecuteTransform) and e.new_data
    ]


@pytest.mark.usefixtures("airflow_db", "spark")
def test_events_of_the_trades_pipeline_carry_the_run(odf_repo: Path, openlineage_file: Path) -> None:
    dag = load_dag("odf_trades_pipeline.py", "odf_trades_pipeline")
    run = dag.test()
    assert set(task_states(run).values()) == {"success"}
    repo = Repository.open(odf_repo)
    trades, daily = repo.dataset("com.example.trades"), repo.dataset("com.example.trades.daily")
    trades_id = str(trades.state().dataset_id).removeprefix("did:odf:")
    daily_id = str(daily.state().dataset_id).removeprefix("did:odf:")
    ingested, transformed = xcom(run, "ingest_trades"), xcom(run, "transform_daily")

    # the ingest: the new head as version, the records and bytes of the slices its blocks added
    event = completed(openlineage_file, "odf_trades_pipeline.ingest_trades")
    assert event["inputs"] == []
    [output] = event["outputs"]
    assert (output["namespace"], output["name"]) == ("odf", trades_id)
    assert output["facets"]["version"]["datasetVersion"] == ingested["new_head"] == str(trades.head())
    added = slices_added(trades, ingested["new_blocks"])
    assert len(added) == 2  # one block per trades file
    statistics = output["outputFacets"]["outputStatistics"]
    assert statistics["rowCount"] == sum(s.offset_interval.end - s.offset_interval.start + 1 for s in added)
    assert statistics["rowCount"] == ingested["records"] == trades.state().num_records
    assert statistics["size"] == sum(s.size for s in added) == trades.state().data_size
    assert statistics["fileCount"] == 2
    assert output["facets"]["symlinks"]["identifiers"] == [
        {"namespace": "odf", "name": "com.example.trades", "type": "alias"}
    ]
    assert "columnLineage" not in output["facets"]  # a root: no SQL over inputs

    # the transform: its input at the head it was pinned to, its output's version, rows, bytes, columns
    event = completed(openlineage_file, "odf_trades_pipeline.transform_daily")
    [source] = event["inputs"]
    assert (source["namespace"], source["name"]) == ("odf", trades_id)
    assert source["facets"]["version"]["datasetVersion"] == ingested["new_head"]
    [output] = event["outputs"]
    assert (output["namespace"], output["name"]) == ("odf", daily_id)
    assert output["facets"]["version"]["datasetVersion"] == transformed["new_head"] == str(daily.head())
    [added] = slices_added(daily, transformed["new_blocks"])
    statistics = output["outputFacets"]["outputStatistics"]
    assert {k: statistics[k] for k in ("rowCount", "size", "fileCount")} == {
        "rowCount": added.offset_interval.end - added.offset_interval.start + 1,
        "size": added.size,
        "fileCount": 1,
    }
    assert statistics["rowCount"] == transformed["records"] == daily.state().num_records

    def inputs(field: str, subtype: str, kind: str = "DIRECT") -> list[dict[str, Any]]:
        transformation = {"type": kind, "subtype": subtype, "masking": False}
        return [{"namespace": "odf", "name": trades_id, "field": field, "transformations": [transformation]}]

    columns = output["facets"]["columnLineage"]
    assert {name: f["inputFields"] for name, f in columns["fields"].items()} == {
        "event_time": inputs("event_time", "TRANSFORMATION"),  # CAST(date_trunc('DAY', event_time) ...)
        "symbol": inputs("symbol", "IDENTITY"),
        "volume": inputs("quantity", "AGGREGATION"),  # SUM(quantity); `trades` is COUNT(*): no input
    }
    assert columns["fields"]["symbol"]["transformationType"] == "IDENTITY"
    assert columns["dataset"] == [
        *inputs("event_time", "GROUP_BY", "INDIRECT"),
        *inputs("event_time", "SORT", "INDIRECT"),
        *inputs("symbol", "GROUP_BY", "INDIRECT"),
        *inputs("symbol", "SORT", "INDIRECT"),
    ]
    # every output column the facet names is one of the output's schema
    schema = {f["name"] for f in output["facets"]["schema"]["fields"]}
    assert set(columns["fields"]) <= schema and {"offset", "system_time"} <= schema - set(columns["fields"])


def failed(path: Path, job: str) -> dict[str, Any]:
    """The one FAIL event of a task."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    [found] = [e for e in events if e["eventType"] == "FAIL" and e["job"]["name"] == job]
    return found


def _daily_volumes(trades: Any) -> dict[tuple[Any, str], int]:
    """(day, symbol) -> SUM(quantity) of the trades: what the daily transform computes."""
    from airflow_odf.odf.chain.data_access import tail

    table = tail(trades, 10_000)
    assert table is not None
    volumes: dict[tuple[Any, str], int] = {}
    for r in table.to_pylist():
        key = (r["event_time"].date(), r["symbol"])
        volumes[key] = volumes.get(key, 0) + r["quantity"]
    return volumes


@pytest.mark.usefixtures("airflow_db", "spark")
def test_a_failed_check_gives_a_fail_event_with_the_assertions_and_no_output_version(
    odf_repo: Path, openlineage_file: Path
) -> None:
    """Example DAG 1 with checks on its transform that the daily volumes fail (`volume.max`): the ingest's
    COMPLETE event carries its passed checks; the transform's FAIL event every check's result, its input
    at the head the refused batch read (the ingest's), and its output without a version or statistics."""
    dag = load_dag("odf_trades_pipeline.py", "odf_trades_pipeline")
    dag.get_task("transform_daily").checks = {
        "columns": {"volume": {"max": {"less_than": 0}}},
        "tables": {"has_rows": {"check_statement": "COUNT(*) > 0"}},
    }
    run = dag.test()
    states = task_states(run)
    assert (states["ingest_trades"], states["transform_daily"]) == ("success", "failed")
    repo = Repository.open(odf_repo)
    trades, daily = repo.dataset("com.example.trades"), repo.dataset("com.example.trades.daily")
    trades_id = str(trades.state().dataset_id).removeprefix("did:odf:")
    daily_id = str(daily.state().dataset_id).removeprefix("did:odf:")
    ingested = xcom(run, "ingest_trades")
    assert len(daily.state().data_slices) == 0 and xcom(run, "transform_daily") is None  # no commit

    # the ingest's COMPLETE event: one passed assertion per check of its XCom
    [output] = completed(openlineage_file, "odf_trades_pipeline.ingest_trades")["outputs"]
    assert output["facets"]["version"]["datasetVersion"] == ingested["new_head"]
    assertions = output["facets"]["dataQualityAssertions"]["assertions"]
    assert [(a["name"], a["assertion"], a.get("column"), a["success"]) for a in assertions] == [
        ("trade_id.null_check", "null_check", "trade_id", True),
        ("trade_id.unique_check", "unique_check", "trade_id", True),
        ("price.min", "min", "price", True),
        ("positive_quantity", "sql", None, True),
    ]
    assert [a["actual"] for a in assertions] == [json.dumps(c["observed"]) for c in ingested["checks"]]

    # the transform's FAIL event
    event = failed(openlineage_file, "odf_trades_pipeline.transform_daily")
    [source] = event["inputs"]
    assert source["name"] == trades_id
    assert source["facets"]["version"]["datasetVersion"] == ingested["new_head"]  # the pinned head
    [output] = event["outputs"]
    assert (output["namespace"], output["name"]) == ("odf", daily_id)
    assert "version" not in output["facets"] and "outputStatistics" not in output.get("outputFacets", {})
    assert output["facets"]["dataQualityAssertions"]["assertions"] == [
        {"assertion": "max", "success": False, "column": "volume", "severity": "error", "name": "volume.max",
         "expected": "less_than 0", "actual": json.dumps(max(_daily_volumes(trades).values())), "params": {}},
        {"assertion": "sql", "success": True, "severity": "error", "name": "has_rows", "expected": "true",
         "actual": "1", "params": {}},
    ]  # fmt: skip

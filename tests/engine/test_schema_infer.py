"""Ahead-of-data inference (`infer` requests) against what a real first ingest records.

For several sources (read formats, declared or inferred read schemas, preprocess queries, merge
strategies) the inferred schema must equal the SetDataSchema the first real ingest of the same sample
commits. Inference itself commits nothing and writes no data, unless asked to record the schema before
any data; then the ingest that follows adds data under that schema without a new SetDataSchema.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from airflow_odf.cli.main import main
from airflow_odf.engine.job import run_request
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.engine_client.contract import InferRequest, InputFile, schema_from_text
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.polling import pull_polling
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.ingest.schema_inference import InferOptions, SchemaInferenceError, infer_schema
from airflow_odf.odf.repo.repository import Repository

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
T1 = Timestamp.parse("2024-03-01T10:00:00Z")


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return Repository.init(tmp_path / "repo")


def _dataset(repo: Repository, name: str, *events: Any) -> Dataset:
    repo.add(
        model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=list(events)), system_time=T0
    )
    return repo.dataset(name)


def _push(read: Any, merge: Any, preprocess: model.TransformSql | None = None) -> model.AddPushSource:
    return model.AddPushSource(source_name="default", read=read, preprocess=preprocess, merge=merge)


def _recorded(dataset: Dataset) -> model.DataSchema:
    state = dataset.state()
    assert state.schema is not None and state.schema.schema is not None
    return state.schema.schema


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _parquet(path: Path) -> Path:
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.uint8()),
            "name": pa.array(["a", None], pa.large_utf8()),
            "at": pa.array([1_700_000_000_000_000, None], pa.timestamp("us", tz="UTC")),
            "tags": pa.array([["x"], []], pa.list_(pa.utf8())),
        }
    )
    pq.write_table(table, path)
    return path


CASES = {
    "csv-ddl-append": (
        _push(
            model.ReadStepCsv(
                header=True, ddl_schema=["event_time TIMESTAMP", "city STRING NOT NULL", "n BIGINT"]
            ),
            model.MergeStrategyAppend(),
        ),
        "sample.csv",
        "event_time,city,n\n2020-01-01T00:00:00Z,A,1\n,B,\n",
    ),
    "csv-strings-preprocess-ledger": (
        _push(
            model.ReadStepCsv(header=True),
            model.MergeStrategyLedger(primary_key=["city"]),
            model.TransformSql(
                engine="spark",
                query="SELECT to_timestamp(day) AS event_time, city, CAST(n AS DECIMAL(12, 2)) AS amount "
                "FROM input",
            ),
        ),
        "sample.csv",
        "day,city,n\n2020-01-01,A,1.5\n2020-01-02,B,2\n",
    ),
    "ndjson-inferred-snapshot": (
        _push(model.ReadStepNdJson(), model.MergeStrategySnapshot(primary_key=["key"])),
        "sample.json",
        '{"key": "a", "value": 1, "nested": {"x": true}}\n{"key": "b", "value": 2.5, "list": [1, 2]}\n',
    ),
    "parquet-widened-append": (
        _push(model.ReadStepParquet(), model.MergeStrategyAppend()),
        "sample.parquet",
        None,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_inferred_schema_is_what_the_first_ingest_records(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path, case: str
) -> None:
    source, file_name, text = CASES[case]
    dataset = _dataset(repo, case, source)
    sample = _parquet(tmp_path / file_name) if text is None else _write(tmp_path / file_name, text)
    head = dataset.head()

    inferred = infer_schema(dataset, case, runner, InferOptions(tmp_path / "work"), files=[sample])

    assert dataset.head() == head and not inferred.committed  # nothing committed
    assert inferred.source == "default" and inferred.sample == [str(sample)] and inferred.changes is None
    names = [f.name for f in inferred.schema.fields]
    assert names[:4] == ["offset", "op", "system_time", "event_time"]
    result = push_ingest(
        dataset, case, runner, [sample], IngestOptions(work_dir=tmp_path / "work"), system_time=T1
    )
    assert result.records > 0
    assert _recorded(dataset) == inferred.schema


def test_widenings_of_the_sample_are_reported_by_column(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    dataset = _dataset(repo, "wide", _push(model.ReadStepParquet(), model.MergeStrategyAppend()))
    inferred = infer_schema(
        dataset, "wide", runner, InferOptions(tmp_path / "work"), files=[_parquet(tmp_path / "s.parquet")]
    )
    assert [(w.column, w.arrow_type, w.spark_type) for w in inferred.widenings] == [
        ("id", "uint8", "smallint"),
        ("at", "timestamp[us, tz=UTC]", "timestamp"),
    ]
    assert "no unsigned integers" in inferred.widenings[0].reason
    fields = {f.name: f.type for f in inferred.schema.fields}
    assert fields["id"] == model.DataTypeOption(inner=model.DataTypeInt16())
    ms = model.TimeUnit.MILLISECOND
    assert fields["at"] == model.DataTypeOption(inner=model.DataTypeTimestamp(unit=ms, timezone="UTC"))


def test_committed_before_data_then_the_ingest_adds_data_under_it(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    source, _, text = CASES["csv-ddl-append"]
    dataset = _dataset(repo, "early", source)
    sample = _write(tmp_path / "s.csv", text)
    inferred = infer_schema(
        dataset, "early", runner, InferOptions(tmp_path / "work"), files=[sample], commit=True, system_time=T0
    )
    assert inferred.committed and inferred.new_head == str(dataset.head())
    assert dataset.block(dataset.head()).event == model.SetDataSchema(schema=inferred.schema)
    assert dataset.state().last_offset is None  # before any data

    again = infer_schema(
        dataset, "early", runner, InferOptions(tmp_path / "work"), files=[sample], commit=True
    )
    assert not again.committed and again.changes == [] and again.new_head is None  # the same: nothing to do

    push_ingest(dataset, "early", runner, [sample], IngestOptions(work_dir=tmp_path / "work"), system_time=T1)
    events = [b.event for _, b in reversed(list(dataset.iter_blocks()))]
    assert sum(isinstance(e, model.SetDataSchema) for e in events) == 1
    assert isinstance(events[-1], model.AddData) and events[-1].new_data is not None


def test_a_polling_source_is_sampled_like_its_first_ingest(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _write(src / "obs-1.csv", "t,v\n2020-01-01T00:00:00Z,1\n")
    _write(src / "obs-2.csv", "t,v\n2020-01-02T00:00:00Z,2\n")
    polling = model.SetPollingSource(
        fetch=model.FetchStepFilesGlob(path=str(src / "obs-*.csv")),
        read=model.ReadStepCsv(header=True, ddl_schema=["t TIMESTAMP", "v INT"]),
        preprocess=model.TransformSql(engine="spark", query="SELECT t AS event_time, v FROM input"),
        merge=model.MergeStrategyLedger(primary_key=["event_time"]),
    )
    dataset = _dataset(repo, "obs", polling)
    head = dataset.head()
    inferred = infer_schema(dataset, "obs", runner, InferOptions(tmp_path / "work", source_dir=src))
    assert inferred.sample == [str(src / "obs-1.csv")]  # the first batch, as a first pull takes it
    assert dataset.head() == head and dataset.state().source_states == {}
    assert not any((tmp_path / "work" / "operations").iterdir())  # the scratch space is gone
    pull_polling(dataset, "obs", runner, IngestOptions(tmp_path / "work", source_dir=src), system_time=T1)
    assert _recorded(dataset) == inferred.schema
    assert infer_schema(dataset, "obs", runner, InferOptions(tmp_path / "work", source_dir=src)).changes == []


def test_the_engine_answers_an_infer_request_without_writing(spark: SparkSession, tmp_path: Path) -> None:
    sample = _write(tmp_path / "s.csv", "a,b\n1,x\n")
    out_dir = tmp_path / "out"
    request = InferRequest(
        operation_id="op",
        dataset_id="did:odf:x",
        dataset_alias="x",
        inputs=[InputFile(str(sample), "2024-01-01T00:00:00Z")],
        read={"kind": "Csv", "header": True},
        merge={"kind": "Append"},
        out_dir=str(out_dir),
    )
    response = run_request(spark, json.loads(request.to_json()))
    assert response.get("error") is None and response["widenings"] == []
    schema = schema_from_text(response["output_schema"])
    assert [(f.name, str(f.type), f.nullable) for f in schema] == [
        ("offset", "int64", False),
        ("op", "int32", False),
        ("system_time", "timestamp[ms, tz=UTC]", False),
        ("event_time", "timestamp[ms, tz=UTC]", False),  # filled from the source's event time
        ("a", "string", True),
        ("b", "string", True),
    ]
    assert not out_dir.exists()
    assert base64.b64decode(response["output_schema"])  # Arrow IPC, as in ingest responses


def test_refusals_name_the_dataset_and_commit_nothing(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    options = InferOptions(tmp_path / "work")
    push = _dataset(repo, "push", _push(model.ReadStepCsv(header=True), model.MergeStrategyAppend()))
    with pytest.raises(SchemaInferenceError, match=r"push: push source 'default' has nothing to fetch") as e:
        infer_schema(push, "push", runner, options)
    assert e.value.kind == "no-sample"
    empty = _write(tmp_path / "empty.csv", "")
    with pytest.raises(SchemaInferenceError, match=r"empty.csv: the sample holds no records") as e:
        infer_schema(push, "push", runner, options, files=[empty])
    assert e.value.kind == "no-data"
    with pytest.raises(SchemaInferenceError, match=r"push has no push source 'other'"):
        infer_schema(push, "push", runner, options, files=[empty], source_name="other")

    push.commit([model.SetDataSchema(schema=model.DataSchema(fields=[]))], system_time=T0)
    head = push.head()
    other = _write(tmp_path / "o.csv", "a\n1\n")
    with pytest.raises(SchemaInferenceError, match=r"push already has a different schema") as e:
        infer_schema(push, "push", runner, options, files=[other], commit=True)
    assert e.value.kind == "has-schema" and push.head() == head

    repo.add(
        model.DatasetSnapshot(
            name="derived",
            kind=model.DatasetKind.DERIVATIVE,
            metadata=[
                model.SetTransform(
                    inputs=[model.TransformInput(dataset_ref="push")],
                    transform=model.TransformSql(engine="spark", query="SELECT * FROM push"),
                )
            ],
        ),
        system_time=T0,
    )
    with pytest.raises(SchemaInferenceError, match=r"derived is not a Root dataset") as e:
        infer_schema(repo.dataset("derived"), "derived", runner, options, files=[other])
    assert e.value.kind == "not-root"


def test_odf_schema_infer_prints_then_commits(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, _, text = CASES["csv-ddl-append"]
    dataset = _dataset(repo, "cli", source)
    sample = _write(tmp_path / "s.csv", text)
    args = ["schema", "infer", "--repo", str(repo.root), "--master", "local[2]", "cli", str(sample)]
    capsys.readouterr()
    assert main([*args, "--format", "ddl"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "offset BIGINT NOT NULL,",
        "op INT NOT NULL,",
        "system_time TIMESTAMP NOT NULL,",
        "event_time TIMESTAMP NOT NULL,",
        "city STRING,",  # Spark's readers make every column nullable: ddlSchema's NOT NULL is not kept
        "n BIGINT",
    ]
    assert f"cli: inferred from {sample} (source default)" in err
    assert dataset.state().schema is None

    assert main([*args, "--commit"]) == 0
    out, err = capsys.readouterr()
    assert "cli: schema committed before any data (block " in err
    assert main(["schema", "show", "--repo", str(repo.root), "cli"]) == 0
    assert capsys.readouterr().out == out  # what infer printed is what was recorded

"""`build_dag`: the structure of the DAG generated from a manifest folder (tasks, their settings and
dependencies) and the parse-time errors, each naming the manifest file. No repository, no Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_odf.dag_factory import DagFactoryError, build_dag, plan_pipeline, task_id_for
from airflow_odf.operators.ingest import OdfIngestOperator
from airflow_odf.operators.manifest import OdfApplyManifestOperator
from airflow_odf.operators.transform import OdfTransformOperator
from tests.airflow.dag_runs import load_dag


def _write(folder: Path, file: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file
    path.write_text(body)
    return path


def _snapshot(folder: Path, name: str, kind: str, event: dict[str, Any], file: str | None) -> Path:
    content = {"name": name, "kind": kind, "metadata": [event]}
    manifest = {"kind": "DatasetSnapshot", "version": 1, "content": content}
    return _write(folder, file or f"{name}.yaml", yaml.safe_dump(manifest, sort_keys=False))


def _polling_root(folder: Path, name: str, file: str | None = None) -> Path:
    source = {
        "kind": "SetPollingSource",
        "fetch": {"kind": "FilesGlob", "path": f"data/{name}-*.csv"},
        "read": {"kind": "Csv", "header": True, "inferSchema": True},
        "merge": {"kind": "Append"},
    }
    return _snapshot(folder, name, "Root", source, file)


def _push_root(folder: Path, name: str) -> Path:
    source = {
        "kind": "AddPushSource",
        "sourceName": "default",
        "read": {"kind": "NdJson"},
        "merge": {"kind": "Append"},
    }
    return _snapshot(folder, name, "Root", source, None)


def _derivative(folder: Path, name: str, inputs: list[str], file: str | None = None) -> Path:
    transform = {
        "kind": "SetTransform",
        "inputs": [{"datasetRef": ref, "alias": f"in{i}"} for i, ref in enumerate(inputs)],
        "transform": {"kind": "Sql", "engine": "spark", "query": "SELECT * FROM in0"},
    }
    return _snapshot(folder, name, "Derivative", transform, file)


def _upstream(dag: Any) -> dict[str, set[str]]:
    return {t.task_id: set(t.upstream_task_ids) for t in dag.tasks}


def test_one_task_per_polling_root_and_derivative_wired_after_its_inputs(tmp_path: Path) -> None:
    folder = tmp_path / "project" / "manifests"
    _polling_root(folder, "org.trades")
    _push_root(folder, "org.quotes")
    # file names sort before their inputs': the order comes from the inputs, not the files
    _derivative(folder, "org.trades.enriched", ["org.trades", "Org.Quotes"], file="a-enriched.yaml")
    _derivative(folder, "org.trades.daily", ["org.trades.enriched"], file="0-daily.yml")
    _write(folder, "notes.txt", "not a manifest")

    dag = build_dag(folder, dag_id="pipeline", engine="local", odf_conn_id="repo", spark_conn_id="spark")

    assert _upstream(dag) == {
        "apply_manifests": set(),
        "ingest_org.trades": {"apply_manifests"},  # org.quotes (push only) has no task
        "transform_org.trades.enriched": {"ingest_org.trades", "apply_manifests"},
        "transform_org.trades.daily": {"transform_org.trades.enriched"},
    }
    apply = dag.get_task("apply_manifests")
    assert isinstance(apply, OdfApplyManifestOperator) and not apply.create_repository
    assert apply.manifests == [str(p) for p in sorted(folder.glob("*.y*ml"))]
    ingest = dag.get_task("ingest_org.trades")
    assert isinstance(ingest, OdfIngestOperator) and ingest.dataset == "org.trades"
    assert ingest.source_dir == str(tmp_path / "project")  # the folder's parent
    daily = dag.get_task("transform_org.trades.daily")
    assert isinstance(daily, OdfTransformOperator) and daily.dataset == "org.trades.daily"
    for task in dag.tasks:
        assert (task.engine, task.odf_conn_id, task.spark_conn_id) == ("local", "repo", "spark")
    plan = plan_pipeline(folder)
    assert [d.name for d in plan.datasets][-2:] == ["org.trades.enriched", "org.trades.daily"]


def test_dag_and_task_settings_are_passed_through(tmp_path: Path) -> None:
    _polling_root(tmp_path / "m", "org.a")
    _derivative(tmp_path / "m", "org.b", ["org.a"])
    dag = build_dag(
        tmp_path / "m",
        dag_id="settings",
        schedule="@daily",
        default_args={"retries": 3},
        source_dir=tmp_path / "data-root",
        create_repository=True,
        ingest_kwargs={"schema_policy": "additive", "files_per_batch": 2},
        transform_kwargs={"max_input_records": 1000},
        tags=["odf"],
        catchup=False,
    )
    assert dag.dag_id == "settings" and dag.tags == {"odf"} and not dag.catchup
    ingest, transform = dag.get_task("ingest_org.a"), dag.get_task("transform_org.b")
    assert ingest.retries == 3 and transform.retries == 3
    assert ingest.schema_policy == "additive" and ingest.files_per_batch == 2
    assert ingest.source_dir == str(tmp_path / "data-root")
    assert transform.max_input_records == 1000 and transform.trigger_rule == "all_success"
    assert dag.get_task("apply_manifests").create_repository


def test_external_inputs_are_allowed_only_when_declared(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    file = _derivative(folder, "org.report", ["org.trades", "org.fx"])
    _polling_root(folder, "org.trades")
    with pytest.raises(DagFactoryError) as err:
        build_dag(folder, dag_id="missing")
    message = str(err.value)
    assert message.startswith(f"{file}: org.report reads 'org.fx', which no manifest in {folder}")
    assert "external_inputs" in message

    dag = build_dag(folder, dag_id="external", external_inputs=["ORG.FX"])
    assert _upstream(dag)["transform_org.report"] == {"ingest_org.trades", "apply_manifests"}


@pytest.mark.parametrize("self_loop", [False, True])
def test_a_cycle_is_an_error_naming_the_files(tmp_path: Path, self_loop: bool) -> None:
    folder = tmp_path / "m"
    _polling_root(folder, "org.a")
    if self_loop:
        b = _derivative(folder, "org.b", ["org.a", "org.b"])
        expected = f"{b}: the transform inputs form a cycle: org.b ({b}) -> org.b ({b})"
    else:
        b = _derivative(folder, "org.b", ["org.a", "org.d"])
        c = _derivative(folder, "org.c", ["org.b"])
        d = _derivative(folder, "org.d", ["org.c"])
        shown = f"org.b ({b}) -> org.d ({d}) -> org.c ({c}) -> org.b ({b})"
        expected = f"{b}: the transform inputs form a cycle: {shown}"
    with pytest.raises(DagFactoryError) as err:
        build_dag(folder, dag_id="cycle")
    assert str(err.value) == expected


def test_a_dataset_defined_twice_is_an_error(tmp_path: Path) -> None:
    first = _polling_root(tmp_path, "org.a", file="1.yaml")
    second = _polling_root(tmp_path, "ORG.A", file="2.yaml")
    with pytest.raises(DagFactoryError, match=f"^{second}: dataset 'ORG.A' is already defined in {first}$"):
        plan_pipeline(tmp_path)


def test_an_invalid_manifest_is_an_error_naming_the_file(tmp_path: Path) -> None:
    _polling_root(tmp_path, "org.a")
    bad = _write(tmp_path, "bad.yaml", "kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: org.b\n")
    with pytest.raises(DagFactoryError) as err:
        build_dag(tmp_path, dag_id="bad")
    assert str(err.value).startswith(f"{bad}: ") and "kind" in str(err.value)


def test_sql_the_policy_refuses_is_an_import_error_naming_manifest_step_and_construct(tmp_path: Path) -> None:
    _polling_root(tmp_path, "org.a")
    path = _derivative(tmp_path, "org.leak", ["org.a"])
    manifest = yaml.safe_load(path.read_text())
    manifest["content"]["metadata"][0]["transform"]["query"] = (
        "SELECT in0.*, reflect('java.lang.System', 'getenv', 'AWS_SECRET_ACCESS_KEY') AS s FROM in0"
    )
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    with pytest.raises(DagFactoryError) as err:
        build_dag(tmp_path, dag_id="leak")
    assert str(err.value) == (
        f"{path}: content.metadata[0].transform: dataset 'org.leak': transform step 1 of 1: function reflect "
        "at line 1, column 15 is refused: it calls any Java method (the environment, files, System.exit)"
    )


def test_apply_manifest_refuses_every_manifest_before_adding_any(tmp_path: Path) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    _polling_root(tmp_path, "org.a")
    path = _polling_root(tmp_path, "org.b")
    manifest = yaml.safe_load(path.read_text())
    manifest["content"]["metadata"][0]["preprocess"] = {
        "kind": "Sql",
        "engine": "spark",
        "queries": [
            {"alias": "x", "query": "SELECT * FROM input"},
            {"query": "SELECT * FROM csv.`/etc/passwd`"},
        ],
    }
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    operator = OdfApplyManifestOperator(task_id="apply", manifests=str(tmp_path))
    with pytest.raises(AirflowFailException) as err:
        operator.snapshots()  # execute reads them all before the first is added
    assert "dataset 'org.b': preprocess step 2 of 2: relation csv.`/etc/passwd` at line 1, column 15" in str(
        err.value
    )


def test_a_folder_without_manifests_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DagFactoryError, match="no DatasetSnapshot manifest"):
        build_dag(tmp_path, dag_id="empty")
    with pytest.raises(DagFactoryError, match="not a directory"):
        build_dag(tmp_path / "missing", dag_id="missing")


def test_gating_puts_a_source_sensor_before_each_ingest(tmp_path: Path) -> None:
    from airflow_odf.sensors.source import OdfSourceChangedSensor

    folder = tmp_path / "m"
    _polling_root(folder, "org.a")
    _polling_root(folder, "org.b")
    _derivative(folder, "org.ab", ["org.a", "org.b"])
    dag = build_dag(
        folder,
        dag_id="gated",
        odf_conn_id="repo",
        gate_with_source_sensor=True,
        sensor_kwargs={"poke_interval": 60, "timeout": 600},
    )
    assert _upstream(dag) == {
        "apply_manifests": set(),
        "source_changed_org.a": {"apply_manifests"},
        "source_changed_org.b": {"apply_manifests"},
        "ingest_org.a": {"source_changed_org.a"},
        "ingest_org.b": {"source_changed_org.b"},
        "transform_org.ab": {"ingest_org.a", "ingest_org.b"},
    }
    sensor = dag.get_task("source_changed_org.a")
    assert isinstance(sensor, OdfSourceChangedSensor)
    assert (sensor.dataset, sensor.odf_conn_id, sensor.source_dir) == ("org.a", "repo", str(tmp_path))
    assert (sensor.mode, sensor.soft_fail, sensor.poke_interval, sensor.timeout) == (
        "reschedule",
        True,
        60,
        600,
    )
    # one source without news must not hold back a transform whose other input has some
    assert dag.get_task("transform_org.ab").trigger_rule == "none_failed_min_one_success"


def test_gate_fails_on_a_source_error_despite_its_soft_fail_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate used to end *skipped* (its default `soft_fail=True`) when its source could not even be
    asked; now only a timeout skips it, and an error fails it with the core's message."""
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_odf.odf.format.manifests import read_manifests
    from airflow_odf.odf.repo.repository import Repository

    folder = tmp_path / "m"
    source = {
        "kind": "SetPollingSource",
        "fetch": {"kind": "Url", "url": "${{ env.ODF_TEST_GATE_URL }}"},
        "read": {"kind": "Csv", "header": True, "schema": ["symbol STRING", "price DOUBLE"]},
        "merge": {"kind": "Append"},
    }
    manifest = _snapshot(folder, "org.gated", "Root", source, None)
    repo = Repository.init(tmp_path / "repo")
    [snapshot] = read_manifests(manifest)
    repo.add(snapshot.content)  # what apply_manifests does first
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_GATE", json.dumps({"conn_type": "odf_repo", "host": repo.root.as_uri()})
    )
    monkeypatch.delenv("ODF_TEST_GATE_URL", raising=False)
    dag = build_dag(
        folder,
        dag_id="gated",
        odf_conn_id="odf_gate",
        gate_with_source_sensor=True,
        # poke mode runs without a task instance; reschedule mode: test_sensor_failures_dag.py
        sensor_kwargs={"mode": "poke", "poke_interval": 0.05, "timeout": 5},
    )
    gate = dag.get_task("source_changed_org.gated")
    assert gate.soft_fail  # the factory's default
    with pytest.raises(
        AirflowFailException, match=r"org\.gated: fetch\.url: environment variable ODF_TEST_GATE_URL"
    ):
        gate.execute({})


def test_task_ids_from_dataset_names() -> None:
    assert task_id_for("ingest", "com.example.trades-eu") == "ingest_com.example.trades-eu"
    assert task_id_for("transform", "acme/com.example.daily") == "transform_acme_com.example.daily"


def test_example_dag_4_structure() -> None:
    dag = load_dag("odf_factory.py", "odf_factory_weather")
    assert _upstream(dag) == {
        "apply_manifests": set(),
        "ingest_com.example.weather.readings": {"apply_manifests"},
        "transform_com.example.weather.daily": {"ingest_com.example.weather.readings"},
    }
    assert dag.get_task("ingest_com.example.weather.readings").source_dir.endswith("dags_examples")

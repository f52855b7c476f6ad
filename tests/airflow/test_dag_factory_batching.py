"""The DAG factory's batching rules (`build_dag(batching=...)`): the `await_batch_<name>` check between a
derivative's inputs' tasks and its transform, the pins it hands over, the trigger rules that let a
batch wait without failing the run, and every bad rule as an import error naming the manifest. The
check itself runs against a real repository (AddData blocks committed directly; no Spark)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSkipException

from airflow_odf.dag_factory import DagFactoryError, build_dag, plan_pipeline
from airflow_odf.odf.format.manifests import read_manifests
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.sensors.batching import INPUT_HEADS_KEY, OdfBatchingSensor
from tests.airflow.test_batching_trigger import TaskInstance
from tests.airflow.test_dag_factory import _derivative, _polling_root, _push_root, _upstream
from tests.unit.test_transform_plan import SCHEMA, add_data


def _pipeline(folder: Path) -> None:
    _polling_root(folder, "org.trades")
    _push_root(folder, "org.quotes")
    _derivative(folder, "org.enriched", ["org.trades", "org.quotes"])
    _derivative(folder, "org.daily", ["org.enriched"])


def test_a_batched_derivative_gets_a_check_before_its_transform(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    _pipeline(folder)

    dag = build_dag(
        folder,
        dag_id="batched",
        odf_conn_id="repo",
        default_args={"retries": 2},
        batching={"ORG.Enriched": {"minRecordsToAwait": 1000, "maxBatchingInterval": "1h"}},
    )

    assert _upstream(dag) == {
        "apply_manifests": set(),
        "ingest_org.trades": {"apply_manifests"},
        "await_batch_org.enriched": {"apply_manifests", "ingest_org.trades"},
        "transform_org.enriched": {"await_batch_org.enriched"},
        "transform_org.daily": {"transform_org.enriched"},
    }
    check = dag.get_task("await_batch_org.enriched")
    assert isinstance(check, OdfBatchingSensor)
    assert (check.dataset, check.odf_conn_id) == ("org.enriched", "repo")
    assert (check.min_records_to_await, check.max_batching_interval) == (1000, 3600.0)
    # checked once per run, never waiting, even when nothing upstream had news this run
    assert (check.mode, check.deferrable, check.timeout, check.soft_fail) == ("poke", False, 0, True)
    assert check.trigger_rule == "none_failed"
    enriched = dag.get_task("transform_org.enriched")
    pins = enriched.input_heads
    assert (pins.operator, pins.key) == (check, INPUT_HEADS_KEY)  # the XCom the check leaves
    for transform in ("transform_org.enriched", "transform_org.daily"):
        # a batch still waiting skips its transform and what depends on it only
        assert dag.get_task(transform).trigger_rule == "none_failed_min_one_success"
    assert dag.get_task("transform_org.daily").input_heads == {}


def test_without_batching_nothing_changes(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    _pipeline(folder)
    dag = build_dag(folder, dag_id="plain")
    assert not [t for t in dag.tasks if t.task_id.startswith("await_batch")]
    assert dag.get_task("transform_org.enriched").trigger_rule == "all_success"


@pytest.mark.parametrize(
    ("batching", "message"),
    [
        (
            {"org.unknown": {"minRecordsToAwait": 5}},
            "batching: 'org.unknown' is not a derivative of the folder",
        ),
        ({"org.trades": {"minRecordsToAwait": 5}}, "org.trades.yaml: batching: org.trades is a root"),
        (
            {"org.daily": {"minRecordsToAwait": 0}},
            "org.daily.yaml: batching of org.daily: minRecordsToAwait 0",
        ),
        (
            {"org.daily": {"maxBatchingInterval": "often"}},
            "org.daily.yaml: batching of org.daily: maxBatching",
        ),
        ({"org.daily": {"max_records": 5}}, "org.daily.yaml: batching of org.daily: unknown setting(s)"),
    ],
)
def test_a_bad_rule_is_an_import_error_naming_the_manifest(
    tmp_path: Path, batching: dict[str, Any], message: str
) -> None:
    folder = tmp_path / "m"
    _pipeline(folder)
    with pytest.raises(DagFactoryError) as err:
        build_dag(folder, dag_id="bad", batching=batching)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_check_skips_until_the_rule_holds_then_pins_the_heads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "m"
    _pipeline(folder)
    repo = Repository.init(tmp_path / "repo")
    for planned in plan_pipeline(folder).datasets:  # inputs first
        [snapshot] = read_manifests(planned.file)
        repo.add(snapshot.content)  # what apply_manifests does first
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_FACTORY", json.dumps({"conn_type": "odf_repo", "host": repo.root.as_uri()})
    )
    trades, quotes = repo.dataset("org.trades"), repo.dataset("org.quotes")
    for ds in (trades, quotes):  # as if pulled: a schema, then data (blocks dated 2024)
        ds.commit([SCHEMA])
    add_data(trades, 600)
    dag = build_dag(
        folder,
        dag_id="batched",
        odf_conn_id="odf_factory",
        batching={"org.enriched": {"minRecordsToAwait": 1000}},
    )
    check = dag.get_task("await_batch_org.enriched")

    ti = TaskInstance()
    with pytest.raises(AirflowSkipException):
        check.execute({"ti": ti})
    assert ti.pushed == {}

    head = add_data(quotes, 400)
    result = check.execute({"ti": ti})
    heads = {str(trades.state().dataset_id): str(trades.head()), str(quotes.state().dataset_id): str(head)}
    assert result["reason"] == "records" and result["new_records"] == 1000
    assert ti.pushed == {INPUT_HEADS_KEY: heads}

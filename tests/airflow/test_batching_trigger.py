"""`OdfBatchingTrigger` and `OdfBatchingSensor` against a real repository behind an `odf_repo`
connection, the input's AddData blocks committed directly (the helpers of test_transform_plan; no
Spark): serialization as the triggerer stores it, every way a wait ends, the wake-up when the interval
ends, and the sensor's XCom (the pins under `input_heads`)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.sensors.batching import INPUT_HEADS_KEY, OdfBatchingSensor
from airflow_odf.triggers.batching import OdfBatchingTrigger
from tests.airflow.test_triggers import WAIT, first_event, rebuilt
from tests.unit.test_transform_plan import add_data, derivative, root

POLL = 0.05


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Repository]:
    """A repository behind the connection `odf_batch`: root `trades`, derivative `deriv` reading it."""
    repository = Repository.init(tmp_path / "repo")
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_BATCH", json.dumps({"conn_type": "odf_repo", "host": repository.root.as_uri()})
    )
    root(repository, "trades")
    derivative(repository, [("trades", "t")])
    yield repository


class TaskInstance:
    """The task instance of a sensor's context, as far as it uses one: the XComs it pushes by key."""

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def trigger(**kwargs: Any) -> OdfBatchingTrigger:
    return OdfBatchingTrigger(dataset="deriv", odf_conn_id="odf_batch", poll_interval=POLL, **kwargs)


def add_now(ds: Dataset, records: int) -> str:
    """An AddData of `records` committed at the clock's time: the interval starts now."""
    return str(add_data(ds, records, system_time=Timestamp.now()))


def test_serialize_round_trip() -> None:
    made = trigger(min_records_to_await=1000, max_batching_interval=3600, end_time=1.7e9)
    classpath, kwargs = made.serialize()
    assert classpath == "airflow_odf.triggers.batching.OdfBatchingTrigger"
    assert kwargs == {
        "dataset": "deriv",
        "odf_conn_id": "odf_batch",
        "poll_interval": POLL,
        "end_time": 1.7e9,
        "min_records_to_await": 1000,
        "max_batching_interval": 3600.0,
    }
    assert rebuilt(made).serialize() == made.serialize()


def test_fires_once_the_records_reach_n_with_the_heads_counted(repo: Repository) -> None:
    trades = repo.dataset("trades")
    for _ in range(9):
        add_data(trades, 100)
    tenth: list[str] = []

    payload = asyncio.run(
        first_event(
            trigger(min_records_to_await=1000),  # blocks dated 2024: an interval would have passed
            during=lambda: tenth.append(str(add_data(trades, 100))),
        )
    )

    did = str(trades.state().dataset_id)
    assert payload["status"] == "ready" and payload["reason"] == "records"
    assert payload["new_records"] == 1000 and payload["input_heads"] == {did: tenth[0]}
    assert payload["inputs"][0]["new_records"] == 1000 and payload["inputs"][0]["alias"] == "t"


def test_wakes_when_the_interval_ends_not_at_the_next_poll(repo: Repository) -> None:
    add_now(repo.dataset("trades"), 5)
    slow = OdfBatchingTrigger(
        dataset="deriv", odf_conn_id="odf_batch", poll_interval=3600, max_batching_interval=0.5,
        min_records_to_await=1000,
    )  # fmt: skip

    payload = asyncio.run(first_event(slow))  # within WAIT, far less than the poll interval

    assert (payload["reason"], payload["new_records"]) == ("interval", 5)
    assert slow.poll_interval > WAIT


def test_times_out_with_nothing_new(repo: Repository) -> None:
    payload = asyncio.run(first_event(trigger(min_records_to_await=10, end_time=time.time() + 0.2)))
    assert payload["status"] == "timeout" and payload["dataset"] == "deriv"
    assert payload["message"].startswith("nothing yet at the deadline")


def test_a_root_is_an_error_event(repo: Repository) -> None:
    made = OdfBatchingTrigger(dataset="trades", odf_conn_id="odf_batch", poll_interval=POLL)
    payload = asyncio.run(first_event(made))
    assert payload["status"] == "error"
    assert payload["message"].startswith("trades: trades is not a Derivative dataset")


def test_the_sensor_pushes_the_pins_and_its_status(repo: Repository) -> None:
    trades = repo.dataset("trades")
    add_data(trades, 600)
    sensor = OdfBatchingSensor(
        task_id="await_batch", dataset="deriv", odf_conn_id="odf_batch", min_records_to_await=1000
    )
    ti = TaskInstance()
    context: Any = {"ti": ti}
    assert not sensor.poke(context).is_done and ti.pushed == {}
    head = str(add_data(trades, 400))
    done = sensor.poke(context)

    did = str(trades.state().dataset_id)
    assert done.is_done and ti.pushed == {INPUT_HEADS_KEY: {did: head}}
    assert done.xcom_value["reason"] == "records" and done.xcom_value["input_heads"] == {did: head}
    assert "status" not in done.xcom_value

    resumed = sensor.execute_complete(context, {"status": "ready", **done.xcom_value})
    assert resumed == done.xcom_value and ti.pushed == {INPUT_HEADS_KEY: {did: head}}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_records_to_await": 0}, "minRecordsToAwait 0: must be a whole number of at least 1"),
        ({"max_batching_interval": "-1h"}, "maxBatchingInterval '-1h': expected seconds"),
    ],
)
def test_a_bad_rule_fails_when_the_dag_is_parsed(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OdfBatchingSensor(task_id="await_batch", dataset="deriv", **kwargs)


def test_the_sensor_defers_to_the_trigger_with_its_rule() -> None:
    sensor = OdfBatchingSensor(
        task_id="await_batch", dataset="deriv", min_records_to_await=50, max_batching_interval="15m",
        poke_interval=30,
    )  # fmt: skip
    made = sensor.trigger(end_time=2e9)
    assert made.serialize()[1] == {
        "dataset": "deriv",
        "odf_conn_id": "odf_default",
        "poll_interval": 30.0,
        "end_time": 2e9,
        "min_records_to_await": 50,
        "max_batching_interval": 900.0,
    }


def test_deferred_the_sensor_hands_the_triggerer_a_rebuildable_trigger(repo: Repository) -> None:
    """What the worker stores for the triggerer: the trigger (JSON kwargs, rebuilt by class path) and
    the method the task resumes in; the rebuilt trigger's event resumes the sensor with the pins."""
    from airflow.sdk.exceptions import TaskDeferred

    trades = repo.dataset("trades")
    sensor = OdfBatchingSensor(
        task_id="await_batch", dataset="deriv", odf_conn_id="odf_batch", min_records_to_await=100,
        max_batching_interval="1h", deferrable=True, poke_interval=POLL, timeout=60,
    )  # fmt: skip
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    assert deferred.value.method_name == "execute_complete"
    stored = rebuilt(deferred.value.trigger)
    assert stored.serialize()[1]["max_batching_interval"] == 3600.0

    head: list[str] = []
    payload = asyncio.run(first_event(stored, during=lambda: head.append(str(add_data(trades, 100)))))

    ti = TaskInstance()
    result = sensor.execute_complete({"ti": ti}, payload)
    assert result["reason"] == "records"
    assert ti.pushed == {INPUT_HEADS_KEY: {str(trades.state().dataset_id): head[0]}}

"""Example DAG 2 with `dag.test()` on SQLite and the local Spark, its Url source a real HTTP server on
127.0.0.1: new data -> sensor passes and the ingest commits; unchanged (HTTP 304) -> the sensor is
rescheduled until its timeout, then skipped with the ingest, nothing committed; changed -> only the
new rows are ingested."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.chain.data_access import iter_slices, read_slice
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from tests.airflow.dag_runs import load_dag, task_states, xcom
from tests.unit.test_source_check import HttpSource, start_http_source

DATASET = "com.example.prices"
DAY_1 = b"""event_time,symbol,price
2024-01-02T16:00:00Z,ACME,12.5000
2024-01-02T16:00:00Z,INIT,101.2500
2024-01-02T16:00:00Z,ZETA,7.1000
"""
DAY_2 = (
    DAY_1
    + b"""2024-01-03T16:00:00Z,ACME,12.7500
2024-01-03T16:00:00Z,INIT,99.0000
"""
)


@pytest.fixture
def http(monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpSource]:
    yield from start_http_source(monkeypatch)


def add_data(dataset: Dataset) -> list[model.AddData]:
    """The AddData events of the chain, oldest first."""
    return [b.event for _, b in dataset.iter_blocks() if isinstance(b.event, model.AddData)][::-1]


def rows(dataset: Dataset) -> list[tuple[Any, ...]]:
    found = []
    for data in iter_slices(dataset):
        table = read_slice(dataset, data)
        found += zip(table["symbol"].to_pylist(), [str(p) for p in table["price"].to_pylist()], strict=True)
    return sorted(found)


def reschedules(run: Any, task_id: str) -> int:
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = next(t for t in run.get_task_instances(session=session) if t.task_id == task_id)
        return session.query(TaskReschedule).filter(TaskReschedule.ti_id == ti.id).count()


@pytest.mark.usefixtures("airflow_db", "spark")
def test_polling_source_dag(odf_repo: Path, http: HttpSource, monkeypatch: pytest.MonkeyPatch) -> None:
    http.put("/prices.csv", DAY_1, ETag='"day-1"')
    monkeypatch.setenv("ODF_EXAMPLE_PRICES_URL", http.url("/prices.csv"))
    dag = load_dag("odf_polling_source.py", "odf_polling_source")
    sensor = dag.get_task("wait_for_prices")
    assert sensor.mode == "reschedule" and sensor.soft_fail
    sensor.poke_interval, sensor.timeout = 1.0, 2.5  # the example waits 50 minutes

    # 1. new data: the sensor passes at its first poke, the ingest commits it
    first = dag.test()
    assert task_states(first) == {
        "apply_manifest": "success",
        "wait_for_prices": "success",
        "ingest_prices": "success",
    }
    dataset = Repository.open(odf_repo).dataset(DATASET)
    seen = xcom(first, "wait_for_prices")
    assert seen["changed"] and '"day-1"' in seen["reason"]
    assert seen["dataset_id"] == str(dataset.state().dataset_id)
    ingested = xcom(first, "ingest_prices")
    assert ingested["records"] == 3 and ingested["new_head"] == str(dataset.head())
    [added] = add_data(dataset)
    assert added.new_source_state == model.SourceState(
        source_name="default", kind="odf/etag", value='"day-1"'
    )
    assert rows(dataset) == [("ACME", "12.5000"), ("INIT", "101.2500"), ("ZETA", "7.1000")]
    assert [h.get("If-None-Match") for _, h in http.requests] == [None, None]  # sensor, then ingest

    # 2. nothing new: 304 at every poke, rescheduled until the timeout, then skipped; no Spark, no block
    head = dataset.head()
    asked = len(http.requests)
    second = dag.test()
    assert task_states(second) == {
        "apply_manifest": "success",
        "wait_for_prices": "skipped",
        "ingest_prices": "skipped",
    }
    assert reschedules(second, "wait_for_prices") >= 1
    polls = http.requests[asked:]
    assert len(polls) >= 2 and all(h["If-None-Match"] == '"day-1"' for _, h in polls)
    assert dataset.head() == head and xcom(second, "ingest_prices") is None

    # 3. the file changes: the sensor passes, only the two new rows are added (Ledger by key)
    http.put("/prices.csv", DAY_2, ETag='"day-2"')
    third = dag.test()
    assert task_states(third) == {
        "apply_manifest": "success",
        "wait_for_prices": "success",
        "ingest_prices": "success",
    }
    assert '"day-2"' in xcom(third, "wait_for_prices")["reason"]
    ingested = xcom(third, "ingest_prices")
    assert ingested["records"] == 2 and ingested["prev_head"] == str(head)
    assert ingested["new_head"] == str(dataset.head())
    _, second_add = add_data(dataset)
    assert second_add.new_source_state is not None and second_add.new_source_state.value == '"day-2"'
    assert second_add.new_data is not None
    assert second_add.new_data.offset_interval == model.OffsetInterval(start=3, end=4)
    assert rows(dataset) == [
        ("ACME", "12.5000"),
        ("ACME", "12.7500"),
        ("INIT", "101.2500"),
        ("INIT", "99.0000"),
        ("ZETA", "7.1000"),
    ]

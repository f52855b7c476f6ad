"""Sensors that never hide errors, through `dag.test()` (reschedule mode, as the example runs): example
DAG 2 with its URL variable unset ended *skipped* with a green run (`soft_fail`), the log saying only
"Skipping task."; now the sensor fails with the core's message and the ingest does not run. No Spark:
nothing gets as far as an ingest. (The factory's gate: test_dag_factory.py; deferred: test_sensors.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.airflow.dag_runs import load_dag, task_states


@pytest.mark.usefixtures("airflow_db")
def test_polling_source_dag_without_its_url_variable_fails_with_the_core_message(
    odf_repo: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ODF_EXAMPLE_PRICES_URL", raising=False)
    dag = load_dag("odf_polling_source.py", "odf_polling_source")
    sensor = dag.get_task("wait_for_prices")
    assert sensor.mode == "reschedule" and sensor.soft_fail
    run = dag.test()
    assert task_states(run) == {
        "apply_manifest": "success",
        "wait_for_prices": "failed",
        "ingest_prices": "upstream_failed",
    }
    logged = capfd.readouterr().out
    assert "com.example.prices: fetch.url: environment variable ODF_EXAMPLE_PRICES_URL is not set" in logged
    assert "Skipping" not in logged

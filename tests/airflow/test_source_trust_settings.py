"""What a source manifest may do, as Airflow tasks resolve it: the task argument, else `[odf]`, else the
environment variable, else the default; and the source sensor applies it in poke mode and, deferred, in
the triggerer (issue 23 point 2)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_odf.odf.format import model
from airflow_odf.odf.ingest.trust import SourceTrust, SourceTrustError
from airflow_odf.sensors.source import OdfSourceChangedSensor
from airflow_odf.source_trust import source_trust
from tests.airflow.test_triggers import first_event, rebuilt
from tests.unit.test_source_check import HttpSource, etag, ingested, root, start_http_source

SOURCE = "com.example.rates"
CONTEXT: Any = {}


@pytest.fixture(autouse=True)
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ALLOW_SHELL_STEPS", "ALLOW_CONTAINER_SOURCES", "TEMPLATE_ENV_ALLOW", "LOCAL_SOURCE_DIRS"):
        monkeypatch.delenv(f"ODF_{name}", raising=False)
        monkeypatch.delenv(f"AIRFLOW__ODF__{name}", raising=False)


def test_task_argument_then_odf_option_then_environment_then_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert source_trust() == SourceTrust()
    monkeypatch.setenv("ODF_TEMPLATE_ENV_ALLOW", "FROM_ENV")
    monkeypatch.setenv("ODF_ALLOW_CONTAINER_SOURCES", "1")
    monkeypatch.setenv("ODF_LOCAL_SOURCE_DIRS", str(tmp_path / "env"))
    assert source_trust() == SourceTrust(
        allow_container_sources=True,
        template_env_allow=("FROM_ENV",),
        local_source_dirs=(tmp_path / "env",),
    )
    monkeypatch.setenv("AIRFLOW__ODF__TEMPLATE_ENV_ALLOW", "ODF_*, FROM_CONFIG")
    monkeypatch.setenv("AIRFLOW__ODF__ALLOW_CONTAINER_SOURCES", "False")
    monkeypatch.setenv("AIRFLOW__ODF__ALLOW_SHELL_STEPS", "True")
    monkeypatch.setenv("AIRFLOW__ODF__LOCAL_SOURCE_DIRS", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert source_trust() == SourceTrust(
        allow_shell_steps=True,
        template_env_allow=("ODF_*", "FROM_CONFIG"),
        local_source_dirs=(tmp_path / "a", tmp_path / "b"),
    )
    assert source_trust(
        allow_shell_steps=False,
        allow_container_sources=True,
        template_env_allow=["FROM_TASK"],
        local_source_dirs=[str(tmp_path / "task")],
    ) == SourceTrust(
        allow_container_sources=True,
        template_env_allow=("FROM_TASK",),
        local_source_dirs=(tmp_path / "task",),
    )


def test_an_unreadable_setting_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__ODF__ALLOW_CONTAINER_SOURCES", "maybe")
    with pytest.raises(SourceTrustError, match=r"^\[odf\] allow_container_sources='maybe': expected 1/true"):
        source_trust()
    monkeypatch.delenv("AIRFLOW__ODF__ALLOW_CONTAINER_SOURCES")
    with pytest.raises(SourceTrustError, match=r"template_env_allow: 'A-B' is not a variable name"):
        source_trust(template_env_allow="A-B")


@pytest.fixture
def http(monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpSource]:
    yield from start_http_source(monkeypatch)


@pytest.fixture
def rates(http: HttpSource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A Url source `${{ env.RATES_URL }}`: a variable outside the default allow-list (ODF_*)."""
    dataset = root(tmp_path, model.FetchStepUrl(url="${{ env.RATES_URL }}"), SOURCE)
    monkeypatch.setenv("RATES_URL", http.url("/rates.csv"))
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_WATCH", json.dumps({"conn_type": "odf_repo", "host": (tmp_path / "repo").as_uri()})
    )
    http.put("/rates.csv", b"day,rate\n2024-01-01,1\n", ETag='"v1"')
    return dataset


def sensor(**kwargs: Any) -> OdfSourceChangedSensor:
    return OdfSourceChangedSensor(
        task_id="wait", dataset=SOURCE, odf_conn_id="odf_watch", poke_interval=0.05, **kwargs
    )


def test_the_sensor_reads_only_allowed_variables(http: HttpSource, rates: Any) -> None:
    with pytest.raises(AirflowFailException, match=r"RATES_URL may not be read by a manifest"):
        sensor().poke(CONTEXT)
    assert http.requests == []
    assert sensor(template_env_allow=["RATES_URL"]).poke(CONTEXT).is_done


def test_the_deferred_sensor_applies_its_arguments_in_the_triggerer(
    http: HttpSource, rates: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingested(rates, etag('"v1"'))
    with pytest.raises(TaskDeferred) as deferred:
        sensor(deferrable=True, timeout=60).execute(CONTEXT)
    refused = asyncio.run(first_event(rebuilt(deferred.value.trigger)))
    assert refused["status"] == "error" and "RATES_URL may not be read by a manifest" in refused["message"]
    assert http.requests == []

    with pytest.raises(TaskDeferred) as deferred:
        sensor(deferrable=True, timeout=60, template_env_allow=["RATES_*"]).execute(CONTEXT)
    trigger = rebuilt(deferred.value.trigger)
    assert trigger.serialize()[1]["trust"] == {"template_env_allow": ["RATES_*"]}
    http.put("/rates.csv", b"day,rate\n2024-01-01,1\n2024-01-02,2\n", ETag='"v2"')
    assert asyncio.run(first_event(trigger))["status"] == "changed"

    # an `[odf]` option of the triggerer's process counts when the task gave no argument
    monkeypatch.setenv("AIRFLOW__ODF__TEMPLATE_ENV_ALLOW", "RATES_URL")
    with pytest.raises(TaskDeferred) as deferred:
        sensor(deferrable=True, timeout=60).execute(CONTEXT)
    assert asyncio.run(first_event(rebuilt(deferred.value.trigger)))["status"] == "changed"

"""The provider as Airflow sees it: `get_provider_info()` against Airflow's own schemas, discovery by the
real `ProvidersManager` (the provider, the `odf_repo` connection type and its hook, the `odf` asset URI
handler, the `[odf]` config section) and the `airflow providers list` command."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from airflow_odf.get_provider_info import get_provider_info
from airflow_odf.odf.format.multiformats import DatasetId

PACKAGE = "airflow-provider-odf"


def _airflow_schema(name: str) -> dict[str, Any]:
    import airflow

    return json.loads((Path(airflow.__file__).parent / name).read_text(encoding="utf-8"))


def test_provider_info_validates_against_the_runtime_schema() -> None:
    """What discovery checks in every Airflow process (`provider_info.schema.json`)."""
    jsonschema.Draft7Validator(_airflow_schema("provider_info.schema.json")).validate(get_provider_info())


def test_provider_info_validates_against_the_strict_provider_yaml_schema() -> None:
    """The stricter schema ASF providers are held to (no unknown keys, typed form fields and options);
    only the release bookkeeping keys it requires are added here."""
    schema = _airflow_schema("provider.yaml.schema.json")
    info = {**get_provider_info(), "state": "ready", "source-date-epoch": 0}
    errors = [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(info)]
    assert errors == []


def _referenced_names(info: dict[str, Any]) -> list[str]:
    names = [c["hook-class-name"] for c in info["connection-types"]]
    for key in ("hooks", "operators", "sensors", "triggers"):
        names += [m for entry in info.get(key, []) for m in entry["python-modules"]]
    names += info.get("notifications", []) + info.get("extra-links", [])
    for entry in info.get("asset-uris", []):
        names += [entry[k] for k in ("handler", "factory", "to_openlineage_converter") if entry.get(k)]
    return names


def _resolve(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def test_every_module_and_class_the_provider_info_names_exists() -> None:
    """A dangling name only shows up when someone opens a form or lists triggers: catch it here."""
    missing = []
    for name in _referenced_names(get_provider_info()):
        try:
            _resolve(name)
        except (ImportError, AttributeError) as e:
            missing.append(f"{name}: {e}")
    assert missing == []


def test_every_operator_sensor_trigger_hook_and_notifier_is_listed() -> None:
    """A new module with an operator, sensor, trigger, hook or notifier must be added to the info."""
    import pkgutil

    from airflow.sdk import BaseHook, BaseNotifier, BaseOperator, BaseSensorOperator
    from airflow.triggers.base import BaseTrigger

    import airflow_odf

    info = get_provider_info()
    listed = set(_referenced_names(info))
    bases = {
        "operators": BaseOperator,
        "sensors": BaseSensorOperator,
        "triggers": BaseTrigger,
        "hooks": BaseHook,
        "notifications": BaseNotifier,
    }
    unlisted = []
    for package, base in bases.items():
        path = [str(Path(airflow_odf.__file__).parent / package)]
        for module_info in pkgutil.iter_modules(path, f"airflow_odf.{package}."):
            if module_info.name.endswith(".base"):  # the shared base classes, not for users
                continue
            module = importlib.import_module(module_info.name)
            public = [
                c
                for name, c in vars(module).items()
                if isinstance(c, type)
                and issubclass(c, base)
                and c.__module__ == module.__name__
                and not name.startswith("_")
            ]
            for cls in public:
                qualified = f"{module.__name__}.{cls.__name__}"
                if module.__name__ not in listed and qualified not in listed:
                    unlisted.append(qualified)
    assert unlisted == []


def test_providers_manager_discovers_the_provider_and_its_connection_type() -> None:
    from importlib.metadata import version

    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    pm = ProvidersManager()
    provider = pm.providers[PACKAGE]
    assert provider.version == version(PACKAGE)  # the version comes from the installed distribution
    assert provider.data["name"] == "Open Data Fabric"
    hook = ProvidersManagerTaskRuntime().hooks["odf_repo"]
    assert hook is not None
    assert (hook.hook_class_name, hook.connection_id_attribute_name, hook.package_name) == (
        "airflow_odf.hooks.repo.OdfRepoHook",
        "odf_conn_id",
        PACKAGE,
    )
    assert hook.hook_name == "ODF Repository" and hook.connection_testable
    # the declarative form: custom fields become extra__odf_repo__<name>, the token one a password field
    widgets = pm.connection_form_widgets
    assert {"extra__odf_repo__aws_conn_id", "extra__odf_repo__token"} <= set(widgets)
    token = widgets["extra__odf_repo__token"]
    assert (token.hook_class_name, token.package_name, token.is_sensitive) == (
        "airflow_odf.hooks.repo.OdfRepoHook",
        PACKAGE,
        True,
    )
    assert widgets["extra__odf_repo__aws_secret_access_key"].is_sensitive
    assert not widgets["extra__odf_repo__aws_conn_id"].is_sensitive
    behaviour = pm.field_behaviours["odf_repo"]
    assert behaviour["relabeling"]["host"] == "Repository URL"
    assert "port" in behaviour["hidden_fields"]
    assert "airflow_odf.links.OdfDatasetLink" in pm.extra_links_class_names


def test_the_odf_asset_uri_scheme_is_registered_and_validates() -> None:
    from airflow.sdk import Asset
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    from airflow_odf import assets

    runtime = ProvidersManagerTaskRuntime()
    assert runtime.asset_uri_handlers["odf"] is assets.sanitize_uri
    assert runtime.asset_factories["odf"] is assets.create_asset
    did, _ = DatasetId.generate()
    multibase = str(did).removeprefix("did:odf:")
    asset = Asset(name="com.example.trades", uri=f"odf://{multibase.upper()}")
    assert asset.uri == f"odf://{multibase}"  # lower-cased, and no "/" after the id
    with pytest.raises(ValueError, match="not a dataset id"):
        Asset(name="bad", uri="odf://not-a-dataset-id")
    with pytest.raises(ValueError, match="nothing after it"):
        Asset(name="bad", uri=f"odf://{multibase}/some/path")


def test_the_odf_config_section_is_readable(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.configuration import conf

    monkeypatch.delenv("AIRFLOW__ODF__DEFAULT_ENGINE", raising=False)
    monkeypatch.delenv("AIRFLOW__ODF__SCHEMA_POLICY", raising=False)
    monkeypatch.delenv("AIRFLOW__ODF__DATASET_URL_TEMPLATE", raising=False)
    # the provider's defaults, without any fallback given by the caller
    assert conf.get("odf", "default_engine") == "spark-submit"
    assert conf.get("odf", "schema_policy") == "strict"
    assert conf.get("odf", "dataset_url_template") == ""  # no dataset link unless configured
    monkeypatch.setenv("AIRFLOW__ODF__DEFAULT_ENGINE", "local")
    assert conf.get("odf", "default_engine") == "local"


def test_airflow_providers_list_shows_it(tmp_path: Path) -> None:
    """The CLI in a fresh process (its own discovery, nothing shared with this test process)."""
    airflow = Path(sys.executable).parent / "airflow"
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    out = subprocess.run(
        [str(airflow), "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=True,
    )
    listed = {p["package_name"]: p for p in json.loads(out.stdout)}
    assert PACKAGE in listed
    assert listed[PACKAGE]["version"] == "0.1.0"
    assert "Open Data Fabric" in listed[PACKAGE]["description"]

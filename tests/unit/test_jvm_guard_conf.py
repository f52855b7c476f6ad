"""The JVM guard's place in every session's conf (no Spark here): the build script and the Python side
name the same jar; each runner's command (spark-submit, the Connect server) carries the SQL lockdown and,
when the jar is built, the guard on `spark.jars` and `spark.sql.extensions`; without the jar the lockdown
alone, said once in the log; the server's token never on its command line."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest

from airflow_odf.odf.engine_client.connect_server import TOKEN_CONF, ConnectServer
from airflow_odf.odf.engine_client.runner import SparkSubmitRunner
from airflow_odf.utils import jvm_guard
from airflow_odf.utils.jvm_guard import (
    CONF_REDACTION,
    EXTENSIONS,
    GUARD_EXTENSION,
    INTERCEPTORS,
    JARS,
    guard_jar,
    guard_jar_name,
    with_sql_guard,
)
from airflow_odf.utils.spark_conf import ODF_SPARK_CONF, SQL_LOCKDOWN
from tests.paths import REPO

SCRIPT = REPO / "scripts" / "jvm-guard-jar"


@pytest.fixture
def jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A jar cache folder holding (a stand-in for) the guard's jar of these sources."""
    monkeypatch.setenv("ODF_JARS_DIR", str(tmp_path))
    (tmp_path / guard_jar_name()).write_bytes(b"")
    return tmp_path


def test_the_script_and_the_sessions_name_the_same_jar(jars: Path) -> None:
    """The script finds the jar of these sources already there (nothing to build) and prints its path."""
    printed = subprocess.run(
        [str(SCRIPT), "--print"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "ODF_JARS_DIR": str(jars)},
    )
    assert printed.stdout.strip() == str(jars / guard_jar_name()) == str(guard_jar())
    assert ODF_SPARK_CONF.items() >= SQL_LOCKDOWN.items()


def test_the_guard_joins_the_conf_s_own_jars_and_extensions(jars: Path) -> None:
    own = {
        JARS: "/opt/a.jar",
        EXTENSIONS: "io.delta.sql.DeltaSparkSessionExtension",
        **dict.fromkeys(SQL_LOCKDOWN, "true"),
    }
    guarded = with_sql_guard(own)
    assert guarded[JARS] == f"/opt/a.jar,{jars / guard_jar_name()}"
    assert guarded[EXTENSIONS] == f"io.delta.sql.DeltaSparkSessionExtension,{GUARD_EXTENSION}"
    assert guarded.items() >= SQL_LOCKDOWN.items()  # over the conf's own values
    assert INTERCEPTORS not in guarded
    assert with_sql_guard(guarded) == guarded  # once
    assert with_sql_guard({}, connect_server=True)[INTERCEPTORS] == CONF_REDACTION


def test_without_the_jar_the_lockdown_alone_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ODF_JARS_DIR", str(tmp_path))
    jvm_guard._say_missing.cache_clear()
    with caplog.at_level(logging.WARNING, logger=jvm_guard.__name__):
        assert with_sql_guard({"spark.sql.shuffle.partitions": "4"}) == {
            "spark.sql.shuffle.partitions": "4",
            **SQL_LOCKDOWN,
        }
        with_sql_guard({})
    [warning] = caplog.messages
    assert guard_jar_name() in warning and "scripts/jvm-guard-jar" in warning and "\n" not in warning


def test_spark_submit_and_the_connect_server_start_guarded(jars: Path, tmp_path: Path) -> None:
    submit = SparkSubmitRunner("local[1]").command([], tmp_path / "py.zip", {})
    server = ConnectServer(token="TOKEN-ON-NO-LINE")
    serve = server.command(tmp_path / "spark", tmp_path / "connect.jar")
    jar = jars / guard_jar_name()
    for cmd in (submit, serve):
        assert f"{JARS}={jar}" in cmd and f"{EXTENSIONS}={GUARD_EXTENSION}" in cmd
        assert {f"{key}={value}" for key, value in SQL_LOCKDOWN.items()} <= set(cmd)
        assert not any(str(jar) in arg for arg in cmd if "extraClassPath" in arg)  # the class archive's
    assert f"{INTERCEPTORS}={CONF_REDACTION}" in serve
    assert not any("TOKEN-ON-NO-LINE" in arg or TOKEN_CONF in arg for arg in serve)

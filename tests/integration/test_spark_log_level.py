"""How loud Spark is in the log of a spark-submit task: WARN by default, so the output the Spark
provider's hook streams into the task log holds no Spark INFO line — not even the driver JVM's startup
lines, which come before the SparkContext applies `spark.log.level` — and INFO when `[odf]
spark_log_level` (or a task's `spark_conf`) says so. Real `spark-submit` jobs on `local[1]`: a request
of an unknown contract version, answered with an error after the SparkContext started."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.hooks.spark_engine import SparkSubmitEngineRunner

pytestmark = pytest.mark.skipif(shutil.which("spark-submit") is None, reason="spark-submit is not on PATH")

SPARK_LINE = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?P<level>[A-Z]+) [\w$.]+: ")


def spark_levels(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], name: str, conf: dict[str, str] | None = None
) -> tuple[dict[str, int], str]:
    """Runs one job through the runner; how many Spark lines of each level its log got, and the log."""
    work = tmp_path / name / "operations" / "op"
    work.mkdir(parents=True)
    capfd.readouterr()
    response = SparkSubmitEngineRunner("spark_odf_log", conf=conf, name=f"odf-log-{name}").run(
        json.dumps({"version": 0, "kind": "Ingest"}), work
    )
    assert json.loads(response)["error"]["kind"] == "contract"  # the job ran to its answer
    out = capfd.readouterr()
    log = out.out + out.err
    levels: dict[str, int] = {}
    for found in SPARK_LINE.finditer(log):
        levels[found["level"]] = levels.get(found["level"], 0) + 1
    return levels, log


def test_spark_logs_at_warn_by_default_and_at_the_configured_level(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_ODF_LOG", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    quiet, log = spark_levels(tmp_path, capfd, "default")
    assert "INFO" not in quiet, log[-3000:]
    assert "Using Spark's default log4j profile" not in log
    assert "spark.log.level=WARN" in log  # in the command the hook logs (our own lines stay at INFO)

    monkeypatch.setenv("AIRFLOW__ODF__SPARK_LOG_LEVEL", "info")
    loud, log = spark_levels(tmp_path, capfd, "info")
    assert loud.get("INFO", 0) > 10
    assert re.search(r"INFO SparkContext: Running Spark version", log)

    # the task's own spark_conf wins over [odf]
    overridden, log = spark_levels(tmp_path, capfd, "task", {"spark.log.level": "ERROR"})
    assert set(overridden) <= {"ERROR", "FATAL"}, log[-3000:]


def test_a_bad_level_fails_the_task_without_retry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_ODF_LOG", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    monkeypatch.setenv("AIRFLOW__ODF__SPARK_LOG_LEVEL", "loud")
    work = tmp_path / "operations" / "op"
    work.mkdir(parents=True)
    with pytest.raises(AirflowFailException, match=r"Spark log level 'loud': expected one of OFF, .*, WARN"):
        SparkSubmitEngineRunner("spark_odf_log").run('{"version": 1}', work)

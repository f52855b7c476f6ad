"""The `--conf` that sets Spark's log level of an engine job (`spark_logging.with_log_level`): the
level for the SparkContext, and for a driver JVM on this machine a log4j2 configuration at that level,
before the user's own driver Java options (which win). The jobs' logs: tests/integration/
test_spark_log_level.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_odf.odf.engine_client.spark_logging import LOG_CONFIG_FILE, spark_log_level, with_log_level
from airflow_odf.odf.errors import OdfError

JAVA_OPTIONS = "spark.driver.extraJavaOptions"


@pytest.fixture(autouse=True)
def spark_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Spark configuration folder of the installation (`$SPARK_CONF_DIR`)."""
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    return conf_dir / "spark-defaults.conf"


def test_a_local_driver_gets_the_level_from_its_first_line(tmp_path: Path) -> None:
    conf = with_log_level(
        {JAVA_OPTIONS: "-Dmine=1", "spark.ui.enabled": "false"}, "WARN", tmp_path, local_driver=True
    )
    config = tmp_path / LOG_CONFIG_FILE
    assert conf == {
        "spark.ui.enabled": "false",
        "spark.log.level": "WARN",
        JAVA_OPTIONS: f"-Dlog4j2.configurationFile={config} -Dmine=1",
    }
    text = config.read_text()
    assert "rootLogger.level = WARN" in text and "appender.console.target = SYSTEM_ERR" in text


def test_the_installations_driver_options_are_kept(tmp_path: Path, spark_defaults: Path) -> None:
    """A `--conf` of the driver's Java options replaces spark-defaults.conf's: they are carried over."""
    spark_defaults.write_text("spark.driver.extraJavaOptions -Dsite=1\n")
    conf = with_log_level({}, "INFO", tmp_path, local_driver=True)
    assert conf[JAVA_OPTIONS] == f"-Dlog4j2.configurationFile={tmp_path / LOG_CONFIG_FILE} -Dsite=1"


def test_a_driver_on_the_cluster_gets_the_level_only(tmp_path: Path) -> None:
    assert with_log_level({}, "INFO", tmp_path, local_driver=False) == {"spark.log.level": "INFO"}
    assert list(tmp_path.iterdir()) == [tmp_path / "spark-conf"]  # no configuration file written


def test_the_tasks_own_level_wins(tmp_path: Path) -> None:
    conf = with_log_level({"spark.log.level": "error"}, "WARN", tmp_path, local_driver=True)
    assert conf["spark.log.level"] == "ERROR"
    assert "rootLogger.level = ERROR" in (tmp_path / LOG_CONFIG_FILE).read_text()


def test_levels_are_checked() -> None:
    assert spark_log_level(None) == spark_log_level("") == "WARN"
    assert spark_log_level(" debug ") == "DEBUG"
    with pytest.raises(
        OdfError, match=r"^Spark log level 'loud': expected one of OFF, FATAL, ERROR, WARN, INFO"
    ):
        spark_log_level("loud")

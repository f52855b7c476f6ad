"""The preload (`airflow_odf.preload`, imported by every Airflow component) and the provider print no
third-party warning: pyspark's pandas >= 3 FutureWarning is filtered by its message, and pyspark's
Spark Connect logger stays off after Airflow's logging set-up re-enables it, unless the operator asks
for it with SPARK_CONNECT_LOG_LEVEL (airflow_odf/utils/third_party.py). Each case in a fresh
interpreter: a warning is printed once per process, at import."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version

import pytest

from tests.paths import REPO

# what Airflow's logging set-up does to the loggers that exist when it runs (`disable_existing_loggers`
# False re-enables them), then what pyspark logs when stopping a session on a restarted server
AFTER_AIRFLOW_LOGGING = """
import logging.config
logging.config.dictConfig({"version": 1, "disable_existing_loggers": False,
    "handlers": {"h": {"class": "logging.StreamHandler"}}, "root": {"handlers": ["h"], "level": "INFO"}})
from pyspark.sql.connect.logging import logger
logger.warning("session.stop(): Session could not be released. Error: $gone")
"""


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "SPARK_CONNECT_LOG_LEVEL")}
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", code],
        cwd=REPO,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_importing_the_preload_prints_nothing() -> None:
    done = _python("import airflow_odf.preload")
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("", "")


@pytest.mark.skipif(int(version("pandas").split(".")[0]) < 3, reason="pyspark warns only under pandas >= 3")
def test_without_the_filter_pyspark_does_warn() -> None:
    """The control: the warning the preload no longer prints is there when pyspark comes first."""
    done = _python("import pyspark.sql.connect.session")
    assert "FutureWarning: PySpark does not yet fully support pandas >= 3.0.0" in done.stderr


def test_only_that_warning_is_filtered() -> None:
    done = _python("import airflow_odf, warnings; warnings.warn('other', FutureWarning)")
    assert "FutureWarning: other" in done.stderr


def test_pysparks_connect_logger_stays_off_after_airflows_logging_set_up() -> None:
    done = _python("import airflow_odf.preload\n" + AFTER_AIRFLOW_LOGGING)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_spark_connect_log_level_still_turns_it_on() -> None:
    done = _python("import airflow_odf.preload\n" + AFTER_AIRFLOW_LOGGING, SPARK_CONNECT_LOG_LEVEL="warning")
    assert "Session could not be released" in done.stderr

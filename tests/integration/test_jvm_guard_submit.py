"""A spark-submit job's session refuses reflection by itself: the runner's command carries the JVM guard
(the job's own `get_session` cannot add a jar to a JVM that spark-submit started)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from airflow_odf.odf.engine_client.runner import SparkSubmitRunner, job_script, package_archive
from airflow_odf.utils.jvm_guard import guard_jar, guard_jar_name

pytestmark = pytest.mark.skipif(shutil.which("spark-submit") is None, reason="spark-submit is not on PATH")

PROBE = """
from airflow_odf.engine.session import get_session

spark = get_session()
for sql in ("SELECT reflect('java.lang.System', 'getenv', 'PATH')", "SELECT '${env:PATH}'"):
    try:
        print("ANSWER", spark.sql(sql).first()[0])
    except Exception as e:
        print("REFUSED", str(e).splitlines()[0])
"""


def test_a_spark_submit_job_s_session_refuses_reflection(tmp_path: Path) -> None:
    if guard_jar() is None:
        pytest.fail(f"{guard_jar_name()} is not built: run scripts/jvm-guard-jar (scripts/ensure-env does)")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    cmd = SparkSubmitRunner("local[1]").command([], package_archive(tmp_path / "py-files"), {})
    cmd[cmd.index(str(job_script()))] = str(probe)  # the job's session, another body
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout.splitlines()
    assert [line for line in out if line.startswith(("ANSWER", "REFUSED"))] == [
        "REFUSED ODF_SQL_GUARD: reflection (reflect, java_method, try_reflect) is refused in an ODF engine "
        "session;",
        "ANSWER ${env:PATH}",
    ]

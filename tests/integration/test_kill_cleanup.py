"""A task killed with SIGKILL while its Spark job runs leaves no work behind.

A real task runner: a child process runs `dag.test()` of a DAG whose push ingest goes through
`spark-submit` (the Spark provider's hook, `local[1]`), in its own Airflow home. It is killed with
SIGKILL once the job's Python driver runs (spark-submit's JVM has started our job script). Within
seconds no process of that Spark application is left — found by their command lines, which name this
test's repository — and the operation folder the task left is removed by `odf gc` once older than
`--min-age`, which says so.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.engine_client.runner import job_script
from airflow_odf.odf.repo.operation_folders import OWNER_FILE
from airflow_odf.odf.repo.repository import Repository
from tests.airflow.test_retry_safety import ROOT_MANIFEST, ROWS, AirflowHome
from tests.paths import REPO

pytestmark = pytest.mark.skipif(shutil.which("spark-submit") is None, reason="spark-submit is not on PATH")

DAG_FILE = textwrap.dedent(
    '''
    """Written by tests/integration/test_kill_cleanup.py: apply >> push ingest through spark-submit."""
    from __future__ import annotations

    import os
    from datetime import datetime

    from airflow.sdk import dag

    from airflow_odf.operators.ingest import OdfPushIngestOperator
    from airflow_odf.operators.manifest import OdfApplyManifestOperator


    @dag(schedule=None, start_date=datetime(2024, 1, 1), catchup=False)
    def odf_kill_cleanup() -> None:
        apply = OdfApplyManifestOperator(
            task_id="apply", manifests=os.environ["ODF_TEST_MANIFESTS"], create_repository=True
        )
        push = OdfPushIngestOperator(
            task_id="push", dataset="retry.events", files=[os.environ["ODF_TEST_FILE"]], engine="spark-submit"
        )
        apply >> push


    dag_object = odf_kill_cleanup()
    '''
)

CHILD = textwrap.dedent(
    """
    import importlib.util, os

    path = os.path.join(os.environ["AIRFLOW__CORE__DAGS_FOLDER"], "odf_kill_cleanup.py")
    spec = importlib.util.spec_from_file_location("odf_kill_cleanup_dag", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.dag_object.test()
    """
)


def processes_naming(text: str) -> dict[int, list[str]]:
    """Every live process (not a zombie) with an argument containing `text`: pid -> arguments."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if any(text in arg for arg in args) and state != "Z":
            found[int(entry.name)] = args
    return found


def runs_python_driver(args: list[str]) -> bool:
    """Whether a process is the job's Python driver (`python job.py ...`, started by the driver JVM)."""
    return Path(args[0]).name.startswith("python") and str(job_script()) in args


def wait_for(condition: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_killed_task_leaves_no_spark_process_and_gc_removes_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = AirflowHome(tmp_path / "airflow")
    (home.dags / "odf_kill_cleanup.py").write_text(DAG_FILE, encoding="utf-8")
    repo, manifests, data = tmp_path / "repo", tmp_path / "manifests", tmp_path / "events.ndjson"
    manifests.mkdir()
    (manifests / "retry.events.yaml").write_text(ROOT_MANIFEST, encoding="utf-8")
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    env = {
        **home.env,
        "AIRFLOW_CONN_ODF_DEFAULT": json.dumps({"conn_type": "odf_repo", "host": repo.as_uri()}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[1]"}),
        "ODF_TEST_MANIFESTS": str(manifests),
        "ODF_TEST_FILE": str(data),
    }
    runner = subprocess.Popen(
        [sys.executable, "-c", CHILD], env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        # the job runs: spark-submit's JVM has started the Python driver of our job script
        operations = repo / "cache" / "operations"
        wait_for(
            lambda: any(map(runs_python_driver, processes_naming(str(operations)).values())),
            180,
            "the Spark job's Python driver",
        )
        spark = processes_naming(str(operations))
        assert any(Path(args[0]).name == "java" for args in spark.values()), spark  # the driver JVM
        runner.send_signal(signal.SIGKILL)
        assert runner.wait(timeout=30) == -signal.SIGKILL
    finally:
        runner.kill()
        runner.wait()

    # every process of the application dies with the task (parent-death signal), none is left
    deadline = time.monotonic() + 10
    while processes_naming(str(operations)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = processes_naming(str(operations))
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert left == {}, "processes of the killed task's Spark application are still running"

    # the killed operation's folder stays until gc finds it dead and old enough
    [folder] = [p for p in operations.iterdir() if p.name != "py-files"]
    owner = json.loads((folder / OWNER_FILE).read_text())
    assert owner["pid"] == runner.pid
    assert Repository.open(repo).dataset("retry.events").state().num_records == 0  # nothing committed

    assert main(["gc", "--repo", str(repo)]) == 0  # default --min-age: an hour
    assert folder.is_dir()
    then = time.time() - 3600
    os.utime(folder, (then, then))
    capsys.readouterr()
    assert main(["gc", "--repo", str(repo)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert not folder.exists()
    assert out[0].startswith(f"removed the folder of a dead operation: {folder} (")
    assert out[0].endswith(
        f"pid {runner.pid} on {owner['host']}, started {owner['started']}; its process is gone)"
    )
    assert out[-1] == "removed 1 unreferenced objects and folders"

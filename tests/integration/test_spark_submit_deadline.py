"""A spark-submit request past its deadline (issue 34, "Deadlines"): a push ingest whose preprocess step
would count for hours has its application killed, and fails with the one-line `timeout` error; the
dataset's head is unchanged, its operation folder is gone and no process of the job is left."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_odf.odf.engine_client.runner import SparkSubmitRunner
from airflow_odf.odf.format import model
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.operation import IngestError
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.utils.engine_deadline import APPLICATION_KILLED, TIMEOUT, timeout_error

pytestmark = pytest.mark.skipif(shutil.which("spark-submit") is None, reason="spark-submit is not on PATH")

DEADLINE = 15.0  # past the JVM's start on a quiet machine (a busy one kills it earlier: the same outcome)
ENDLESS = "SELECT * FROM input WHERE (SELECT count(*) FROM range(1000000000000)) > 0"


def _processes_naming(text: str) -> list[int]:
    """The processes whose command line mentions `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:  # ended meanwhile
            continue
    return found


def test_a_spark_submit_request_past_its_deadline_is_killed_and_commits_nothing(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "repo")
    read = model.ReadStepCsv(header=True, ddl_schema=["city STRING", "population BIGINT"])
    source = model.AddPushSource(
        source_name="default",
        read=read,
        preprocess=model.TransformSql(engine="spark", query=ENDLESS),
        merge=model.MergeStrategyAppend(),
    )
    repo.add(model.DatasetSnapshot(name="census", kind=model.DatasetKind.ROOT, metadata=[source]))
    dataset = repo.dataset("census")
    head = dataset.head()
    data = tmp_path / "census.csv"
    data.write_text("city,population\nA,1000\n")
    work = tmp_path / "work"
    runner = SparkSubmitRunner("local[1]", log=lambda _line: None, timeout=DEADLINE)
    with pytest.raises(IngestError) as stopped:
        push_ingest(dataset, "census", runner, [data], IngestOptions(work_dir=work))
    assert stopped.value.kind == TIMEOUT
    assert str(stopped.value) == f"census: {timeout_error(DEADLINE, APPLICATION_KILLED)['message']}"
    assert dataset.head() == head  # nothing committed
    assert [p.name for p in (work / "operations").iterdir()] == ["py-files"]  # nothing staged is left
    assert _processes_naming(str(work / "operations")) == []  # spark-submit and the job's Python: gone

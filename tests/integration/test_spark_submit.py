"""The engine through a real `spark-submit` (a separate JVM, our package shipped with --py-files)."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.engine_client.runner import SparkSubmitRunner, job_script, package_archive
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository

pytestmark = pytest.mark.skipif(shutil.which("spark-submit") is None, reason="spark-submit is not on PATH")


def test_command_line_and_archive(tmp_path: Path) -> None:
    archive = package_archive(tmp_path)
    assert package_archive(tmp_path) == archive  # built once per code version
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
    assert {"airflow_odf/engine/job.py", "airflow_odf/engine/writer.py", "airflow_odf/__init__.py"} <= names
    runner = SparkSubmitRunner("spark://127.0.0.1:7077", conf={"spark.executor.memory": "2g"})
    cmd = runner.command([(tmp_path / "req.json", tmp_path / "resp.json")], archive)
    assert cmd[:3] == ["spark-submit", "--master", "spark://127.0.0.1:7077"]
    assert "spark.executor.memory=2g" in cmd and cmd[cmd.index("--py-files") + 1] == str(archive)
    assert cmd[-5:] == [
        str(job_script()),
        "--request",
        str(tmp_path / "req.json"),
        "--response",
        str(tmp_path / "resp.json"),
    ]
    # several requests answered by one job (the warm-up), each with its response; a conf given per job
    pairs = [(tmp_path / f"r{i}.json", tmp_path / f"s{i}.json") for i in range(2)]
    cmd = runner.command(pairs, archive, {"spark.driver.extraJavaOptions": "-Dx=1"})
    assert "spark.driver.extraJavaOptions=-Dx=1" in cmd and "spark.executor.memory=2g" not in cmd
    assert cmd[-8:] == [a for r, s in pairs for a in ("--request", str(r), "--response", str(s))]


def test_push_ingest_through_spark_submit(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "repo")
    read = model.ReadStepCsv(header=True, ddl_schema=["city STRING", "population BIGINT"])
    source = model.AddPushSource(
        source_name="default", read=read, merge=model.MergeStrategySnapshot(primary_key=["city"])
    )
    repo.add(model.DatasetSnapshot(name="census", kind=model.DatasetKind.ROOT, metadata=[source]))
    dataset = repo.dataset("census")
    data = tmp_path / "c.csv"
    data.write_text("city,population\nA,1000\nB,2000\n")
    lines: list[str] = []
    runner = SparkSubmitRunner("local[1]", log=lines.append)
    options = IngestOptions(work_dir=tmp_path / "work", log=lines.append)
    result = push_ingest(
        dataset, "census", runner, [data], options, system_time=Timestamp.parse("2024-01-01T00:00:00Z")
    )
    assert result.records == 2 and len(result.new_blocks) == 2
    assert any(line.startswith("spark-submit: ") for line in lines)
    rows = tail(dataset, 10).to_pylist()
    assert [(r["offset"], r["op"], r["city"], r["population"]) for r in rows] == [
        (0, 0, "A", 1000),
        (1, 0, "B", 2000),
    ]
    bad = tmp_path / "bad.csv"
    bad.write_text("town\nA\n")
    with pytest.raises(Exception, match="city"):
        push_ingest(dataset, "census", runner, [bad], options)

"""`odf engine warm-up` through a real `spark-submit`: the class archive is made, and the next local job
maps its classes from it and still computes the same rows."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.engine_client.fast_start import CLIENT_JIT_ONLY, class_archive_path
from airflow_odf.odf.engine_client.runner import EngineRunError, SparkSubmitRunner
from airflow_odf.odf.engine_client.warm_up import build_class_archive
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository

pytestmark = pytest.mark.skipif(shutil.which("spark-submit") is None, reason="spark-submit is not on PATH")


def test_warm_up_makes_the_archive_the_next_job_loads_its_classes_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("ODF_CACHE_DIR", str(cache))
    assert main(["engine", "warm-up", "--master", "local[1]"]) == 0
    archive = class_archive_path()
    assert archive is not None and archive.is_file() and archive.stat().st_size > 10 * 2**20
    assert str(archive) in capsys.readouterr().out
    assert [p.name for p in cache.iterdir()] == [archive.name]  # no temporary dump left beside it

    repo = Repository.init(tmp_path / "repo")
    read = model.ReadStepCsv(header=True, ddl_schema=["city STRING", "population BIGINT"])
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(model.DatasetSnapshot(name="census", kind=model.DatasetKind.ROOT, metadata=[source]))
    data = tmp_path / "c.csv"
    data.write_text("city,population\nA,1000\nB,2000\n")
    class_log = tmp_path / "classes.log"
    lines: list[str] = []
    # the JVM's own record of where each class came from, in a file beside the job's output
    class_logging = {"spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={class_log}"}
    runner = SparkSubmitRunner("local[1]", conf=class_logging, log=lines.append)
    options = IngestOptions(work_dir=tmp_path / "work", log=lines.append)
    dataset = repo.dataset("census")
    result = push_ingest(
        dataset, "census", runner, [data], options, system_time=Timestamp.parse("2024-01-01T00:00:00Z")
    )
    [command] = [line for line in lines if line.startswith("spark-submit: ")]
    # ours first (fast start, Spark's log level), the user's last: they win
    ours = f"-XX:SharedArchiveFile={archive} {CLIENT_JIT_ONLY} -Dlog4j2.configurationFile="
    assert re.search(rf"spark.driver.extraJavaOptions={re.escape(ours)}\S+ -Xlog", command)
    sources = re.findall(r"source: (.+)$", class_log.read_text(), flags=re.MULTILINE)
    from_archive = sum(s == "shared objects file (top)" for s in sources)
    assert from_archive > 0.5 * len(sources), f"{from_archive} of {len(sources)} classes from the archive"
    spark_sql = [line for line in class_log.read_text().splitlines() if "org.apache.spark.sql." in line]
    assert spark_sql and any("(top)" in line for line in spark_sql)
    assert result.records == 2
    assert [(r["offset"], r["city"], r["population"]) for r in tail(dataset, 10).to_pylist()] == [
        (0, "A", 1000),
        (1, "B", 2000),
    ]


def test_warm_up_refuses_a_cluster_master(tmp_path: Path) -> None:
    with pytest.raises(EngineRunError, match="local masters only, not 'yarn'"):
        build_class_archive("yarn", directory=tmp_path)
    assert list(tmp_path.iterdir()) == []

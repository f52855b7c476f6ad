"""Every engine request has a deadline (issue 34, "Deadlines"): a transform whose SQL would count for hours
is stopped at it — its Spark jobs cancelled — and fails with the one-line `timeout` error, the dataset's
head unchanged and its operation folder gone; then the same local session, and the same Spark Connect
server, serve the next request. The outcome is the error's kind and the unchanged head: that the test
ends at all shows that the jobs stopped."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from airflow_odf.engine.connect_runner import SparkConnectRunner
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.operation import IngestError
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.execute import TransformOptions, run_transform
from airflow_odf.utils.engine_deadline import TIMEOUT, timeout_error

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
DEADLINE = 4.0
# a scalar subquery counting 10^12 rows: hours on two cores, unless cancelled
ENDLESS = (
    "SELECT event_time, city, population FROM cities WHERE (SELECT count(*) FROM range(1000000000000)) > 0"
)
QUICK = "SELECT event_time, city, population * 2 AS population FROM cities"


def _repository(root: Path, runner: EngineRunner) -> Repository:
    """A root `cities` of one record and two derivatives of it: `endless` (ENDLESS) and `quick`."""
    repo = Repository.init(root / "repo")
    read = model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "city STRING", "population BIGINT"]
    )
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(
        model.DatasetSnapshot(name="cities", kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
    )
    for name, query in (("endless", ENDLESS), ("quick", QUICK)):
        transform = model.SetTransform(
            inputs=[model.TransformInput(dataset_ref="cities")],
            transform=model.TransformSql(engine="spark", query=query),
        )
        snapshot = model.DatasetSnapshot(name=name, kind=model.DatasetKind.DERIVATIVE, metadata=[transform])
        repo.add(snapshot, system_time=T0)
    csv = root / "cities.csv"
    csv.write_text("event_time,city,population\n2024-01-02T00:00:00Z,A,1000\n")
    push_ingest(repo.dataset("cities"), "cities", runner, [csv], IngestOptions(work_dir=root / "work"))
    return repo


def _stopped_then_served(
    repo: Repository, short: EngineRunner, next_runner: EngineRunner, work: Path
) -> None:
    """`endless` on `short` fails at its deadline, committing and leaving nothing; then `quick` on
    `next_runner` (the same session or server, an ordinary deadline) commits."""
    endless = repo.dataset("endless")
    head = endless.head()
    options = TransformOptions(work_dir=work)
    with pytest.raises(IngestError) as stopped:
        run_transform(repo, "endless", short, options)
    assert stopped.value.kind == TIMEOUT
    assert str(stopped.value) == f"endless: {timeout_error(DEADLINE)['message']}"
    assert "\n" not in str(stopped.value)
    assert endless.head() == head  # nothing committed
    assert list((work / "operations").iterdir()) == []  # nothing staged is left
    quick = run_transform(repo, "quick", next_runner, options)
    assert quick.records == 1 and quick.new_head == str(repo.dataset("quick").head())


def test_a_local_request_past_its_deadline_is_cancelled_and_the_session_serves_on(
    spark: SparkSession, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    repo = _repository(tmp_path, runner)
    short = LocalSparkRunner("local[2]", timeout=DEADLINE)
    _stopped_then_served(repo, short, runner, tmp_path / "work")
    assert spark.sparkContext.statusTracker().getActiveJobsIds() == []


def test_a_connect_request_past_its_deadline_is_interrupted_and_the_server_serves_on(
    connect_url: str, tmp_path: Path
) -> None:
    runner = SparkConnectRunner(connect_url)
    repo = _repository(tmp_path, runner)
    _stopped_then_served(repo, SparkConnectRunner(connect_url, timeout=DEADLINE), runner, tmp_path / "work")

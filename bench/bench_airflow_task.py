"""Per-task overhead of the provider (issue 7): an ODF push ingest of a tiny file vs a bare Spark task.

Set-up (untimed, as a deployment would do it once per machine): `odf engine warm-up` makes the class
archive of the engine's JVM (`airflow_odf/odf/engine_client/warm_up.py`) in a temporary cache directory.

One-task DAGs run through Airflow (`dag.test()`, SQLite, a temporary DAGS_FOLDER), all submitting to
the `spark_default` connection (`local[2]`) through the Spark provider's `SparkSubmitHook`, with the
same Spark settings (`spark.ui.enabled=false`):

- `odf` — the measured task: `OdfPushIngestOperator` (engine `spark-submit`) pushing a 3-row CSV into a
  root dataset: connections, repository, the engine request, a spark-submit of our job with the package
  as `--py-files` and the fast-start JVM options (class archive, client JIT;
  `airflow_odf/odf/engine_client/fast_start.py`), read / offsets / Parquet in Spark, both hashes, the
  commit, XCom and the asset event;
- `odf_plain` — the same task with `[odf] engine_fast_start = False` (the JVM as Spark starts it);
- `empty` — the baseline of the target: `SparkSubmitOperator` running an empty PySpark job (a session
  started and stopped, no Spark action);
- `empty_tuned` — like for like: the same empty job given the same JVM options as the ODF task's job;
- `engine` — to split the difference: `SparkSubmitOperator` running the engine's work for the same
  request (captured once from the core) without the provider around it (and without fast start):
  `run_request` of `airflow_odf.engine.job` on a fresh session, the same `--py-files` archive.
- `odf_connect` — the warm engine (issue 24): the same `OdfPushIngestOperator` on a `spark_connect`
  connection, its engine work on a Spark Connect server (`odf engine serve`, master `local[2]`) started
  once before the rounds (untimed, as a deployment keeps it running next to its workers).

One warm-up run each, then `--reps` rounds in rotating order. The time of a task is its task instance's
duration in the metadata DB (start to end as Airflow records it). Reported: medians and the ratios
ODF / empty job (target <= 1.3), ODF / empty job with the same JVM options, ODF without fast start /
engine work alone (the provider's own share), and the warm engine's: ODF on Connect / empty job (target
<= 0.3) and ODF on Connect / ODF with spark-submit and fast start (target <= 0.4), paired per round.

Usage: .venv/bin/python bench/bench_airflow_task.py [--reps N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from airflow_bench import (
    airflow_environment,
    build_class_archive,
    load_dag,
    machine,
    task_durations,
    warm_engine,
)

ODF_DAG = textwrap.dedent(
    """
    import os
    from datetime import datetime

    from airflow.sdk import dag

    from airflow_odf.operators.ingest import OdfPushIngestOperator


    @dag(schedule=None, start_date=datetime(2024, 1, 1), catchup=False)
    def bench_odf_push():
        OdfPushIngestOperator(
            task_id="push", dataset="bench.tiny", files=[os.environ["ODF_BENCH_FILE"]], engine="spark-submit"
        )


    @dag(schedule=None, start_date=datetime(2024, 1, 1), catchup=False)
    def bench_odf_push_connect():
        OdfPushIngestOperator(
            task_id="push",
            dataset="bench.tiny",
            files=[os.environ["ODF_BENCH_FILE"]],
            spark_conn_id="spark_connect_bench",  # airflow_bench.CONNECT_CONN_ID: the warm engine
        )


    bench_odf_push()
    bench_odf_push_connect()
    """
)

BARE_DAG = textwrap.dedent(
    """
    import os
    from datetime import datetime

    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import dag


    def empty_job(name, **conf):
        SparkSubmitOperator(
            task_id="bare",
            application=os.environ["ODF_BENCH_EMPTY_JOB"],
            conn_id="spark_default",
            name=name,
            conf={"spark.ui.enabled": "false", **conf},
        )


    @dag(schedule=None, start_date=datetime(2024, 1, 1), catchup=False)
    def bench_bare_empty():
        empty_job("bench-empty")


    @dag(schedule=None, start_date=datetime(2024, 1, 1), catchup=False)
    def bench_bare_empty_tuned():
        empty_job("bench-empty-tuned", **{"spark.driver.extraJavaOptions": os.environ["ODF_BENCH_JVM"]})


    @dag(schedule=None, start_date=datetime(2024, 1, 1), catchup=False)
    def bench_bare_engine():
        SparkSubmitOperator(
            task_id="bare",
            application=os.environ["ODF_BENCH_ENGINE_JOB"],
            application_args=[os.environ["ODF_BENCH_REQUEST"]],
            py_files=os.environ["ODF_BENCH_ARCHIVE"],
            conn_id="spark_default",
            name="bench-engine",
            conf={"spark.ui.enabled": "false"},
        )


    bench_bare_empty()
    bench_bare_empty_tuned()
    bench_bare_engine()
    """
)

EMPTY_JOB = textwrap.dedent(
    """
    from pyspark.sql import SparkSession

    SparkSession.builder.getOrCreate().stop()
    """
)

ENGINE_JOB = textwrap.dedent(
    """
    import json, sys, tempfile

    from airflow_odf.engine.job import run_request
    from airflow_odf.engine.session import get_session

    with open(sys.argv[1]) as f:
        request = json.load(f)
    request["out_dir"] = tempfile.mkdtemp(prefix="odf-bench-out-")
    response = run_request(get_session(), request)
    if response.get("error") or not response.get("slices"):
        raise SystemExit(f"engine: {response}")
    """
)

TINY_CSV = "event_time,city,population\n2024-01-01T00:00:00Z,A,1000\n2024-01-02T00:00:00Z,B,2000\n"
TINY_CSV += "2024-01-03T00:00:00Z,C,3000\n"


class _Capture:
    """An engine runner that keeps the request the core sends and answers nothing useful."""

    request = ""

    def run(self, request_json: str, work_dir: Path) -> str:
        self.request = request_json
        return json.dumps({"version": 1, "error": {"kind": "engine", "message": "captured"}})


def _prepare(work: Path) -> dict[str, Path]:
    """A fresh Airflow home, DAGS_FOLDER, repository, inputs and class archive; the environment Airflow
    reads at import."""
    from airflow_odf.odf.engine_client.fast_start import DRIVER_JAVA_OPTIONS, fast_start_conf
    from airflow_odf.odf.engine_client.runner import package_archive
    from airflow_odf.odf.errors import OdfError
    from airflow_odf.odf.format import model
    from airflow_odf.odf.ingest.options import IngestOptions
    from airflow_odf.odf.ingest.push import push_ingest
    from airflow_odf.odf.repo.repository import Repository

    dags, repo = work / "dags", work / "repo"
    dags.mkdir()
    (dags / "bench_odf_push.py").write_text(ODF_DAG)
    (dags / "bench_bare.py").write_text(BARE_DAG)
    (work / "empty_job.py").write_text(EMPTY_JOB)
    (work / "engine_job.py").write_text(ENGINE_JOB)
    (work / "tiny.csv").write_text(TINY_CSV)
    read = model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "city STRING", "population BIGINT"]
    )
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    Repository.init(repo).add(
        model.DatasetSnapshot(
            name="bench.tiny",
            kind=model.DatasetKind.ROOT,
            metadata=[source, model.SetVocab(event_time_column="event_time")],
        )
    )
    capture = _Capture()
    try:
        dataset = Repository.open(repo).dataset("bench.tiny")
        push_ingest(dataset, "bench.tiny", capture, [work / "tiny.csv"], IngestOptions(work_dir=work / "w"))
    except OdfError:
        pass  # the capturing runner answers with an error: nothing is committed
    (work / "request.json").write_text(capture.request)
    archive = build_class_archive(work / "cache")
    jvm_options = fast_start_conf({}, "local[2]", capture.request, archive)[DRIVER_JAVA_OPTIONS]
    os.environ.update(
        {
            **airflow_environment(work, dags, repo),
            "ODF_BENCH_FILE": str(work / "tiny.csv"),
            "ODF_BENCH_EMPTY_JOB": str(work / "empty_job.py"),
            "ODF_BENCH_ENGINE_JOB": str(work / "engine_job.py"),
            "ODF_BENCH_REQUEST": str(work / "request.json"),
            "ODF_BENCH_ARCHIVE": str(package_archive(work / "py-files")),
            "ODF_BENCH_JVM": jvm_options,
        }
    )
    return {"dags": dags, "repo": repo}


def _run(dag: Any, fast_start: bool = True) -> float:
    """The duration of the DAG's single task as Airflow recorded it."""
    os.environ["AIRFLOW__ODF__ENGINE_FAST_START"] = str(fast_start)
    [duration] = task_durations(dag)[1].values()
    return duration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="timed rounds (each runs every DAG once)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="odf-bench-airflow-") as tmp, warm_engine():
        paths = _prepare(Path(tmp))
        from airflow.utils import db

        db.resetdb()
        print(machine(), file=sys.stderr)
        odf = load_dag(paths["dags"] / "bench_odf_push.py", "bench_odf_push")
        dags = {
            "odf": odf,
            "odf_plain": odf,
            "empty": load_dag(paths["dags"] / "bench_bare.py", "bench_bare_empty"),
            "empty_tuned": load_dag(paths["dags"] / "bench_bare.py", "bench_bare_empty_tuned"),
            "engine": load_dag(paths["dags"] / "bench_bare.py", "bench_bare_engine"),
            "odf_connect": load_dag(paths["dags"] / "bench_odf_push.py", "bench_odf_push_connect"),
        }
        load = [os.getloadavg()[0]]
        started = time.perf_counter()
        warm = {key: round(_run(dag, key != "odf_plain"), 2) for key, dag in dags.items()}
        print("warm-up:", warm, file=sys.stderr)
        times: dict[str, list[float]] = {key: [] for key in dags}
        keys = list(dags)
        for rep in range(args.reps):
            for key in keys[rep % len(keys) :] + keys[: rep % len(keys)]:  # rotating order
                times[key].append(_run(dags[key], key != "odf_plain"))
                load.append(os.getloadavg()[0])
                print(f"round {rep + 1} {key}: task {times[key][-1]:.2f} s", file=sys.stderr)
        from airflow_odf.odf.repo.repository import Repository

        blocks = len(list(Repository.open(paths["repo"]).dataset("bench.tiny").iter_blocks()))
        med = {key: statistics.median(v) for key, v in times.items()}
        print()
        print(machine())
        print(
            f"{args.reps} rounds in {time.perf_counter() - started:.0f} s; load average (1 min) "
            f"{min(load):.1f}-{max(load):.1f}; dataset chain at the end: {blocks} blocks"
        )
        paired = [o / e for o, e in zip(times["odf"], times["empty"], strict=True)]
        print(f"JVM options of the ODF job (and of the tuned empty job): {os.environ['ODF_BENCH_JVM']}")
        print("| task (median duration) | seconds | ODF task / this |")
        print("|---|---|---|")
        odf_task = "ODF push ingest of a 3-row CSV (`OdfPushIngestOperator`, spark-submit)"
        print(f"| {odf_task} | {med['odf']:.2f} | |")
        print(f"| the same, `[odf] engine_fast_start = False` | {med['odf_plain']:.2f} | |")
        print(
            f"| bare `SparkSubmitOperator`, empty PySpark job | {med['empty']:.2f} "
            f"| **{med['odf'] / med['empty']:.2f}** (target <= 1.3); per round "
            + ", ".join(f"{r:.2f}" for r in paired)
            + " |"
        )
        print(
            f"| the same empty job with the ODF job's JVM options | {med['empty_tuned']:.2f} "
            f"| {med['odf'] / med['empty_tuned']:.2f} |"
        )
        print(
            f"| bare `SparkSubmitOperator`, the engine's work for the same request | {med['engine']:.2f} "
            f"| {med['odf_plain'] / med['engine']:.2f} (without fast start) |"
        )
        warm = [c / e for c, e in zip(times["odf_connect"], times["empty"], strict=True)]
        warm_vs_submit = [c / o for c, o in zip(times["odf_connect"], times["odf"], strict=True)]
        print(
            f"| ODF push ingest on the warm engine (spark-connect) | {med['odf_connect']:.2f} "
            f"| / empty job: **{med['odf_connect'] / med['empty']:.2f}** (target <= 0.3), per round "
            + ", ".join(f"{r:.2f}" for r in warm)
            + f"; / ODF on spark-submit with fast start: **{med['odf_connect'] / med['odf']:.2f}** "
            "(target <= 0.4), per round " + ", ".join(f"{r:.2f}" for r in warm_vs_submit) + " |"
        )
        for key in keys:
            print(f"{key}: " + ", ".join(f"{t:.2f}" for t in times[key]))


if __name__ == "__main__":
    main()

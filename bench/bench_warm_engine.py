"""The warm engine (issue 24): a pipeline, memory and large data on a Spark Connect server against the
other engines, each baseline in the same run. (The per-task figure is in `bench_airflow_task.py`.)

pipeline  The DAG factory over 5 root datasets (FilesGlob over CSV files) and 15 derivatives (3 per root:
          a projection, a filter of it, a union of two roots), one DAG run end to end through Airflow
          (`dag.test()`), engine spark-submit (with fast start, its class archive made once) against
          spark-connect (a server on the same master started once, untimed). Each round adds one new CSV
          file per root, then runs both DAGs, each on its own repository: every run ingests one file per
          root and updates every derivative. The first round of each (creating the datasets) is the
          warm-up. Target: spark-submit / spark-connect >= 3. Checked: both repositories hold the same
          number of records in every dataset, the roots exactly the rows written.
memory    4 small tasks at once (4 processes, each running a one-task DAG with `dag.test()` on its own
          SQLite database: a push ingest of a 3-row CSV into its own dataset), on spark-submit and on
          spark-connect. Sampled every 0.2 s: the summed RSS (and PSS, which counts shared pages once)
          of every process involved — the 4 task processes and their descendants (spark-submit's JVMs
          and Python drivers), and for spark-connect the server's processes. Target: peak summed RSS
          spark-connect / spark-submit <= 0.5.
large     The 5M-row Append ingest of `bench_ingest.py` (a) and the transform of `bench_transform.py`
          (5M rows in 5 slices, filter + projection), each through the provider with the in-process
          `local` engine and with `spark-connect` on a server of the same master and driver memory,
          interleaved; the results are checked equal (records and the slices' logical hashes).
          Target: spark-connect / local <= 1.1. `--only ingest|transform` runs one of the two; the
          machine's load average is printed with every round.

Usage: .venv/bin/python bench/bench_warm_engine.py --case pipeline|memory|large [--rounds N] [--rows N]
       [--only ingest|transform]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from airflow_bench import (
    CONNECT_CONN_ID,
    airflow_environment,
    build_class_archive,
    load_dag,
    machine,
    task_durations,
    warm_engine,
)

ROOTS = 5
PIPELINE_ROWS = 200
SCHEMA = [("event_time", "Timestamp"), ("key", "String"), ("value", "Int64")]

PIPELINE_DAG = textwrap.dedent(
    f"""
    import os
    from datetime import datetime
    from pathlib import Path

    from airflow_odf.dag_factory import build_dag

    FOLDER = Path(os.environ["ODF_BENCH_PIPELINE"])


    def pipeline(engine, **settings):
        return build_dag(
            FOLDER / "manifests",
            dag_id=f"bench_pipeline_{{engine.replace('-', '_')}}",
            odf_conn_id=f"odf_{{engine.replace('-', '_')}}",
            engine=engine,
            source_dir=FOLDER,
            create_repository=True,
            schedule=None,
            start_date=datetime(2024, 1, 1),
            catchup=False,
            **settings,
        )


    def bench_pipeline_spark_submit():
        return pipeline("spark-submit")


    def bench_pipeline_spark_connect():
        return pipeline("spark-connect", spark_conn_id="{CONNECT_CONN_ID}")


    bench_pipeline_spark_submit()
    bench_pipeline_spark_connect()
    """
)

MEMORY_DAG = textwrap.dedent(
    f"""
    import os
    from datetime import datetime

    from airflow.sdk import dag

    from airflow_odf.operators.ingest import OdfPushIngestOperator


    def push(engine, **settings):
        return OdfPushIngestOperator(
            task_id="push",
            dataset=os.environ.get("ODF_BENCH_DATASET", "bench.m0"),
            files=[os.environ.get("ODF_BENCH_FILE", "tiny.csv")],
            odf_conn_id=f"odf_{{engine.replace('-', '_')}}",
            engine=engine,
            **settings,
        )


    @dag(schedule=None, start_date=datetime(2024, 1, 1), catchup=False)
    def bench_memory_spark_submit():
        push("spark-submit")


    @dag(schedule=None, start_date=datetime(2024, 1, 1), catchup=False)
    def bench_memory_spark_connect():
        push("spark-connect", spark_conn_id="{CONNECT_CONN_ID}")


    bench_memory_spark_submit()
    bench_memory_spark_connect()
    """
)

TINY_CSV = (
    "event_time,key,value\n2024-01-01T00:00:00Z,a,1\n2024-01-02T00:00:00Z,b,2\n2024-01-03T00:00:00Z,c,3\n"
)
ENGINES = ("spark-submit", "spark-connect")


def _conn_suffix(engine: str) -> str:
    return engine.replace("-", "_")


def _repositories(work: Path) -> dict[str, Path]:
    """One repository per engine, and its `odf_<engine>` connection in the environment."""
    repos = {engine: work / f"repo-{_conn_suffix(engine)}" for engine in ENGINES}
    for engine, repo in repos.items():
        connection = {"conn_type": "odf_repo", "host": repo.as_uri()}
        os.environ[f"AIRFLOW_CONN_ODF_{_conn_suffix(engine).upper()}"] = json.dumps(connection)
    return repos


def _prepare_airflow(work: Path, dag_text: str, dag_file: str) -> Path:
    """A fresh Airflow home with a migrated SQLite database, the DAG file in its DAGS_FOLDER."""
    dags = work / "dags"
    dags.mkdir(parents=True)
    (dags / dag_file).write_text(dag_text)
    os.environ.update(airflow_environment(work, dags, work / "repo-unused"))
    build_class_archive(work / "cache")  # the fast start of spark-submit, as after `odf engine warm-up`
    from airflow.utils import db

    db.resetdb()
    return dags


# --- pipeline ------------------------------------------------------------------------------------


def _yaml_list(items: Iterable[str], indent: int) -> str:
    return "".join(f"\n{' ' * indent}- {item}" for item in items)


def _root_manifest(i: int) -> str:
    fields = "".join(
        f"\n        - name: {name}\n          type:\n            kind: {kind}" for name, kind in SCHEMA
    )
    return textwrap.dedent(
        f"""\
        kind: DatasetSnapshot
        version: 1
        content:
          name: bench.root{i}
          kind: Root
          metadata:
          - kind: SetPollingSource
            fetch:
              kind: FilesGlob
              path: data/root{i}-*.csv
              order: ByName
            read:
              kind: Csv
              header: true
              schema:
                fields:{{fields}}
            merge:
              kind: Ledger
              primaryKey:
              - key
          - kind: SetVocab
            eventTimeColumn: event_time
        """
    ).replace("{fields}", fields)


def _derivative_manifest(name: str, inputs: dict[str, str], query: str) -> str:
    refs = "".join(f"\n    - datasetRef: {ref}\n      alias: {alias}" for alias, ref in inputs.items())
    return (
        f"kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: {name}\n  kind: Derivative\n  metadata:\n"
        f"  - kind: SetTransform\n    inputs:{refs}\n    transform:\n      kind: Sql\n      engine: spark\n"
        f"      query: {json.dumps(query)}\n  - kind: SetVocab\n    eventTimeColumn: event_time\n"
    )


def _pipeline_manifests(folder: Path) -> dict[str, Callable[[dict[str, int]], int]]:
    """Writes the 20 manifests; returns each dataset's expected record count given the roots' counts."""
    folder.mkdir(parents=True)
    expected: dict[str, Callable[[dict[str, int]], int]] = {}
    for i in range(ROOTS):
        root, neighbour = f"bench.root{i}", f"bench.root{(i + 1) % ROOTS}"
        (folder / f"{root}.yaml").write_text(_root_manifest(i))
        expected[root] = lambda counts, r=root: counts[r]
        derivatives = {
            f"bench.root{i}.doubled": (
                {"src": root},
                "SELECT event_time, key, value * 2 AS value FROM src",
                lambda counts, r=root: counts[r],
            ),
            f"bench.root{i}.large": (
                {"src": f"bench.root{i}.doubled"},
                "SELECT event_time, key, value FROM src WHERE value % 4 = 0",
                lambda counts, r=root: counts[r] // 2,
            ),
            f"bench.root{i}.pair": (
                {"a": root, "b": neighbour},
                "SELECT event_time, key, value FROM a UNION ALL SELECT event_time, key, value FROM b",
                lambda counts, r=root, n=neighbour: counts[r] + counts[n],
            ),
        }
        for name, (inputs, query, count) in derivatives.items():
            (folder / f"{name}.yaml").write_text(_derivative_manifest(name, inputs, query))
            expected[name] = count
    return expected


def _add_round_files(data: Path, round_no: int) -> None:
    """One new CSV per root: PIPELINE_ROWS rows with new keys (even values for half of them)."""
    for i in range(ROOTS):
        lines = ["event_time,key,value"]
        for row in range(PIPELINE_ROWS):
            seconds = round_no * PIPELINE_ROWS + row
            lines.append(f"2024-01-01T00:00:00Z,r{i}-{round_no}-{row},{seconds}")
        (data / f"root{i}-{round_no:03d}.csv").write_text("\n".join(lines) + "\n")


def _records(repo: Path) -> dict[str, int]:
    from airflow_odf.odf.repo.repository import Repository

    repository = Repository.open(repo)
    return {name: repository.dataset(name).state().num_records for name, _ in repository.list()}


def bench_pipeline(work: Path, rounds: int) -> None:
    folder = work / "pipeline"
    expected = _pipeline_manifests(folder / "manifests")
    (folder / "data").mkdir()
    os.environ["ODF_BENCH_PIPELINE"] = str(folder)
    dags_dir = _prepare_airflow(work, PIPELINE_DAG, "bench_pipeline.py")
    repos = _repositories(work)
    print(machine(), file=sys.stderr)
    dags = {e: load_dag(dags_dir / "bench_pipeline.py", f"bench_pipeline_{_conn_suffix(e)}") for e in ENGINES}
    times: dict[str, list[float]] = {engine: [] for engine in ENGINES}
    tasks: dict[str, list[float]] = {engine: [] for engine in ENGINES}
    with warm_engine():
        for round_no in range(rounds + 1):
            _add_round_files(folder / "data", round_no)
            order = ENGINES if round_no % 2 == 0 else ENGINES[::-1]
            for engine in order:
                wall, durations = task_durations(dags[engine])
                label = "warm-up (creates the datasets)" if round_no == 0 else f"round {round_no}"
                print(
                    f"{label} {engine}: DAG run {wall:.1f} s, {len(durations)} tasks, "
                    f"task median {statistics.median(durations.values()):.2f} s",
                    file=sys.stderr,
                )
                if round_no:
                    times[engine].append(wall)
                    tasks[engine].append(statistics.median(durations.values()))
            counts = {engine: _records(repo) for engine, repo in repos.items()}
            roots = {f"bench.root{i}": (round_no + 1) * PIPELINE_ROWS for i in range(ROOTS)}
            want = {name: count(roots) for name, count in expected.items()}
            for engine, got in counts.items():
                assert got == want, f"{engine}: records {got} != expected {want}"
    med = {engine: statistics.median(values) for engine, values in times.items()}
    paired = [s / c for s, c in zip(times["spark-submit"], times["spark-connect"], strict=True)]
    print()
    print(machine())
    print(f"DAG of {len(expected) + 1} tasks ({ROOTS} ingests, {len(expected) - ROOTS} transforms, apply)")
    print("| engine | DAG run, median | task, median | per round |")
    print("|---|---|---|---|")
    for engine in ENGINES:
        rounds_text = ", ".join(f"{t:.1f}" for t in times[engine])
        print(
            f"| {engine} | {med[engine]:.1f} s | {statistics.median(tasks[engine]):.2f} s | {rounds_text} |"
        )
    print(
        f"spark-submit / spark-connect: **{med['spark-submit'] / med['spark-connect']:.2f}** (target >= 3); "
        "paired per round " + ", ".join(f"{r:.2f}" for r in paired) + "; record counts checked every round"
    )


# --- memory --------------------------------------------------------------------------------------

TASKS = 4


class _MemorySampler:
    """Samples the summed RSS and PSS of a set of process trees until stopped; keeps the peaks."""

    def __init__(self, roots: Callable[[], list[int]]) -> None:
        self.roots = roots
        self.peak_rss = self.peak_pss = 0
        self.peak_processes = 0
        self.peak_kinds: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.2)

    def sample(self) -> None:
        import psutil

        rss = pss = count = 0
        kinds: dict[str, int] = {}
        for pid in self.roots():
            try:
                root = psutil.Process(pid)
                processes = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            for process in processes:
                try:
                    info = process.memory_full_info()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                rss, pss, count = rss + info.rss, pss + info.pss, count + 1
                kind = _process_kind(process)
                kinds[kind] = kinds.get(kind, 0) + info.rss
        if rss > self.peak_rss:
            self.peak_rss, self.peak_processes, self.peak_kinds = rss, count, kinds
        self.peak_pss = max(self.peak_pss, pss)


def _process_kind(process: Any) -> str:
    """What a process is, for the breakdown of the peak: a JVM, a task process, or another Python."""
    try:
        command = process.cmdline()
    except Exception:  # gone meanwhile
        return "other"
    if command and Path(command[0]).name == "java":
        return "JVM"
    if "--child" in command:
        return "task process"
    return "Spark's Python driver" if any("python" in Path(c).name for c in command[:1]) else "other"


def _child_task(dag_file: str, dag_name: str) -> None:
    """In a task process: runs the one-task DAG with `dag.test()` on this process's own Airflow home."""
    task_durations(load_dag(Path(dag_file), dag_name))


def _memory_round(
    work: Path, engine: str, dags_dir: Path, server_pid: int | None, tag: str
) -> _MemorySampler:
    """Runs TASKS task processes at once; the sampler holds their peaks."""
    children: list[subprocess.Popen[bytes]] = []
    for i in range(TASKS):
        home = work / f"airflow-{tag}-{i}"
        shutil.copytree(work / "airflow", home)
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "ODF_BENCH_DATASET": f"bench.m{i}",
            "ODF_BENCH_FILE": str(work / "tiny.csv"),
        }
        command = [sys.executable, __file__, "--child", str(dags_dir / "bench_memory.py"), engine]
        children.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))

    def roots() -> list[int]:
        return [child.pid for child in children] + ([server_pid] if server_pid else [])

    with _MemorySampler(roots) as sampler:
        for child in children:
            _, err = child.communicate()
            if child.returncode:
                raise SystemExit(f"{engine} task process failed: {err.decode()[-2000:]}")
    for i in range(TASKS):
        shutil.rmtree(work / f"airflow-{tag}-{i}")
    return sampler


def _create_tiny_datasets(repos: dict[str, Path]) -> None:
    from airflow_odf.odf.format import model
    from airflow_odf.odf.repo.repository import Repository

    read = model.ReadStepCsv(header=True, ddl_schema=["event_time TIMESTAMP", "key STRING", "value BIGINT"])
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    for repo in repos.values():
        repository = Repository.init(repo)
        for i in range(TASKS):
            metadata = [source, model.SetVocab(event_time_column="event_time")]
            repository.add(
                model.DatasetSnapshot(name=f"bench.m{i}", kind=model.DatasetKind.ROOT, metadata=metadata)
            )


def bench_memory(work: Path, rounds: int) -> None:
    (work / "tiny.csv").write_text(TINY_CSV)
    dags_dir = _prepare_airflow(work, MEMORY_DAG, "bench_memory.py")
    repos = _repositories(work)
    _create_tiny_datasets(repos)
    print(machine(), file=sys.stderr)
    peaks: dict[str, list[_MemorySampler]] = {engine: [] for engine in ENGINES}
    with warm_engine() as server:
        server_pid = server._process.pid if server._process else None
        for round_no in range(rounds + 1):
            order = ENGINES if round_no % 2 == 0 else ENGINES[::-1]
            for engine in order:
                pid = server_pid if engine == "spark-connect" else None
                peak = _memory_round(work, engine, dags_dir, pid, f"{round_no}-{_conn_suffix(engine)}")
                label = "warm-up" if round_no == 0 else f"round {round_no}"
                kinds = ", ".join(
                    f"{kind} {rss / 2**20:.0f}"
                    for kind, rss in sorted(peak.peak_kinds.items())
                    if rss >= 2**20
                )
                print(
                    f"{label} {engine}: peak RSS {peak.peak_rss / 2**20:.0f} MiB ({kinds}), "
                    f"PSS {peak.peak_pss / 2**20:.0f} MiB, {peak.peak_processes} processes",
                    file=sys.stderr,
                )
                if round_no:
                    peaks[engine].append(peak)
    for repo in repos.values():
        counts = _records(repo)
        assert counts == {f"bench.m{i}": 3 * (rounds + 1) for i in range(TASKS)}, counts
    fields = ("peak_rss", "peak_pss", "peak_processes")
    med = {e: [statistics.median(getattr(p, f) for p in peaks[e]) for f in fields] for e in ENGINES}
    print()
    print(machine())
    print(f"{TASKS} push-ingest tasks at once, each in its own process (`dag.test()`), {rounds} rounds")
    print(
        "| engine | peak summed RSS (median; by kind of process) | peak summed PSS | processes at the peak |"
    )
    print("|---|---|---|---|")
    for engine in ENGINES:
        rss, pss, count = med[engine]
        kinds: dict[str, list[int]] = {}
        for peak in peaks[engine]:
            for kind, kind_rss in peak.peak_kinds.items():
                kinds.setdefault(kind, []).append(kind_rss)
        parts = ", ".join(
            f"{kind} {statistics.median(v) / 2**20:.0f} MiB"
            for kind, v in sorted(kinds.items())
            if statistics.median(v) >= 2**20
        )
        print(f"| {engine} | {rss / 2**20:.0f} MiB ({parts}) | {pss / 2**20:.0f} MiB | {count:.0f} |")
    submit, connect = med["spark-submit"], med["spark-connect"]
    print(
        f"spark-connect / spark-submit: RSS **{connect[0] / submit[0]:.2f}** (target <= 0.5), "
        f"PSS {connect[1] / submit[1]:.2f}; every dataset checked: 3 records per task run"
    )


# --- large ---------------------------------------------------------------------------------------


def _timed(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = call(*args, **kwargs)
    return result, time.perf_counter() - started


def _logical_hashes(dataset: Any) -> list[str]:
    from airflow_odf.odf.format import model

    events = [block.event for _, block in reversed(list(dataset.iter_blocks()))]
    kinds = (model.AddData, model.ExecuteTransform)
    return [str(e.new_data.logical_hash) for e in events if isinstance(e, kinds) and e.new_data is not None]


def _interleaved(
    kind: str, rounds: int, runners: dict[str, Any], once: Callable[[str, Any, str], tuple[float, list[str]]]
) -> dict[str, list[float]]:
    """`once(engine, runner, tag)` on every engine, `rounds` times after a warm-up, in alternating
    order; its seconds per engine. Every round's logical hashes must be the same on every engine."""
    times: dict[str, list[float]] = {engine: [] for engine in runners}
    for round_no in range(rounds + 1):
        hashes: dict[str, list[str]] = {}
        order = list(runners) if round_no % 2 == 0 else list(runners)[::-1]
        for engine in order:
            seconds, hashes[engine] = once(engine, runners[engine], f"{round_no}-{engine}")
            label = "warm-up" if round_no == 0 else f"round {round_no}"
            load = os.getloadavg()[0]
            print(f"{label} {kind} {engine}: {seconds:.2f} s (load {load:.1f})", file=sys.stderr)
            if round_no:
                times[engine].append(seconds)
        assert len(set(map(tuple, hashes.values()))) == 1, f"{kind}: the engines' slices differ: {hashes}"
    return times


def bench_large(work: Path, rows: int, rounds: int, only: str | None = None) -> None:
    from bench_ingest import DDL, write_trades_csv
    from bench_transform import T0, add_derivative, build_root

    from airflow_odf.engine.connect_runner import SparkConnectRunner
    from airflow_odf.engine.local_runner import LocalSparkRunner
    from airflow_odf.engine.session import get_session
    from airflow_odf.odf.engine_client.connect_server import ConnectServer
    from airflow_odf.odf.format import model
    from airflow_odf.odf.ingest.options import IngestOptions
    from airflow_odf.odf.ingest.push import push_ingest
    from airflow_odf.odf.repo.repository import Repository
    from airflow_odf.odf.transform.execute import TransformOptions, run_transform

    conf = {"spark.driver.memory": "6g"}
    local = LocalSparkRunner("local[*]", conf)
    get_session("local[*]", conf)
    csv = work / "trades.csv"
    if only in (None, "ingest"):
        write_trades_csv(csv, rows)
        print(f"input: {rows:,} rows, {csv.stat().st_size / 1e6:.0f} MB CSV", file=sys.stderr)
    source = model.AddPushSource(
        source_name="default",
        read=model.ReadStepCsv(header=True, ddl_schema=DDL),
        merge=model.MergeStrategyAppend(),
    )
    ingest_options = IngestOptions(work_dir=work / "cache", target_slice_bytes=1 << 30, log=lambda _l: None)
    transform_options = TransformOptions(work_dir=work / "transform-work", log=lambda _l: None)

    def ingest(engine: str, runner: Any, tag: str) -> tuple[float, list[str]]:
        repo = Repository.init(work / f"ingest-{tag}")
        snapshot = model.DatasetSnapshot(name="trades", kind=model.DatasetKind.ROOT, metadata=[source])
        repo.add(snapshot, system_time=T0)  # rows carry the system time: the same on both engines
        dataset = repo.dataset("trades")
        result, seconds = _timed(
            push_ingest, dataset, "trades", runner, [csv], ingest_options, system_time=T0
        )
        assert result.records == rows, (engine, result.records)
        hashes = _logical_hashes(dataset)
        shutil.rmtree(work / f"ingest-{tag}")
        return seconds, hashes

    (work / "transform").mkdir()
    repo, _ = build_root(work / "transform", rows, 5, local)

    def transform(engine: str, runner: Any, tag: str) -> tuple[float, list[str]]:
        name = f"notional-{tag}"
        add_derivative(repo, name)
        result, seconds = _timed(run_transform, repo, name, runner, transform_options, system_time=T0)
        assert result.records > 0, (engine, result)
        return seconds, _logical_hashes(repo.dataset(name))

    with ConnectServer(master="local[*]", port=0, conf={**conf, "spark.ui.enabled": "false"}) as server:
        runners = {"local": local, "spark-connect": SparkConnectRunner(server.url)}
        cases = {"ingest": ingest, "transform": transform}
        times = {
            kind: _interleaved(kind, rounds, runners, once)
            for kind, once in cases.items()
            if only in (None, kind)
        }
    print()
    print(machine())
    print(
        "| work | local, median | spark-connect, median | spark-connect / local (target <= 1.1) | per round |"
    )
    print("|---|---|---|---|---|")
    for kind, by_engine in times.items():
        on_local, on_connect = (
            statistics.median(by_engine["local"]),
            statistics.median(by_engine["spark-connect"]),
        )
        paired = [c / b for c, b in zip(by_engine["spark-connect"], by_engine["local"], strict=True)]
        print(
            f"| {kind} ({rows:,} rows) | {on_local:.2f} s | {on_connect:.2f} s "
            f"| **{on_connect / on_local:.2f}** (paired rounds' median {statistics.median(paired):.2f}) "
            f"| {', '.join(f'{r:.2f}' for r in paired)} |"
        )
    print("logical hashes of every new slice equal across the engines, every round")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=("pipeline", "memory", "large"), required=False)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up")
    parser.add_argument("--rows", type=int, default=5_000_000, help="large: rows of the ingest and transform")
    parser.add_argument("--only", choices=("ingest", "transform"), help="large: only this work")
    parser.add_argument("--child", nargs=2, metavar=("DAG_FILE", "ENGINE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if args.child:
        _child_task(args.child[0], f"bench_memory_{_conn_suffix(args.child[1])}")
        return
    if not args.case:
        parser.error("--case is required")
    with tempfile.TemporaryDirectory(prefix=f"odf-bench-{args.case}-") as tmp:
        work = Path(tmp)
        if args.case == "pipeline":
            bench_pipeline(work, args.rounds)
        elif args.case == "memory":
            bench_memory(work, args.rounds)
        else:
            bench_large(work, args.rows, args.rounds, args.only)


if __name__ == "__main__":
    main()

"""Overlapping writers of one dataset, on the local Spark engine: all succeed, every piece of data is
committed exactly once, the chain stays valid.

The race is made certain, not left to timing: each writer's first engine request, once answered,
waits until every writer has had its own answered — so all of them planned from the same head and
then commit onto it. One moves the head; the others lose the compare-and-swap, plan again from the
winner's head (`chain.reconcile`) and go on from there. Writers are threads on the shared SparkSession,
or `odf pull` processes (each with its own JVM). Each writer has a scratch space of its own, as writers
on machines that share none: the claims that make writers sharing one wait for each other instead
(`chain.claims`, tested at the end) cannot coordinate them, and the compare-and-swap alone decides.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.chain.dataset import HEAD_REF, Dataset
from airflow_odf.odf.chain.integrity import collect_garbage, verify_integrity
from airflow_odf.odf.format import model
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.polling import pull_polling
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.ingest.schema_inference import InferOptions, InferResult, infer_schema
from airflow_odf.odf.operation import IngestResult
from airflow_odf.odf.repo.repository import ALIAS_KEY, Repository
from airflow_odf.odf.storage.local import LocalObjectStore
from airflow_odf.odf.transform.execute import TransformOptions, run_transform
from tests.engine.conftest import spark  # noqa: F401  (the shared SparkSession fixture)
from tests.paths import REPO

WRITERS = 3
READ = model.ReadStepNdJson(
    schema=model.DataSchema(
        fields=[
            model.DataField(name="event_time", type=model.DataTypeTimestamp(unit=model.TimeUnit.MILLISECOND)),
            model.DataField(name="id", type=model.DataTypeInt64()),
            model.DataField(name="amount", type=model.DataTypeInt64()),
        ]
    )
)
VOCAB = model.SetVocab(event_time_column="event_time")


@pytest.fixture
def engine(spark: SparkSession) -> LocalSparkRunner:  # noqa: F811  (the fixture imported above)
    """The in-process engine runner, on the shared session."""
    return LocalSparkRunner("local[2]")


class MeetingRunner:
    """The shared engine; each thread's first answer waits until every writer has had its own."""

    def __init__(self, runner: LocalSparkRunner, writers: int) -> None:
        self.runner = runner
        self.barrier = threading.Barrier(writers, timeout=300)
        self.met = threading.local()

    def run(self, request_json: str, work_dir: Path) -> str:
        response = self.runner.run(request_json, work_dir)
        if not getattr(self.met, "done", False):
            self.met.done = True
            self.barrier.wait()
        return response


def _in_threads(writers: int, write: Callable[[int], IngestResult]) -> list[IngestResult]:
    """`write(i)` in `writers` threads at once; their results in thread order (an error fails the test)."""
    results: list[Any] = [None] * writers
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            results[i] = write(i)
        except BaseException as e:  # reported below, with the others' outcome
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    if errors:
        raise errors[0]  # with its traceback; the others failed alike or succeeded
    assert None not in results
    return results


def _files(folder: Path, batches: list[list[int]]) -> None:
    """One NDJSON file per batch of ids, named in order."""
    folder.mkdir(parents=True, exist_ok=True)
    for n, ids in enumerate(batches):
        rows = [{"event_time": f"2024-05-0{n + 1}T10:00:00Z", "id": i, "amount": i * 10} for i in ids]
        (folder / f"part-{n}.ndjson").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _polled_root(repo: Repository, folder: Path, name: str = "polled") -> Dataset:
    source = model.SetPollingSource(
        fetch=model.FetchStepFilesGlob(
            path=str(folder / "part-*.ndjson"), order=model.SourceOrdering.BY_NAME
        ),
        read=READ,
        merge=model.MergeStrategyAppend(),
    )
    repo.add(model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=[source, VOCAB]))
    return repo.dataset(name)


def _pushed_root(repo: Repository, name: str = "pushed") -> Dataset:
    source = model.AddPushSource(source_name="default", read=READ, merge=model.MergeStrategyAppend())
    repo.add(model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=[source, VOCAB]))
    return repo.dataset(name)


def _ids(dataset: Dataset) -> list[int]:
    table = tail(dataset, 1000)
    assert table is not None
    return sorted(table.column("id").to_pylist())


def _offsets(dataset: Dataset) -> list[int]:
    table = tail(dataset, 1000)
    assert table is not None
    return sorted(table.column("offset").to_pylist())


def _blocks_since(dataset: Dataset, head: Any) -> list[str]:
    """The blocks committed after `head`, oldest first."""
    return [str(h) for h, _ in reversed(list(dataset.iter_blocks(stop=head)))]


def _scratch(tmp_path: Path, writer: int) -> Path:
    """Writer `writer`'s own scratch space (see the module's docstring)."""
    return tmp_path / f"scratch-{writer}"


def _all_committed_once(dataset: Dataset, before: Any, results: list[IngestResult]) -> None:
    """The writers' own blocks are disjoint and together are every block committed since `before`."""
    own = [h for r in results for h in r.new_blocks]
    assert len(own) == len(set(own))
    assert sorted(own) == sorted(_blocks_since(dataset, before))


# --------------------------------------------------------------------------------------------------
# threads
# --------------------------------------------------------------------------------------------------


def test_polling_ingests_in_threads_ingest_every_file_once(engine: LocalSparkRunner, tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "repo")
    _files(tmp_path / "in", [[1, 2], [3], [4, 5, 6]])
    dataset = _polled_root(repo, tmp_path / "in")
    before = dataset.head()
    meeting = MeetingRunner(engine, WRITERS)

    def pull(i: int) -> IngestResult:
        options = IngestOptions(work_dir=_scratch(tmp_path, i), source_dir=tmp_path)
        return pull_polling(Dataset(dataset.store), "polled", meeting, options)  # type: ignore[arg-type]

    results = _in_threads(WRITERS, pull)

    assert _ids(dataset) == [1, 2, 3, 4, 5, 6]  # each file once
    assert _offsets(dataset) == list(range(6))
    _all_committed_once(dataset, before, results)
    assert sum(r.records for r in results) == 6
    assert all(r.new_head == str(dataset.head()) for r in results)  # each ends at the final head
    lost = [r for r in results if r.reconciliation.lost_races]
    assert len(lost) >= WRITERS - 1  # the first round had one winner
    assert all("reconciled" in r.as_dict() for r in lost)
    for r in lost:
        assert set(r.reconciliation.heads_found) <= set(_blocks_since(dataset, before))
    added = [b.event for _, b in dataset.iter_blocks() if isinstance(b.event, model.AddData)]
    assert sorted(a.new_source_state.value for a in added) == [
        "part-0.ndjson",
        "part-1.ndjson",
        "part-2.ndjson",
    ]
    assert verify_integrity(dataset) == []


def test_push_ingests_in_threads_are_each_their_own_data(engine: LocalSparkRunner, tmp_path: Path) -> None:
    """Pushing the same file three times (three runs) is three pieces of data: all land, one after the
    other, with their own offsets."""
    repo = Repository.init(tmp_path / "repo")
    _files(tmp_path / "in", [[1, 2, 3]])
    dataset = _pushed_root(repo)
    before = dataset.head()
    meeting = MeetingRunner(engine, WRITERS)

    def push(i: int) -> IngestResult:
        options = IngestOptions(work_dir=_scratch(tmp_path, i), extra={"test/run": f"run-{i}"})
        return push_ingest(
            Dataset(dataset.store), "pushed", meeting, [tmp_path / "in" / "part-0.ndjson"], options
        )  # type: ignore[arg-type]

    results = _in_threads(WRITERS, push)

    assert _ids(dataset) == [1, 1, 1, 2, 2, 2, 3, 3, 3] and _offsets(dataset) == list(range(9))
    _all_committed_once(dataset, before, results)
    assert all(r.records == 3 for r in results)
    assert sorted(r.reconciliation.lost_races for r in results)[:2] == [0, 1]
    runs = [b.event.extra["test/run"] for _, b in dataset.iter_blocks() if isinstance(b.event, model.AddData)]
    assert sorted(runs) == ["run-0", "run-1", "run-2"]
    assert verify_integrity(dataset) == []


def test_two_tries_of_one_push_commit_it_once(engine: LocalSparkRunner, tmp_path: Path) -> None:
    """Two tries of the same task run (same run marker) pushing at once — a retry overlapping a try
    that was thought dead: the loser finds its marker in the winner's commit and reports that commit."""
    repo = Repository.init(tmp_path / "repo")
    _files(tmp_path / "in", [[1, 2, 3]])
    dataset = _pushed_root(repo)
    meeting = MeetingRunner(engine, 2)

    def push(i: int) -> IngestResult:
        options = IngestOptions(work_dir=_scratch(tmp_path, i), extra={"test/run": "the-same-run"})
        return push_ingest(
            Dataset(dataset.store), "pushed", meeting, [tmp_path / "in" / "part-0.ndjson"], options
        )  # type: ignore[arg-type]

    first, second = _in_threads(2, push)

    assert _ids(dataset) == [1, 2, 3]
    assert first.new_blocks == second.new_blocks and first.records == second.records == 3
    assert first.new_head == second.new_head == str(dataset.head())
    assert sorted(r.reconciliation.lost_races for r in (first, second)) == [0, 1]
    assert verify_integrity(dataset) == []


def test_schema_commits_in_threads_record_one_schema(engine: LocalSparkRunner, tmp_path: Path) -> None:
    """Three `infer --commit` of a push dataset at once: one SetDataSchema; the losers find the schema
    they inferred already recorded and commit nothing."""
    repo = Repository.init(tmp_path / "repo")
    _files(tmp_path / "in", [[1, 2, 3]])
    dataset = _pushed_root(repo)
    before = dataset.head()
    meeting = MeetingRunner(engine, WRITERS)

    def infer(i: int) -> InferResult:
        options = InferOptions(work_dir=repo.work_dir)
        sample = [tmp_path / "in" / "part-0.ndjson"]
        return infer_schema(Dataset(dataset.store), "pushed", meeting, options, files=sample, commit=True)  # type: ignore[arg-type]

    results = _in_threads(WRITERS, infer)  # type: ignore[arg-type]

    new = _blocks_since(dataset, before)
    assert len(new) == 1
    assert isinstance(dataset.block(dataset.head()).event, model.SetDataSchema)  # type: ignore[arg-type]
    committed = [r for r in results if r.committed]
    assert [r.new_head for r in committed] == new
    losers = [r for r in results if not r.committed]
    assert len(losers) == WRITERS - 1
    assert all(r.reconciliation.heads_found == new and r.changes == [] for r in losers)
    assert all(r.schema == results[0].schema for r in results)
    assert verify_integrity(dataset) == []


def test_transforms_in_threads_process_each_input_block_once(
    engine: LocalSparkRunner, tmp_path: Path
) -> None:
    repo = Repository.init(tmp_path / "repo")
    _files(tmp_path / "in", [[1, 2, 3]])
    root = _pushed_root(repo)
    push_ingest(
        root, "pushed", engine, [tmp_path / "in" / "part-0.ndjson"], IngestOptions(work_dir=repo.work_dir)
    )
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref="pushed", alias="pushed")],
        transform=model.TransformSql(
            engine="spark", query="SELECT event_time, id, amount * 2 AS doubled FROM pushed"
        ),
    )
    repo.add(
        model.DatasetSnapshot(name="doubled", kind=model.DatasetKind.DERIVATIVE, metadata=[transform, VOCAB])
    )
    derived = repo.dataset("doubled")
    before = derived.head()
    meeting = MeetingRunner(engine, WRITERS)
    pins = {"pushed": str(root.head())}

    def transform_once(i: int) -> IngestResult:
        options = TransformOptions(work_dir=_scratch(tmp_path, i), pinned_heads=pins)
        return run_transform(Repository.open(repo.root), "doubled", meeting, options)  # type: ignore[arg-type]

    results = _in_threads(WRITERS, transform_once)

    assert _ids(derived) == [1, 2, 3] and _offsets(derived) == [0, 1, 2]
    _all_committed_once(derived, before, results)
    [winner] = [r for r in results if r.new_blocks]
    losers = [r for r in results if not r.new_blocks]
    assert winner.records == 3 and len(losers) == WRITERS - 1
    for r in losers:  # planned again from the winner's head: the pinned input was processed
        assert r.up_to_date and r.new_head == str(derived.head())
        assert r.as_dict()["reconciled"] == {"lost_races": 1, "heads_found": [str(derived.head())]}
    executes = [b.event for _, b in derived.iter_blocks() if isinstance(b.event, model.ExecuteTransform)]
    assert len(executes) == 1
    assert verify_integrity(derived) == []


# --------------------------------------------------------------------------------------------------
# processes: `odf pull` three times at once
# --------------------------------------------------------------------------------------------------

# The child: `odf pull` whose first engine answer waits until every writer has had its own (a file per
# writer in a meeting folder), so that all commit onto the same head.
CHILD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path

    from airflow_odf.engine.local_runner import LocalSparkRunner

    meeting, writers = Path(os.environ["ODF_TEST_MEETING"]), int(os.environ["ODF_TEST_WRITERS"])
    original = LocalSparkRunner.run
    met = []

    def run(self, request_json, work_dir):
        response = original(self, request_json, work_dir)
        if not met:
            met.append(True)
            (meeting / str(os.getpid())).touch()
            deadline = time.monotonic() + 300
            while len(list(meeting.iterdir())) < writers and time.monotonic() < deadline:
                time.sleep(0.05)
        return response

    LocalSparkRunner.run = run
    from airflow_odf.cli.main import main

    sys.exit(main(sys.argv[1:]))
    """
)


def test_odf_pull_in_three_processes_ingests_every_file_once(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "repo")
    _files(tmp_path / "in", [[1, 2], [3, 4], [5]])
    dataset = _polled_root(repo, tmp_path / "in")
    before = dataset.head()
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    env = {
        **os.environ,
        "ODF_TEST_MEETING": str(meeting),
        "ODF_TEST_WRITERS": str(WRITERS),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    command = [sys.executable, "-c", CHILD, "pull", "polled", "--repo", str(repo.root)]
    command += [
        "--engine",
        "local",
        "--master",
        "local[1]",
        "--format",
        "json",
        "--source-root",
        str(tmp_path),
    ]
    children = [
        subprocess.Popen(
            command,
            env={**env, "ODF_WORK_DIR": str(_scratch(tmp_path, i))},
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(WRITERS)
    ]
    outputs = [child.communicate(timeout=600) for child in children]

    assert [child.returncode for child in children] == [0] * WRITERS, [err[-3000:] for _, err in outputs]
    results = [json.loads(out[out.index("{") :]) for out, _ in outputs]
    assert _ids(dataset) == [1, 2, 3, 4, 5] and _offsets(dataset) == list(range(5))
    own = [h for r in results for h in r["new_blocks"]]
    assert len(own) == len(set(own)) and sorted(own) == sorted(_blocks_since(dataset, before))
    assert all(r["new_head"] == str(dataset.head()) for r in results)
    reconciled = [r["reconciled"] for r in results if "reconciled" in r]
    assert len(reconciled) >= WRITERS - 1 and all(r["lost_races"] >= 1 for r in reconciled)
    assert sum("another writer moved the head to" in err for _, err in outputs) >= WRITERS - 1
    assert verify_integrity(dataset) == []


def test_a_race_lost_at_the_head_move_leaves_only_what_gc_removes(
    engine: LocalSparkRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rare case: the other writer moves the head between this commit's check of it and its
    compare-and-swap, after this commit stored its objects and blocks. The push is ingested again on
    top; what the lost attempt stored is unreferenced (never the winner's), and `gc` removes it."""
    repo = Repository.init(tmp_path / "repo")
    _files(tmp_path / "in", [[1, 2, 3]])
    dataset = _pushed_root(repo)
    armed, others = [True], []
    original = LocalObjectStore.compare_and_swap

    def other_writer_first(self: LocalObjectStore, key: str, expected: Any, new: Any) -> None:
        if armed and key == HEAD_REF and self.get_or_none(ALIAS_KEY) == b"pushed":
            armed.clear()
            others.append(str(Dataset(self).commit([model.SetInfo(description="the other writer")]).new_head))
        original(self, key, expected, new)

    monkeypatch.setattr(LocalObjectStore, "compare_and_swap", other_writer_first)
    options = IngestOptions(work_dir=repo.work_dir)
    result = push_ingest(dataset, "pushed", engine, [tmp_path / "in" / "part-0.ndjson"], options)

    assert others and result.reconciliation.heads_found == others
    assert result.records == 3 and _ids(dataset) == [1, 2, 3]
    events = [b.event for _, b in reversed(list(dataset.iter_blocks()))]
    assert [type(e) for e in events[-3:]] == [model.SetInfo, model.SetDataSchema, model.AddData]
    garbage = collect_garbage(dataset, 0)
    # the lost attempt's two blocks, and the attestation of the head it never became
    assert sorted(k.split("/")[0] for k in garbage if not k.startswith("data/")) == [
        "attestations",
        "blocks",
        "blocks",
    ]
    assert f"attestations/{dataset.head()}" not in garbage  # the winner's head keeps its signature
    assert verify_integrity(dataset) == [] and _ids(dataset) == [1, 2, 3]


# --------------------------------------------------------------------------------------------------
# writers sharing a scratch space: claims (issue 36)
# --------------------------------------------------------------------------------------------------


class CountingRunner:
    """The shared engine, counting the requests it answers by kind (ingest: `read`; transform: `queries`)."""

    def __init__(self, runner: LocalSparkRunner) -> None:
        self.runner = runner
        self.requests: list[str] = []
        self._lock = threading.Lock()

    def run(self, request_json: str, work_dir: Path) -> str:
        request = json.loads(request_json)
        with self._lock:
            self.requests.append("ingest" if "read" in request else "transform")
        return self.runner.run(request_json, work_dir)


def test_writers_sharing_a_scratch_space_do_each_piece_of_engine_work_once(
    engine: LocalSparkRunner, tmp_path: Path
) -> None:
    """Three polling ingests, then three transforms, at once over one repository and its scratch space:
    one writer at a time does the engine work from a head, the others wait for its commit and plan
    again from it — so the engine answers one request per file and one transform, not one per writer
    (before, each writer ran all of it and two thirds of it was thrown away)."""
    repo = Repository.init(tmp_path / "repo")
    _files(tmp_path / "in", [[1, 2], [3], [4, 5, 6]])
    dataset = _polled_root(repo, tmp_path / "in")
    counting = CountingRunner(engine)

    def pull(i: int) -> IngestResult:
        options = IngestOptions(work_dir=repo.work_dir, source_dir=tmp_path)
        return pull_polling(Dataset(dataset.store), "polled", counting, options)  # type: ignore[arg-type]

    pulls = _in_threads(WRITERS, pull)

    assert _ids(dataset) == [1, 2, 3, 4, 5, 6] and _offsets(dataset) == list(range(6))
    assert counting.requests == ["ingest"] * 3  # one per file
    assert sum(r.records for r in pulls) == 6 and all(r.new_head == str(dataset.head()) for r in pulls)

    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref="polled", alias="polled")],
        transform=model.TransformSql(
            engine="spark", query="SELECT event_time, id, amount * 2 AS doubled FROM polled"
        ),
    )
    repo.add(
        model.DatasetSnapshot(name="doubled", kind=model.DatasetKind.DERIVATIVE, metadata=[transform, VOCAB])
    )
    derived = repo.dataset("doubled")
    pins = {"polled": str(dataset.head())}

    def transform_once(i: int) -> IngestResult:
        options = TransformOptions(work_dir=repo.work_dir, pinned_heads=pins)
        return run_transform(Repository.open(repo.root), "doubled", counting, options)  # type: ignore[arg-type]

    transforms = _in_threads(WRITERS, transform_once)

    assert counting.requests == ["ingest"] * 3 + ["transform"]
    assert _ids(derived) == [1, 2, 3, 4, 5, 6]
    [winner] = [r for r in transforms if r.new_blocks]
    for r in transforms:
        assert r.new_head == str(derived.head())
        if r is not winner:  # waited for the winner's commit, then found its pinned input processed
            assert r.up_to_date and r.as_dict()["reconciled"]["heads_found"] == [str(derived.head())]
    assert verify_integrity(dataset) == [] and verify_integrity(derived) == []
    assert list((repo.work_dir / "claims").iterdir()) == []  # every claim released

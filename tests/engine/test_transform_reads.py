"""A transform reads the derivative's state once and opens each input once, however many batches it runs.

Counted on a derivative over two roots whose backlog runs as four batches: who read whose state
(`Dataset.state`, by calling function) and how often each dataset was opened (`dataset_by_id`). The
commit keeps its own compare against the head; the expected head is the state read at the start, then
the one each batch committed, so a writer that moves the head during a batch makes that batch fail.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.execute import TransformOptions, run_transform

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
ROOTS = ("com.acme.a", "com.acme.b")
DERIVATIVE = "com.acme.both"


def at(day: int) -> Timestamp:
    return Timestamp.parse(f"2024-02-{day:02d}T12:00:00Z")


@pytest.fixture
def repo(tmp_path: Path, runner: LocalSparkRunner) -> Repository:
    """Two Append roots of two slices each (ingested alternately) and a derivative over both."""
    repo = Repository.init(tmp_path / "repo")
    read = model.ReadStepCsv(header=True, ddl_schema=["event_time TIMESTAMP", "id BIGINT"])
    for name in ROOTS:
        source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
        repo.add(
            model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
        )
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref=name, alias=name.rsplit(".", 1)[1]) for name in ROOTS],
        transform=model.TransformSql(
            engine="spark", query="SELECT event_time, id FROM a UNION ALL SELECT event_time, id FROM b"
        ),
    )
    snapshot = model.DatasetSnapshot(name=DERIVATIVE, kind=model.DatasetKind.DERIVATIVE, metadata=[transform])
    repo.add(snapshot, system_time=T0)
    for day, name in enumerate([*ROOTS, *ROOTS], start=1):
        path = tmp_path / f"{name}-{day}.csv"
        lines = [f"2024-02-{day:02d}T0{hour}:00:00Z,{2 * day + hour}\n" for hour in (0, 1)]
        path.write_text("event_time,id\n" + "".join(lines))
        options = IngestOptions(work_dir=tmp_path / "work")
        push_ingest(repo.dataset(name), name, runner, [path], options, system_time=at(day))
    return repo


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, list[str]], Counter[DatasetId]]:
    """(dataset folder -> the functions that read its state, in order; dataset ID -> times opened)."""
    state_reads: dict[str, list[str]] = {}
    opened: Counter[DatasetId] = Counter()
    state, dataset_by_id = Dataset.state, Repository.dataset_by_id

    def counted_state(self: Dataset) -> Any:
        folder = Path(str(self.store.local_path("info"))).parent.name
        state_reads.setdefault(folder, []).append(sys._getframe(1).f_code.co_name)
        return state(self)

    def counted_open(self: Repository, dataset_id: DatasetId) -> Dataset:
        opened[dataset_id] += 1
        return dataset_by_id(self, dataset_id)

    monkeypatch.setattr(Dataset, "state", counted_state)
    monkeypatch.setattr(Repository, "dataset_by_id", counted_open)
    return state_reads, opened


def folder(repo: Repository, name: str) -> str:
    return str(repo.resolve(name)).removeprefix("did:odf:")


def test_one_state_read_and_one_open_per_dataset_for_four_batches(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path, reads: Any
) -> None:
    state_reads, opened = reads
    options = TransformOptions(work_dir=tmp_path / "work", max_input_records=2)
    result = run_transform(repo, DERIVATIVE, runner, options, system_time=at(9))
    assert result.records == 8 and len(result.new_blocks) == 5  # SetDataSchema + 4 ExecuteTransforms
    # the derivative: once by the run; each commit's own compare against the head aside
    assert state_reads.pop(folder(repo, DERIVATIVE)) == ["run_transform"] + ["commit"] * 4
    for name in ROOTS:  # each input: read and opened once, by the plan
        assert state_reads.pop(folder(repo, name)) == ["resolve_input"]
        assert opened.pop(repo.resolve(name)) == 1
    assert opened.pop(repo.resolve(DERIVATIVE)) == 1 and not opened and not state_reads
    table = tail(repo.dataset(DERIVATIVE), 100)
    assert table is not None and sorted(table.column("id").to_pylist()) == list(range(2, 10))
    assert table.column("offset").to_pylist() == list(range(8))


class WriterDuringBatch:
    """The engine runner, and another writer that commits to the derivative while batch `batch` runs."""

    def __init__(self, runner: LocalSparkRunner, repo: Repository, batch: int) -> None:
        self.runner, self.repo, self.batch, self.calls = runner, repo, batch, 0

    def run(self, request_json: str, work_dir: Path) -> str:
        self.calls += 1
        if self.calls == self.batch:
            self.repo.dataset(DERIVATIVE).commit([model.SetInfo(description="meanwhile")], system_time=at(9))
        return self.runner.run(request_json, work_dir)


def test_a_head_moved_during_a_batch_is_planned_again_from_the_new_head(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    """The second batch's commit loses the race to the other writer: the transform plans the rest again
    from the new head (chain.reconcile) instead of failing; nothing is processed twice."""
    options = TransformOptions(work_dir=tmp_path / "work", max_input_records=2)
    result = run_transform(repo, DERIVATIVE, WriterDuringBatch(runner, repo, 2), options, system_time=at(9))
    derived = repo.dataset(DERIVATIVE)
    events = [type(b.event) for _, b in derived.iter_blocks()]
    # newest first: the rest of the batches on top of the other writer's block, on top of the first batch
    assert events[:6] == [model.ExecuteTransform] * 3 + [
        model.SetInfo,
        model.ExecuteTransform,
        model.SetDataSchema,
    ]
    assert result.records == 8 and len(result.new_blocks) == 5  # SetDataSchema + 4 ExecuteTransforms
    assert result.reconciliation.heads_found == [
        str(h) for h, b in derived.iter_blocks() if b.event == model.SetInfo(description="meanwhile")
    ]
    table = tail(derived, 100)
    assert table is not None and sorted(table.column("id").to_pylist()) == list(range(2, 10))

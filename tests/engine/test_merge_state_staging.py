"""Previous slices are staged for a stateful merge only when needed (Spark on the shared session).

With a current checkpoint the core hands the engine the checkpoint alone: from an S3 repository the
engine cannot read itself, the 3rd ingest downloads no previous slice and walks no chain. When the
checkpoint is of no use to the engine (another merge strategy's) the engine asks for the slices
(`needs-previous-data`) and the result equals the one of a request that carried them from the start.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.engine.merge import load_state, write_state
from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest import iteration
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.storage.s3 import S3ObjectStore
from airflow_odf.utils.engine_json import NEEDS_PREVIOUS_DATA
from tests.sharing.conftest import _fake_aws_environment, moto_endpoint, s3_admin, s3_bucket  # noqa: F401

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
NAME = "com.acme.orders"
VOCAB = {"event_time_column": "event_time"}
LEDGER = model.MergeStrategyLedger(primary_key=["id"])
SNAPSHOT = model.MergeStrategySnapshot(primary_key=["id"])


def at(day: int) -> Timestamp:
    return Timestamp.parse(f"2024-02-{day:02d}T12:00:00Z")


def source(merge: Any) -> model.AddPushSource:
    read = model.ReadStepCsv(header=True, ddl_schema=["event_time TIMESTAMP", "id BIGINT", "qty BIGINT"])
    return model.AddPushSource(source_name="default", read=read, merge=merge)


def create(repo: Repository, merge: Any) -> Dataset:
    snapshot = model.DatasetSnapshot(name=NAME, kind=model.DatasetKind.ROOT, metadata=[source(merge)])
    repo.add(snapshot, system_time=T0)
    return repo.dataset(NAME)


def ingest(dataset: Dataset, runner: Any, tmp_path: Path, day: int, rows: list[tuple[int, int]]) -> int:
    """Ingests `(id, qty)` rows as of day `day`; returns the number of records written."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"day{day}.csv"
    path.write_text(
        "event_time,id,qty\n" + "".join(f"2024-02-{day:02d}T00:00:00Z,{i},{q}\n" for i, q in rows)
    )
    options = IngestOptions(work_dir=tmp_path / "work")
    return push_ingest(dataset, NAME, runner, [path], options, system_time=at(day)).records


def data_events(dataset: Dataset) -> list[model.AddData]:
    return [b.event for _, b in reversed(list(dataset.iter_blocks())) if isinstance(b.event, model.AddData)]


def rows(dataset: Dataset) -> list[tuple[Any, ...]]:
    table = tail(dataset, 100)
    assert table is not None
    return list(zip(*(table.column(c).to_pylist() for c in ("offset", "op", "id", "qty")), strict=True))


# --------------------------------------------------------------------------------------------------
# the engine's side: asking instead of rebuilding from nothing
# --------------------------------------------------------------------------------------------------


def test_load_state_asks_for_withheld_slices_only_when_the_checkpoint_is_unusable(
    spark: SparkSession, tmp_path: Path
) -> None:
    ledger = {"kind": "Ledger", "primaryKey": ["id"]}
    checkpoint = str(tmp_path / "checkpoint.parquet")
    write_state(spark.createDataFrame([(1,), (2,)], "id long"), checkpoint, ledger)
    state = load_state(spark, ledger, checkpoint, [], vocab=VOCAB, prev_data_withheld=3)
    assert state is not None and sorted(r.id for r in state.collect()) == [1, 2]
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not parquet")
    for strategy, path in [({"kind": "Snapshot", "primaryKey": ["id"]}, checkpoint), (ledger, str(garbage))]:
        with pytest.raises(EngineInputError) as asked:
            load_state(spark, strategy, path, [], vocab=VOCAB, prev_data_withheld=3)
        assert asked.value.kind == NEEDS_PREVIOUS_DATA and "3 previous slice(s)" in asked.value.message
    # nothing withheld: an unusable checkpoint and no slices is a first ingest, as before
    assert load_state(spark, ledger, str(garbage), [], vocab=VOCAB) is None


# --------------------------------------------------------------------------------------------------
# an S3 repository the engine cannot read itself
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Keys read from any S3 store (`get` and `get_file`), in order."""
    keys: list[str] = []
    for name in ("get", "get_file"):
        original = getattr(S3ObjectStore, name)

        def recorded(self: S3ObjectStore, key: str, *args: Any, _original: Callable = original) -> Any:
            keys.append(key)
            return _original(self, key, *args)

        monkeypatch.setattr(S3ObjectStore, name, recorded)
    return keys


def test_with_a_current_checkpoint_no_previous_slice_is_downloaded(
    moto_endpoint: str,  # noqa: F811  (fixtures imported above)
    s3_bucket: str,  # noqa: F811
    runner: LocalSparkRunner,
    tmp_path: Path,
    downloads: list[str],
    count_walks: list[int],
) -> None:
    repo = Repository.init(f"s3+{moto_endpoint}/{s3_bucket}/odf")
    orders = create(repo, LEDGER)
    assert orders.store.engine_uri("data/x") is None  # the engine gets staged copies of what it reads
    assert ingest(orders, runner, tmp_path, 1, [(1, 10), (2, 20)]) == 2
    assert ingest(orders, runner, tmp_path, 2, [(2, 21), (3, 30)]) == 1
    downloads.clear()
    count_walks[0] = 0
    assert ingest(orders, runner, tmp_path, 3, [(1, 11), (3, 31), (4, 40)]) == 1
    checkpoint = orders.state().checkpoint
    assert count_walks[0] == 0
    assert not [key for key in downloads if key.startswith("data/")], downloads
    assert len([key for key in downloads if key.startswith("checkpoints/")]) == 1
    assert rows(orders) == [(0, 0, 1, 10), (1, 0, 2, 20), (2, 0, 3, 30), (3, 0, 4, 40)]
    assert checkpoint is not None and orders.state().checkpoint_is_current


# --------------------------------------------------------------------------------------------------
# a checkpoint of another strategy: the engine asks, the result is the old one
# --------------------------------------------------------------------------------------------------


class AnswerLog:
    """A runner that notes each response's error kind (None: success)."""

    def __init__(self, runner: LocalSparkRunner) -> None:
        self.runner, self.kinds = runner, []

    def run(self, request_json: str, work_dir: Path) -> str:
        response = self.runner.run(request_json, work_dir)
        self.kinds.append((json.loads(response).get("error") or {}).get("kind"))
        return response


def strategy_change(repo: Repository, runner: LocalSparkRunner, tmp_path: Path) -> tuple[Dataset, AnswerLog]:
    """Two Ledger ingests, then the source becomes a Snapshot and ingests once more (the checkpoint,
    current as far as the chain tells, holds Ledger keys)."""
    orders = create(repo, LEDGER)
    ingest(orders, runner, tmp_path, 1, [(1, 10), (2, 20)])
    ingest(orders, runner, tmp_path, 2, [(2, 21), (3, 30)])
    orders.commit([source(SNAPSHOT)], system_time=at(2))
    log = AnswerLog(runner)
    ingest(orders, log, tmp_path, 3, [(1, 10), (3, 33), (4, 40)])
    return orders, log


def test_a_checkpoint_of_another_strategy_makes_the_engine_ask_with_the_old_result(
    runner: LocalSparkRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    orders, log = strategy_change(Repository.init(tmp_path / "new"), runner, tmp_path / "new-work")
    assert log.kinds == [NEEDS_PREVIOUS_DATA, None]

    # the old behaviour: the checkpoint and every previous slice in the one request
    original = iteration._merge_state_inputs

    def never_withheld(dataset: Dataset, state: Any, op_dir: Path) -> tuple[str | None, list[str], int]:
        checkpoint, slices, withheld = original(dataset, state, op_dir)
        if withheld:
            slices = [str(dataset.store.local_path(f"data/{h}")) for h in state.data_slices]
        return checkpoint, slices, 0

    monkeypatch.setattr(iteration, "_merge_state_inputs", never_withheld)
    before, before_log = strategy_change(Repository.init(tmp_path / "old"), runner, tmp_path / "old-work")
    assert before_log.kinds == [None]

    assert data_events(orders) == data_events(before)  # the same slices, checkpoints, watermarks
    # Snapshot against the state rebuilt from the slices (Ledger rows): 1 corrected (its event time
    # moved), 2 retracted, 3 corrected, 4 added
    assert rows(orders) == rows(before)
    assert rows(orders)[3:] == [
        (3, 2, 1, 10),
        (4, 3, 1, 10),
        (5, 1, 2, 20),
        (6, 2, 3, 30),
        (7, 3, 3, 33),
        (8, 0, 4, 40),
    ]

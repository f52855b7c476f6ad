"""The example DAG `odf_batching` end to end with `dag.test()` (its deferrable sensor's trigger runs in
line), real Spark ingests of `com.example.trades` and a real transform: nine ingests of 100 trades
leave the rule unsatisfied and the sensor waiting; the tenth, committed while it waits, satisfies it,
and one transform processes exactly those 1,000 trades, pinned to the tenth head. Then five more
ingests and a short interval: the next run transforms those 500 once the interval has passed."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.data_access import iter_slices, read_slice
from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import read_manifests
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.polling import pull_polling
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.batching import BatchingRule, check_batching
from tests.airflow.dag_runs import EXAMPLES, load_dag, task_states, xcom
from tests.airflow.test_asset_scheduled_dag import rendered, root_dataset

TRADES, SETTLEMENT = "com.example.trades", "com.example.trades.settlement"


class Ingests:
    """Files of 100 trades dropped one at a time into `data/`, each ingested by the real polling ingest
    (FilesGlob `data/trades-*.csv`, one AddData per file)."""

    def __init__(self, repo: Repository, root: Path) -> None:
        self.repo, self.root, self.count = repo, root, 0
        (root / "data").mkdir(exist_ok=True)

    def next(self) -> str:
        self.count += 1
        day = f"2024-02-{self.count:02d}"
        rows = [
            f"{day}T10:{i // 60:02d}:{i % 60:02d}Z,ACME,{self.count * 1000 + i},12.5000,{i + 1}"
            for i in range(100)
        ]
        name = self.root / "data" / f"trades-{self.count:03d}.csv"
        name.write_text("event_time,symbol,trade_id,price,quantity\n" + "\n".join(rows) + "\n")
        options = IngestOptions(work_dir=self.root / "work", source_dir=self.root)
        result = pull_polling(self.repo.dataset(TRADES), TRADES, LocalSparkRunner("local[2]"), options)
        assert result.new_head is not None
        return result.new_head


def executes(repo: Repository) -> list[model.ExecuteTransform]:
    settlement = repo.dataset(SETTLEMENT)
    found = [b.event for _, b in settlement.iter_blocks() if isinstance(b.event, model.ExecuteTransform)]
    return list(reversed(found))


def trade_ids(repo: Repository) -> list[int]:
    settlement = repo.dataset(SETTLEMENT)
    return sorted(
        i for data in iter_slices(settlement) for i in read_slice(settlement, data)["trade_id"].to_pylist()
    )


@pytest.mark.usefixtures("airflow_db", "spark")
def test_batching_dag_transforms_once_per_batch(odf_repo: Path, tmp_path: Path) -> None:
    repo = root_dataset(odf_repo)
    dag = load_dag("odf_batching.py", "odf_batching")
    sensor = dag.get_task("await_batch")
    assert sensor.deferrable and (sensor.min_records_to_await, sensor.max_batching_interval) == (1000, 3600)
    sensor.poke_interval = 0.2  # the example checks every minute
    ingests = Ingests(repo, tmp_path)

    # 1. nine ingests, the rule evaluated after each: it does not hold (the derivative is created here
    #    from the example's manifest, which the DAG's first task then finds applied)
    [manifest] = read_manifests(EXAMPLES / "manifests" / f"{SETTLEMENT}.yaml")
    repo.add(manifest.content)
    rule = BatchingRule(1000, 3600)
    verdicts = []
    for _ in range(9):
        ingests.next()
        status = check_batching(repo, SETTLEMENT, rule)
        verdicts.append((status.new_records, status.satisfied))
    assert verdicts == [(100 * k, False) for k in range(1, 10)]

    # 2. the DAG runs; its sensor defers and waits until the tenth ingest lands meanwhile
    tenth: list[str] = []
    ingester = threading.Timer(2.0, lambda: tenth.append(ingests.next()))
    ingester.start()
    run = dag.test()
    ingester.join()
    assert task_states(run) == {
        "apply_manifest": "success",
        "await_batch": "success",
        "transform_settlement": "success",
    }
    did = str(repo.resolve(TRADES))
    waited = xcom(run, "await_batch")
    assert (waited["reason"], waited["new_records"]) == ("records", 1000)
    assert xcom(run, "await_batch", key="input_heads") == {did: tenth[0]}
    assert rendered(run.run_id, "transform_settlement")["input_heads"] == {did: tenth[0]}
    assert xcom(run, "transform_settlement")["records"] == 1000

    [execute] = executes(repo)  # exactly one transform, of exactly the ten ingests
    [trades_input] = execute.query_inputs
    assert str(trades_input.new_block_hash) == tenth[0]
    assert (trades_input.prev_offset, trades_input.new_offset) == (None, 999)
    assert trade_ids(repo) == [k * 1000 + i for k in range(1, 11) for i in range(100)]

    # 3. five more ingests: 500 records, below N; a short interval lets them through
    heads = [ingests.next() for _ in range(5)]
    status = check_batching(repo, SETTLEMENT, rule)
    assert (status.new_records, status.reason) == (500, None)
    assert status.deadline is not None
    just_before = Timestamp.from_epoch_nanos(status.deadline.epoch_nanos() - 1_000_000)
    assert check_batching(repo, SETTLEMENT, rule, now=just_before).reason is None
    sensor.max_batching_interval = 3.0
    second = dag.test()
    assert task_states(second)["transform_settlement"] == "success"
    assert xcom(second, "await_batch")["reason"] == "interval"
    assert xcom(second, "await_batch", key="input_heads") == {did: heads[-1]}

    first, later = executes(repo)
    assert first == execute
    [trades_input] = later.query_inputs
    assert str(trades_input.new_block_hash) == heads[-1]
    assert (trades_input.prev_offset, trades_input.new_offset) == (999, 1499)
    assert len(trade_ids(repo)) == 1500

"""The batching rule of a derivative (`check_batching`) against real repositories in `tmp_path`.

Root datasets get AddData blocks committed directly, and the derivative ExecuteTransform blocks made from
the planner's own batches (the helpers of test_transform_plan): what is counted here is what the
planner would hand the engine. The clock is injected (`now`); no test reads it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.batching import (
    BacklogCache,
    BatchingRule,
    BatchingRuleError,
    BatchingStatus,
    check_batching,
    parse_interval,
)
from airflow_odf.odf.transform.plan import InputDivergedError, TransformPlanError, plan_transform
from tests.unit.test_transform_plan import (
    add_data,
    add_info,
    add_watermark,
    derivative,
    execute,
    root,
    wm,
)


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return Repository.init(tmp_path / "repo")


def later(ts: Timestamp, seconds: float) -> Timestamp:
    return Timestamp.from_epoch_nanos(ts.epoch_nanos() + round(seconds * 1e9))


def system_time(ds: Dataset, head: Multihash) -> Timestamp:
    return ds.block(head).system_time


def pinned_batch(repo: Repository, deriv: Dataset, status: BatchingStatus) -> list[tuple[int, int]]:
    """The offset intervals a transform pinned to the status's heads would read, per input."""
    plan = plan_transform(repo, deriv, pinned_heads=status.input_heads())
    (batch,) = plan.batches
    return [(i.offset_interval.start, i.offset_interval.end) for i in batch.inputs if i.offset_interval]


def test_ten_ingests_of_100_with_n_1000_satisfy_the_rule_after_the_tenth(repo: Repository) -> None:
    trades = root(repo, "trades")
    deriv = derivative(repo, [("trades", "t")])
    rule = BatchingRule(min_records_to_await=1000, max_batching_interval=timedelta(hours=1))
    heads, verdicts = [], []
    for _ in range(10):
        heads.append(add_data(trades, 100))
        now = system_time(trades, heads[-1])  # checked as soon as the ingest committed
        status = check_batching(repo, "deriv", rule, now=now)
        verdicts.append((status.new_records, status.reason))

    assert verdicts == [(100 * k, None) for k in range(1, 10)] + [(1000, "records")]
    assert status.input_heads() == {str(trades.state().dataset_id): str(heads[-1])}
    assert "1000 new input record(s) (t: 1000) of 1000" in status.describe()
    assert pinned_batch(repo, deriv, status) == [(0, 999)]

    # the run that satisfied it is the only one: right after it, nothing is unprocessed
    execute(deriv, plan_transform(repo, deriv, pinned_heads=status.input_heads()).batches[0])
    after = check_batching(repo, "deriv", rule, now=later(status.now, 7200))
    assert (after.new_records, after.first_change, after.reason) == (0, None, None)
    assert after.describe().endswith("nothing unprocessed yet: waiting")


def test_five_ingests_satisfy_the_rule_when_the_interval_has_passed(repo: Repository) -> None:
    trades = root(repo, "trades")
    deriv = derivative(repo, [("trades", "t")])
    rule = BatchingRule(min_records_to_await=1000, max_batching_interval=600)
    heads = [add_data(trades, 100) for _ in range(5)]
    first = system_time(trades, heads[0])

    before = check_batching(repo, "deriv", rule, now=later(first, 599.999))
    at = check_batching(repo, "deriv", rule, now=later(first, 600))

    assert (before.new_records, before.reason, before.first_change) == (500, None, first)
    assert before.deadline == later(first, 600) and before.seconds_to_deadline() == pytest.approx(0.001)
    assert (at.reason, at.seconds_to_deadline()) == ("interval", 0.0)
    assert at.input_heads() == {str(trades.state().dataset_id): str(heads[-1])}
    assert pinned_batch(repo, deriv, at) == [(0, 499)]
    assert at.as_dict()["reason"] == "interval" and at.as_dict()["deadline"] == str(later(first, 600))


def test_without_an_interval_only_the_records_count(repo: Repository) -> None:
    trades = root(repo, "trades")
    derivative(repo, [("trades", "t")])
    add_data(trades, 5)

    status = check_batching(repo, "deriv", BatchingRule(10), now=Timestamp(4_000_000_000))

    assert (status.new_records, status.deadline, status.reason) == (5, None, None)


def test_the_interval_runs_from_the_first_change_after_the_last_transform(repo: Repository) -> None:
    trades = root(repo, "trades")
    deriv = derivative(repo, [("trades", "t")])
    add_data(trades, 3)
    execute(deriv, plan_transform(repo, deriv).batches[0])
    add_info(trades, "metadata only: not a change")
    first_new = add_data(trades, 4)
    add_data(trades, 2)

    status = check_batching(repo, "deriv", BatchingRule(100, 60), now=system_time(trades, first_new))

    assert status.new_records == 6 and status.first_change == system_time(trades, first_new)
    [backlog] = status.inputs
    assert backlog.processed_block is not None and backlog.new_records == 6
    assert pinned_batch(repo, deriv, status) == [(3, 8)]


def test_records_of_all_inputs_add_up_and_the_earliest_change_starts_the_interval(
    repo: Repository,
) -> None:
    a, b = root(repo, "root.a"), root(repo, "root.b")
    derivative(repo, [("root.a", "a"), ("root.b", "b")])
    first_b = add_data(b, 30)
    add_data(a, 40)

    waiting = check_batching(repo, "deriv", BatchingRule(100, 3600), now=system_time(b, first_b))
    add_data(a, 30)
    enough = check_batching(repo, "deriv", BatchingRule(100, 3600), now=system_time(b, first_b))

    assert (waiting.new_records, waiting.reason) == (70, None)
    assert waiting.first_change == system_time(b, first_b)
    assert [(i.alias, i.new_records) for i in enough.inputs] == [("a", 70), ("b", 30)]
    assert enough.reason == "records"
    assert enough.input_heads() == {
        str(a.state().dataset_id): str(a.head()),
        str(b.state().dataset_id): str(b.head()),
    }


def test_a_watermark_alone_is_a_change_the_interval_lets_through(repo: Repository) -> None:
    trades = root(repo, "trades")
    deriv = derivative(repo, [("trades", "t")])
    add_data(trades, 3)
    execute(deriv, plan_transform(repo, deriv).batches[0])
    moved = add_watermark(trades, wm(30))

    rule = BatchingRule(100, 60)
    before = check_batching(repo, "deriv", rule, now=later(system_time(trades, moved), 59))
    after = check_batching(repo, "deriv", rule, now=later(system_time(trades, moved), 60))

    assert (before.new_records, before.reason) == (0, None)
    assert (after.new_records, after.reason) == (0, "interval")
    assert after.input_heads() == {str(trades.state().dataset_id): str(moved)}


def test_records_come_from_the_summaries_and_blocks_are_read_once(
    repo: Repository, count_walks: list[int]
) -> None:
    trades = root(repo, "trades")
    derivative(repo, [("trades", "t")])
    for _ in range(3):
        add_data(trades, 10)
    walks = count_walks[0]

    enough = check_batching(repo, "deriv", BatchingRule(30, 60), now=Timestamp(0))
    assert enough.reason == "records" and count_walks[0] == walks  # N reached: no block read

    read: list[Multihash] = []
    original = Dataset.block

    def counted(self: Dataset, h: Multihash) -> model.MetadataBlock:
        read.append(h)
        return original(self, h)

    cache = BacklogCache()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Dataset, "block", counted)
        check_batching(repo, "deriv", BatchingRule(100, 60), now=Timestamp(0), cache=cache)
        assert len(read) == 6  # never processed: the chain once, down to the Seed (3 + 3 AddData)
        read.clear()
        check_batching(repo, "deriv", BatchingRule(100, 60), now=Timestamp(0), cache=cache)
        assert read == []  # the first change is known
    add_data(trades, 10)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Dataset, "block", counted)
        again = check_batching(repo, "deriv", BatchingRule(100, 60), now=Timestamp(0), cache=cache)
    assert read == [] and again.new_records == 40


def test_a_cache_that_saw_no_change_reads_only_the_new_blocks(repo: Repository) -> None:
    trades = root(repo, "trades")
    deriv = derivative(repo, [("trades", "t")])
    add_data(trades, 2)
    execute(deriv, plan_transform(repo, deriv).batches[0])
    add_info(trades, "nothing to process")
    cache = BacklogCache()
    assert check_batching(repo, "deriv", BatchingRule(5, 60), cache=cache).first_change is None

    read: list[Multihash] = []
    original = Dataset.block

    def counted(self: Dataset, h: Multihash) -> model.MetadataBlock:
        read.append(h)
        return original(self, h)

    new = add_data(trades, 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Dataset, "block", counted)
        status = check_batching(repo, "deriv", BatchingRule(5, 60), cache=cache)
    assert read == [new] and status.first_change == system_time(trades, new)


def test_an_input_never_pulled_is_not_ready(repo: Repository) -> None:
    a = root(repo, "root.a")
    add_data(a, 500)
    root(repo, "root.b", pulled=False)
    derivative(repo, [("root.a", "a"), ("root.b", "b")])

    status = check_batching(repo, "deriv", BatchingRule(1, 1), now=Timestamp(4_000_000_000))

    assert not status.ready and status.reason is None
    assert "not ready: input(s) b never pulled" in status.describe()


def test_a_reset_input_is_the_planner_s_error(repo: Repository) -> None:
    trades = root(repo, "trades")
    deriv = derivative(repo, [("trades", "t")])
    kept = add_data(trades, 2)
    processed = add_data(trades, 3)
    execute(deriv, plan_transform(repo, deriv).batches[0])
    trades.reset(kept)
    add_data(trades, 1)

    with pytest.raises(InputDivergedError, match="deriv") as err:
        check_batching(repo, "deriv", BatchingRule(100, 60))
    assert err.value.block_hash == processed


def test_only_derivatives_batch(repo: Repository) -> None:
    root(repo, "trades")
    with pytest.raises(TransformPlanError, match="trades is not a Derivative"):
        check_batching(repo, "trades", BatchingRule())


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(90, 90.0), (0.5, 0.5), (timedelta(minutes=2), 120.0), ("30s", 30.0), ("15m", 900.0), ("1.5h", 5400.0)],
)
def test_intervals(value: object, seconds: float) -> None:
    assert parse_interval(value) == seconds


@pytest.mark.parametrize(
    ("plain", "message"),
    [
        ({"minRecordsToAwait": 0}, "minRecordsToAwait 0: must be a whole number of at least 1"),
        ({"minRecordsToAwait": "10"}, "minRecordsToAwait '10': must be a whole number"),
        ({"maxBatchingInterval": 0}, "maxBatchingInterval 0: must be a positive duration"),
        ({"maxBatchingInterval": "soon"}, "maxBatchingInterval 'soon': expected seconds"),
        ({"maxBatchingInterval": True}, "maxBatchingInterval True: expected seconds"),
        ({"minRecords": 5}, "unknown setting(s) 'minRecords'"),
        ({}, "(none given)"),
        ([1000], "expected a mapping"),
    ],
)
def test_bad_rules_are_one_line_naming_the_setting(plain: object, message: str) -> None:
    with pytest.raises(BatchingRuleError) as err:
        BatchingRule.from_plain(plain, "m/deriv")
    assert str(err.value).startswith("m/deriv: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_rule_in_manifest_style() -> None:
    rule = BatchingRule.from_plain({"minRecordsToAwait": 1000, "maxBatchingInterval": "1h"})
    assert (rule.min_records_to_await, rule.max_batching_interval) == (1000, 3600.0)
    assert rule.as_plain() == {"minRecordsToAwait": 1000, "maxBatchingInterval": 3600.0}
    assert BatchingRule.from_plain({"maxBatchingInterval": 60}).min_records_to_await == 1


def test_after_a_transform_the_cache_dates_the_next_batch_from_its_own_first_change(
    repo: Repository,
) -> None:
    trades = root(repo, "trades")
    deriv = derivative(repo, [("trades", "t")])
    first = add_data(trades, 3)
    cache = BacklogCache()
    rule = BatchingRule(100, 60)
    before = check_batching(repo, "deriv", rule, cache=cache)
    execute(deriv, plan_transform(repo, deriv, pinned_heads=before.input_heads()).batches[0])
    second = add_data(trades, 4)

    after = check_batching(repo, "deriv", rule, cache=cache)

    assert before.first_change == system_time(trades, first)
    assert (after.new_records, after.first_change) == (4, system_time(trades, second))
    assert list(cache.walked) == [(trades.state().dataset_id, first)]  # the old batch's entry is gone

"""Planning a derivative transform against real repositories in `tmp_path`.

Root datasets get AddData blocks committed directly (no data files: planning reads metadata only);
fake ExecuteTransform blocks are committed from the plan's own `execute_inputs()`, so the chain rules
double-check every planned interval (prevBlockHash / prevOffset continuity, SetTransform order).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.plan import (
    InputDivergedError,
    PlannedInput,
    TransformBatch,
    TransformPlan,
    TransformPlanError,
    plan_transform,
)

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
SCHEMA = model.SetDataSchema(
    schema=model.DataSchema(
        fields=[
            model.DataField(name="offset", type=model.DataTypeInt64()),
            model.DataField(name="event_time", type=model.DataTypeTimestamp(unit=model.TimeUnit.MILLISECOND)),
            model.DataField(name="value", type=model.DataTypeOption(inner=model.DataTypeString())),
        ]
    )
)
VOCAB = model.SetVocab(event_time_column="event_time")
_ticks = itertools.count(1)


def tick() -> Timestamp:
    """A strictly later system time on each call, so blocks of several datasets interleave predictably."""
    return Timestamp(T0.seconds + next(_ticks) * 60)


def wm(minutes: int) -> Timestamp:
    return Timestamp(T0.seconds + minutes * 60)


def root(repo: Repository, name: str, *, pulled: bool = True) -> Dataset:
    metadata = [VOCAB, SCHEMA] if pulled else [VOCAB]
    repo.add(model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=metadata), system_time=T0)
    return repo.dataset(name)


def add_data(
    ds: Dataset, records: int, *, watermark: Timestamp | None = None, system_time: Timestamp | None = None
) -> Multihash:
    """Appends one slice of `records` records (a made-up file: nothing reads it) at `system_time` (else
    the test clock's next tick); returns the new head."""
    state = ds.state()
    start = 0 if state.last_offset is None else state.last_offset + 1
    event = model.AddData(
        prev_offset=state.last_offset,
        new_data=model.DataSlice(
            logical_hash=Multihash(ARROW0_SHA3_256, bytes(32)),
            physical_hash=Multihash.sha3_256(f"{state.dataset_id}/{start}".encode()),
            offset_interval=model.OffsetInterval(start=start, end=start + records - 1),
            size=100 * records,
        ),
        new_watermark=watermark or state.watermark,
    )
    return ds.commit([event], system_time=system_time or tick()).new_head


def add_watermark(ds: Dataset, watermark: Timestamp) -> Multihash:
    state = ds.state()
    event = model.AddData(prev_offset=state.last_offset, new_watermark=watermark)
    return ds.commit([event], system_time=tick()).new_head


def add_info(ds: Dataset, text: str) -> Multihash:
    return ds.commit([model.SetInfo(description=text)], system_time=tick()).new_head


def derivative(repo: Repository, inputs: list[tuple[str, str]], name: str = "deriv") -> Dataset:
    """A derivative over `(dataset name, alias)` inputs, in that order."""
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref=ref, alias=alias) for ref, alias in inputs],
        transform=model.TransformSql(engine="spark", query=f"select * from `{inputs[0][1]}`"),
    )
    snapshot = model.DatasetSnapshot(name=name, kind=model.DatasetKind.DERIVATIVE, metadata=[transform])
    repo.add(snapshot, system_time=T0)
    return repo.dataset(name)


def execute(deriv: Dataset, batch: TransformBatch, *, checkpoint: bool = False) -> Multihash:
    """Commits the ExecuteTransform a run of `batch` would, outputting as many records as it read."""
    state = deriv.state()
    events: list[object] = [] if state.schema is not None else [SCHEMA]
    records = batch.num_records
    start = 0 if state.last_offset is None else state.last_offset + 1
    new_data = None
    if records:
        new_data = model.DataSlice(
            logical_hash=Multihash(ARROW0_SHA3_256, bytes(32)),
            physical_hash=Multihash.sha3_256(f"out/{start}".encode()),
            offset_interval=model.OffsetInterval(start=start, end=start + records - 1),
            size=records,
        )
    new_checkpoint = None
    if checkpoint:
        new_checkpoint = model.Checkpoint(physical_hash=Multihash.sha3_256(f"cp/{start}".encode()), size=1)
    events.append(
        model.ExecuteTransform(
            query_inputs=batch.execute_inputs(),
            prev_checkpoint=state.checkpoint.physical_hash if state.checkpoint else None,
            prev_offset=state.last_offset,
            new_data=new_data,
            new_checkpoint=new_checkpoint,
        )
    )
    return deriv.commit(events, system_time=tick()).new_head


def only_batch(plan: TransformPlan) -> PlannedInput:
    assert not plan.up_to_date and plan.ready and len(plan.batches) == 1
    (planned,) = plan.batches[0].inputs
    return planned


def intervals(planned: PlannedInput) -> list[tuple[int, int]]:
    return [(s.offset_interval.start, s.offset_interval.end) for s in planned.slices]


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return Repository.init(tmp_path / "repo")


# --------------------------------------------------------------------------------------------------
# first and incremental runs
# --------------------------------------------------------------------------------------------------


def test_first_plan_takes_every_block_of_the_input(repo: Repository) -> None:
    a = root(repo, "root.a")
    add_data(a, 2)
    add_data(a, 3)
    head = add_data(a, 4)
    deriv = derivative(repo, [("root.a", "a")])

    plan = plan_transform(repo, deriv)

    planned = only_batch(plan)
    assert plan.reason is None and not plan.from_scratch
    assert plan.prev_offset is None and plan.prev_checkpoint is None
    assert planned.alias == "a" and planned.dataset_id == a.state().dataset_id
    assert (planned.prev_block_hash, planned.new_block_hash) == (None, head)
    assert (planned.prev_offset, planned.new_offset) == (None, 8)
    assert planned.offset_interval == model.OffsetInterval(start=0, end=8)
    assert intervals(planned) == [(0, 1), (2, 4), (5, 8)]
    assert planned.explicit_watermarks == [] and not planned.from_scratch
    assert planned.schema == SCHEMA and planned.vocab == VOCAB
    assert plan.batches[0].execute_inputs() == [
        model.ExecuteTransformInput(dataset_id=planned.dataset_id, new_block_hash=head, new_offset=8)
    ]


def test_incremental_plan_takes_only_blocks_after_the_last_execute_transform(repo: Repository) -> None:
    a = root(repo, "root.a")
    first = add_data(a, 2)
    deriv = derivative(repo, [("root.a", "a")])
    execute(deriv, plan_transform(repo, deriv).batches[0], checkpoint=True)
    add_info(a, "not data")
    add_data(a, 3)
    head = add_data(a, 1)

    plan = plan_transform(repo, deriv)

    planned = only_batch(plan)
    assert (planned.prev_block_hash, planned.new_block_hash) == (first, head)
    assert (planned.prev_offset, planned.new_offset) == (1, 5)
    assert planned.offset_interval == model.OffsetInterval(start=2, end=5)
    assert intervals(planned) == [(2, 4), (5, 5)]
    state = deriv.state()
    assert plan.prev_offset == state.last_offset == 1
    assert plan.prev_checkpoint == state.checkpoint.physical_hash
    execute(deriv, plan.batches[0])  # the chain rules accept the planned interval
    assert plan_transform(repo, deriv).up_to_date


def test_up_to_date_when_inputs_have_no_new_data_or_watermarks(repo: Repository) -> None:
    a = root(repo, "root.a")
    add_data(a, 2)
    deriv = derivative(repo, [("root.a", "a")])
    execute(deriv, plan_transform(repo, deriv).batches[0])
    head = deriv.head()

    plan = plan_transform(repo, deriv)
    assert plan.up_to_date and plan.ready and plan.batches == []
    assert "up to date" in (plan.reason or "")

    add_info(a, "metadata only")
    a.commit(
        [
            model.AddData(
                prev_offset=1, new_source_state=model.SourceState(source_name="s", kind="etag", value="x")
            )
        ],
        system_time=tick(),
    )
    plan = plan_transform(repo, deriv)
    assert plan.up_to_date and plan.batches == [] and deriv.head() == head


def test_empty_input_still_runs_once_to_establish_the_output_schema(repo: Repository) -> None:
    a = root(repo, "root.a")
    deriv = derivative(repo, [("root.a", "a")])

    plan = plan_transform(repo, deriv)

    planned = only_batch(plan)
    assert planned.slices == [] and planned.explicit_watermarks == []
    assert (planned.prev_block_hash, planned.new_block_hash) == (None, a.head())
    assert (planned.prev_offset, planned.new_offset, planned.offset_interval) == (None, None, None)
    execute(deriv, plan.batches[0])
    assert deriv.state().schema is not None
    assert plan_transform(repo, deriv).up_to_date


def test_watermark_only_input_blocks_are_planned(repo: Repository) -> None:
    a = root(repo, "root.a")
    add_data(a, 2, watermark=wm(10))
    deriv = derivative(repo, [("root.a", "a")])
    first = only_batch(plan_transform(repo, deriv))
    assert [w.event_time for w in first.explicit_watermarks] == [wm(10)]
    execute(deriv, plan_transform(repo, deriv).batches[0])
    w1 = add_watermark(a, wm(20))
    add_info(a, "between")
    w2 = add_watermark(a, wm(30))

    planned = only_batch(plan_transform(repo, deriv))

    assert planned.slices == [] and planned.new_block_hash == w2
    assert (planned.prev_offset, planned.new_offset, planned.offset_interval) == (1, None, None)
    assert planned.explicit_watermarks == [
        model.Watermark(system_time=a.block(w1).system_time, event_time=wm(20)),
        model.Watermark(system_time=a.block(w2).system_time, event_time=wm(30)),
    ]
    execute(deriv, plan_transform(repo, deriv).batches[0])
    assert plan_transform(repo, deriv).up_to_date


def test_every_data_block_carrying_a_watermark_contributes_one_explicit_watermark(repo: Repository) -> None:
    a = root(repo, "root.a")
    h1 = add_data(a, 1, watermark=wm(5))
    h2 = add_data(a, 1)  # same watermark carried on
    deriv = derivative(repo, [("root.a", "a")])

    planned = only_batch(plan_transform(repo, deriv))

    assert [(w.system_time, w.event_time) for w in planned.explicit_watermarks] == [
        (a.block(h1).system_time, wm(5)),
        (a.block(h2).system_time, wm(5)),
    ]


# --------------------------------------------------------------------------------------------------
# pinned heads
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["alias", "name", "NAME", "did", "hash-object"])
def test_pinned_head_older_than_the_current_head(repo: Repository, key: str) -> None:
    a = root(repo, "root.a")
    add_data(a, 2)
    pinned = add_data(a, 3)
    head = add_data(a, 4)
    deriv = derivative(repo, [("root.a", "in.a")])
    did = str(a.state().dataset_id)
    pins: dict[str, Multihash | str] = {
        "alias": {"in.a": str(pinned)},
        "name": {"root.a": str(pinned)},
        "NAME": {"ROOT.A": str(pinned)},
        "did": {did: str(pinned)},
        "hash-object": {"in.a": pinned},
    }[key]

    planned = only_batch(plan_transform(repo, deriv, pinned_heads=pins))

    assert (planned.prev_block_hash, planned.new_block_hash) == (None, pinned)
    assert planned.new_offset == 4 and intervals(planned) == [(0, 1), (2, 4)]
    execute(deriv, plan_transform(repo, deriv, pinned_heads=pins).batches[0])
    rest = only_batch(plan_transform(repo, deriv))
    assert (rest.prev_block_hash, rest.new_block_hash) == (pinned, head)
    assert intervals(rest) == [(5, 8)]


def test_pinned_hash_not_in_the_input_chain_is_an_error(repo: Repository) -> None:
    a = root(repo, "root.a")
    add_data(a, 2)
    deriv = derivative(repo, [("root.a", "a")])
    stranger = Multihash.sha3_256(b"not a block of root.a")

    with pytest.raises(TransformPlanError) as err:
        plan_transform(repo, deriv, pinned_heads={"a": stranger})

    message = str(err.value)
    assert (
        "'a'" in message
        and "root.a" in message
        and str(stranger) in message
        and "not in the chain" in message
    )


def test_pinned_hash_older_than_what_was_processed_is_an_error(repo: Repository) -> None:
    a = root(repo, "root.a")
    old = add_data(a, 2)
    processed = add_data(a, 2)
    deriv = derivative(repo, [("root.a", "a")])
    execute(deriv, plan_transform(repo, deriv).batches[0])

    with pytest.raises(TransformPlanError, match="older than") as err:
        plan_transform(repo, deriv, pinned_heads={"a": old})
    assert str(old) in str(err.value) and str(processed) in str(err.value)

    plan = plan_transform(repo, deriv, pinned_heads={"a": processed})
    assert plan.up_to_date


@pytest.mark.parametrize(
    ("pins", "match"),
    [
        ({"nope": "f1620" + "00" * 32}, "matches no single input"),
        ({"a": "not-a-hash"}, "pinned head of input 'a'"),
        ({"did:odf:zzz": "f1620" + "00" * 32}, "pinned head key 'did:odf:zzz'"),
    ],
)
def test_bad_pinned_heads_are_errors(repo: Repository, pins: dict[str, str], match: str) -> None:
    a = root(repo, "root.a")
    add_data(a, 1)
    deriv = derivative(repo, [("root.a", "a")])
    with pytest.raises(TransformPlanError, match=match):
        plan_transform(repo, deriv, pinned_heads=pins)


# --------------------------------------------------------------------------------------------------
# diverged and unpulled inputs
# --------------------------------------------------------------------------------------------------


def test_reset_input_is_an_error_naming_it_unless_recovering_from_scratch(repo: Repository) -> None:
    a = root(repo, "root.a")
    b = root(repo, "root.b")
    kept = add_data(a, 2)
    processed = add_data(a, 3)
    add_data(b, 4)
    deriv = derivative(repo, [("root.a", "a"), ("root.b", "b")])
    execute(deriv, plan_transform(repo, deriv).batches[0])
    a.reset(kept)
    head = add_data(a, 5)

    with pytest.raises(InputDivergedError) as err:
        plan_transform(repo, deriv)
    assert err.value.alias == "a" and err.value.block_hash == processed
    assert "'a'" in str(err.value) and str(processed) in str(err.value)
    assert "--reset-derivatives-on-diverged-input" in str(err.value)

    plan = plan_transform(repo, deriv, recover_from_scratch=True)

    assert not plan.up_to_date and plan.from_scratch and "'a'" in (plan.reason or "")
    assert plan.prev_offset is None and plan.prev_checkpoint is None
    (batch,) = plan.batches
    pa, pb = batch.inputs
    assert pa.from_scratch and pb.from_scratch
    assert (pa.prev_block_hash, pa.new_block_hash, pa.prev_offset, pa.new_offset) == (None, head, None, 6)
    assert intervals(pa) == [(0, 1), (2, 6)]
    assert (pb.prev_block_hash, pb.new_block_hash, pb.prev_offset, pb.new_offset) == (None, b.head(), None, 3)


def test_input_never_pulled_means_not_ready(repo: Repository) -> None:
    a = root(repo, "root.a")
    add_data(a, 1)
    root(repo, "root.b", pulled=False)
    deriv = derivative(repo, [("root.a", "a"), ("root.b", "b")])

    plan = plan_transform(repo, deriv)

    assert plan.up_to_date and not plan.ready and plan.batches == []
    assert plan.reason is not None and plan.reason.startswith("not ready") and "'b'" in plan.reason
    assert "never pulled" in plan.reason


def test_only_derivatives_are_planned(repo: Repository) -> None:
    a = root(repo, "root.a")
    with pytest.raises(TransformPlanError, match="not a Derivative"):
        plan_transform(repo, a)
    deriv = derivative(repo, [("root.a", "a")])
    with pytest.raises(TransformPlanError, match="max_input_records"):
        plan_transform(repo, deriv, max_input_records=0)


# --------------------------------------------------------------------------------------------------
# batching
# --------------------------------------------------------------------------------------------------


def commit_all(deriv: Dataset, plan: TransformPlan) -> None:
    """Commits every batch as its own ExecuteTransform: the chain rules check their continuity."""
    for batch in plan.batches:
        execute(deriv, batch)


@pytest.mark.parametrize(
    ("sizes", "limit", "expected"),
    [
        ([3, 3, 3, 3], 6, [[(0, 2), (3, 5)], [(6, 8), (9, 11)]]),
        ([3, 3, 3, 3], 7, [[(0, 2), (3, 5)], [(6, 8), (9, 11)]]),
        ([3, 3, 3, 3], 5, [[(0, 2)], [(3, 5)], [(6, 8)], [(9, 11)]]),
        ([3, 3, 3, 3], 12, [[(0, 2), (3, 5), (6, 8), (9, 11)]]),
        ([2, 10, 2], 5, [[(0, 1)], [(2, 11)], [(12, 13)]]),
        ([1, 1, 1, 1, 1], 2, [[(0, 0), (1, 1)], [(2, 2), (3, 3)], [(4, 4)]]),
    ],
)
def test_batching_by_record_limit_has_exact_contiguous_boundaries(
    repo: Repository, sizes: list[int], limit: int, expected: list[list[tuple[int, int]]]
) -> None:
    a = root(repo, "root.a")
    heads = [add_data(a, n) for n in sizes]
    deriv = derivative(repo, [("root.a", "a")])

    plan = plan_transform(repo, deriv, max_input_records=limit)

    assert not plan.up_to_date
    planned = [batch.inputs[0] for batch in plan.batches]
    assert [intervals(p) for p in planned] == expected
    ends = list(itertools.accumulate(sizes))
    for p in planned:
        assert p.new_block_hash == heads[ends.index(p.new_offset + 1)]
        assert p.num_records <= limit or len(p.slices) == 1
    assert planned[0].prev_block_hash is None and planned[-1].new_block_hash == heads[-1]
    for before, after in itertools.pairwise(planned):
        assert after.prev_block_hash == before.new_block_hash
        assert after.prev_offset == before.new_offset
    commit_all(deriv, plan)
    assert plan_transform(repo, deriv).up_to_date


def test_batching_keeps_metadata_and_watermark_blocks_in_the_running_batch(repo: Repository) -> None:
    a = root(repo, "root.a")
    h1 = add_data(a, 3)
    w = add_watermark(a, wm(1))
    h2 = add_data(a, 3)
    info = add_info(a, "tail")
    deriv = derivative(repo, [("root.a", "a")])

    first, second = (b.inputs[0] for b in plan_transform(repo, deriv, max_input_records=4).batches)

    assert first.new_block_hash == w and intervals(first) == [(0, 2)]
    assert [x.event_time for x in first.explicit_watermarks] == [wm(1)]
    assert second.prev_block_hash == w and second.new_block_hash == info and intervals(second) == [(3, 5)]
    assert h1 != w and h2 != info
    commit_all(deriv, plan_transform(repo, deriv, max_input_records=4))
    assert plan_transform(repo, deriv).up_to_date


# --------------------------------------------------------------------------------------------------
# several inputs
# --------------------------------------------------------------------------------------------------


def test_two_inputs_are_planned_in_set_transform_order(repo: Repository) -> None:
    a = root(repo, "root.a")
    b = root(repo, "root.b")
    add_data(a, 2)
    add_data(b, 3)
    deriv = derivative(repo, [("root.b", "bee"), ("root.a", "ay")])

    plan = plan_transform(repo, deriv)

    (batch,) = plan.batches
    assert [p.alias for p in batch.inputs] == ["bee", "ay"]
    ids = [b.state().dataset_id, a.state().dataset_id]
    assert [p.dataset_id for p in batch.inputs] == ids
    assert [qi.dataset_id for qi in batch.execute_inputs()] == ids
    assert [p.new_offset for p in batch.inputs] == [2, 1]
    execute(deriv, batch)

    a_head = add_data(a, 4)
    plan = plan_transform(repo, deriv)
    (batch,) = plan.batches
    bee, ay = batch.inputs
    assert (bee.new_block_hash, bee.new_offset, bee.slices) == (None, None, [])
    assert bee.prev_block_hash == b.head() and bee.prev_offset == 2
    assert intervals(ay) == [(2, 5)]
    assert batch.execute_inputs() == [
        model.ExecuteTransformInput(dataset_id=ids[0], prev_block_hash=b.head(), prev_offset=2),
        model.ExecuteTransformInput(
            dataset_id=ids[1],
            prev_block_hash=ay.prev_block_hash,
            new_block_hash=a_head,
            prev_offset=1,
            new_offset=5,
        ),
    ]
    execute(deriv, batch)
    assert plan_transform(repo, deriv).up_to_date


def test_batches_interleave_inputs_by_system_time(repo: Repository) -> None:
    a = root(repo, "root.a")
    b = root(repo, "root.b")
    b0 = b.head()  # Seed, SetVocab and SetDataSchema, older than any data block
    a1 = add_data(a, 2)  # data blocks alternate in time: a1, b1, a2, b2
    b1 = add_data(b, 2)
    a2 = add_data(a, 2)
    b2 = add_data(b, 2)
    deriv = derivative(repo, [("root.a", "a"), ("root.b", "b")])

    plan = plan_transform(repo, deriv, max_input_records=3)

    got = [
        [(p.prev_block_hash, p.new_block_hash, p.prev_offset, p.new_offset) for p in x.inputs]
        for x in plan.batches
    ]
    assert got == [
        [(None, a1, None, 1), (None, b0, None, None)],
        [(a1, None, 1, None), (b0, b1, None, 1)],
        [(a1, a2, 1, 3), (b1, None, 1, None)],
        [(a2, None, 3, None), (b1, b2, 1, 3)],
    ]
    commit_all(deriv, plan)
    assert plan_transform(repo, deriv).up_to_date

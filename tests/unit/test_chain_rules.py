"""Metadata chain rules (FORMAT-NOTES §B.7, INGEST-TRANSFORM-SEMANTICS §1.8, §2.4, §3), one rule at a time.

Every block is built with `model.MetadataBlock`, encoded with the real codec, hashed, and fed to
`apply_block`. For each rule there is a block that passes and blocks that fail; a failure must raise
`ChainRuleError` whose `.rule` names the rule. Valid sequences are folded and the resulting state
(offsets, watermark, checkpoint, source states, record count) is checked field by field.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_odf.odf.chain.rules import ChainState, apply_block
from airflow_odf.odf.errors import ChainRuleError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import block_hash, encode_block
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, DatasetId, Multihash, base58btc_encode
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.schema.evolution import SchemaEvolutionError, check_evolution

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
T1 = Timestamp.parse("2024-01-02T00:00:00Z")
T2 = Timestamp.parse("2024-01-03T00:00:00Z")
T3 = Timestamp.parse("2024-01-04T00:00:00Z")

ROOT_ID = DatasetId(bytes(range(32)))
DERIV_ID = DatasetId(bytes(range(32, 64)))
INPUT_A = DatasetId(bytes([0xA1] * 32))
INPUT_B = DatasetId(bytes([0xB2] * 32))

_CURRENT: Any = object()


def h(text: str) -> Multihash:
    return Multihash.sha3_256(text.encode())


def build(
    state: ChainState,
    event: Any,
    *,
    system_time: Timestamp | None = None,
    prev: Any = _CURRENT,
    seq: int | None = None,
) -> tuple[model.MetadataBlock, Multihash]:
    """The next block after `state` (correct links unless overridden) and the hash of its encoding."""
    block = model.MetadataBlock(
        system_time=system_time or state.system_time or T0,
        prev_block_hash=state.head if prev is _CURRENT else prev,
        sequence_number=state.sequence_number + 1 if seq is None else seq,
        event=event,
    )
    return block, block_hash(encode_block(block))


def append(state: ChainState, event: Any, **overrides: Any) -> ChainState:
    block, bh = build(state, event, **overrides)
    new = apply_block(state, block, bh)
    assert new.head == bh
    assert new.sequence_number == block.sequence_number
    assert new.system_time == block.system_time
    return new


def rejects(state: ChainState, event: Any, rule: str, **overrides: Any) -> ChainRuleError:
    block, bh = build(state, event, **overrides)
    with pytest.raises(ChainRuleError) as info:
        apply_block(state, block, bh)
    assert info.value.rule == rule, str(info.value)
    assert f"[rule: {rule}]" in str(info.value)
    return info.value


def seed(kind: model.DatasetKind = model.DatasetKind.ROOT) -> model.Seed:
    return model.Seed(dataset_id=ROOT_ID if kind is model.DatasetKind.ROOT else DERIV_ID, dataset_kind=kind)


def field(name: str, t: Any, extra: dict | None = None) -> model.DataField:
    return model.DataField(name=name, type=t, extra=extra)


def opt(t: Any) -> model.DataTypeOption:
    return model.DataTypeOption(inner=t)


def schema(*fields: model.DataField, extra: dict | None = None) -> model.SetDataSchema:
    return model.SetDataSchema(schema=model.DataSchema(fields=list(fields), extra=extra))


I64, STR = model.DataTypeInt64(), model.DataTypeString()
BASE_SCHEMA = schema(field("offset", I64), field("event_time", opt(STR)), field("value", I64))


def data_slice(start: int, end: int, size: int = 1000) -> model.DataSlice:
    return model.DataSlice(
        logical_hash=Multihash(ARROW0_SHA3_256, bytes(32)),
        physical_hash=h(f"data-{start}-{end}"),
        offset_interval=model.OffsetInterval(start=start, end=end),
        size=size,
    )


def sql(*steps: tuple[str | None, str]) -> model.TransformSql:
    return model.TransformSql(
        engine="spark", queries=[model.SqlQueryStep(alias=a, query=q) for a, q in steps]
    )


def transform_input(did: DatasetId, alias: str | None) -> model.TransformInput:
    return model.TransformInput(dataset_ref=str(did), alias=alias)


SET_TRANSFORM = model.SetTransform(
    inputs=[transform_input(INPUT_A, "a"), transform_input(INPUT_B, "b")],
    transform=sql((None, "select * from a union all select * from b")),
)
POLLING = model.SetPollingSource(
    fetch=model.FetchStepUrl(url="https://example.org/data.csv"),
    read=model.ReadStepCsv(header=True),
    merge=model.MergeStrategyAppend(),
)
PUSH = model.AddPushSource(
    source_name="api", read=model.ReadStepNdJson(), merge=model.MergeStrategyLedger(primary_key=["id"])
)


@pytest.fixture
def root() -> ChainState:
    return append(ChainState(), seed())


@pytest.fixture
def root_schema(root: ChainState) -> ChainState:
    return append(root, BASE_SCHEMA)


@pytest.fixture
def root_data(root_schema: ChainState) -> ChainState:
    """Offsets 0..9 written, watermark T1, checkpoint cp-1, source state of 'default'."""
    return append(
        root_schema,
        model.AddData(
            new_data=data_slice(0, 9),
            new_checkpoint=model.Checkpoint(physical_hash=h("cp-1"), size=10),
            new_watermark=T1,
            new_source_state=model.SourceState(source_name="default", kind="odf/etag", value="e1"),
        ),
    )


@pytest.fixture
def deriv() -> ChainState:
    return append(append(ChainState(), seed(model.DatasetKind.DERIVATIVE)), SET_TRANSFORM)


def qi(did: DatasetId, **kw: Any) -> model.ExecuteTransformInput:
    return model.ExecuteTransformInput(dataset_id=did, **kw)


@pytest.fixture
def deriv_ran(deriv: ChainState) -> ChainState:
    """One transform ran: A contributed blocks a1 and offsets 0..4, B only a block b1 (no records)."""
    return append(
        deriv,
        model.ExecuteTransform(
            query_inputs=[
                qi(INPUT_A, new_block_hash=h("a1"), new_offset=4),
                qi(INPUT_B, new_block_hash=h("b1")),
            ],
            new_watermark=T1,
        ),
    )


# --------------------------------------------------------------------------------------------------
# seed-first, seed-only-first, prev-block-hash, sequence-number, system-time-monotonic
# --------------------------------------------------------------------------------------------------


def test_seed_first_passes_and_sets_identity() -> None:
    block, bh = build(ChainState(), seed(), prev=None, seq=0)
    state = apply_block(ChainState(), block, bh)
    assert state.head == bh
    assert state.sequence_number == 0 and state.num_blocks == 1
    assert state.dataset_id == ROOT_ID
    assert state.kind is model.DatasetKind.ROOT
    assert state.system_time == T0
    assert state.last_offset is None and state.watermark is None and state.num_records == 0


def test_seed_first_rejects_another_event_first() -> None:
    rejects(ChainState(), model.SetInfo(description="x"), "seed-first", prev=None, seq=0)


def test_seed_first_rejects_seed_with_prev_hash() -> None:
    rejects(ChainState(), seed(), "seed-first", prev=h("somewhere"), seq=0)


def test_seed_first_rejects_seed_with_nonzero_sequence() -> None:
    rejects(ChainState(), seed(), "seed-first", prev=None, seq=1)


def test_seed_only_first(root: ChainState) -> None:
    rejects(root, seed(), "seed-only-first")
    rejects(root, seed(model.DatasetKind.DERIVATIVE), "seed-only-first")
    assert append(root, model.SetInfo(description="after the seed")).sequence_number == 1


def test_prev_block_hash(root: ChainState) -> None:
    rejects(root, model.SetInfo(), "prev-block-hash", prev=h("not-the-head"))
    rejects(root, model.SetInfo(), "prev-block-hash", prev=None)
    state = append(root, model.SetInfo())
    # a block linking to the Seed is no longer valid once the head moved on
    rejects(state, model.SetInfo(description="x"), "prev-block-hash", prev=root.head)
    assert append(state, model.SetInfo(description="x")).sequence_number == 2


@pytest.mark.parametrize("seq", [0, 2, 5])
def test_sequence_number_rejected(root: ChainState, seq: int) -> None:
    rejects(root, model.SetInfo(), "sequence-number", seq=seq)


def test_sequence_number_passes(root: ChainState) -> None:
    state = append(root, model.SetInfo(), seq=1)
    assert (
        append(state, model.SetLicense(short_name="x", name="X", website_url="https://x"), seq=2).num_blocks
        == 3
    )


def test_system_time_equal_passes(root: ChainState) -> None:
    state = append(root, model.SetInfo(description="same time"), system_time=T0)
    assert state.system_time == T0


def test_system_time_later_passes(root: ChainState) -> None:
    assert append(root, model.SetInfo(), system_time=T1).system_time == T1


def test_system_time_earlier_fails(root: ChainState) -> None:
    later = append(root, model.SetInfo(), system_time=T1)
    one_ns_before = Timestamp(T1.seconds - 1, 999_999_999)
    rejects(later, model.SetInfo(description="x"), "system-time-monotonic", system_time=one_ns_before)
    rejects(later, model.SetInfo(description="x"), "system-time-monotonic", system_time=T0)


# --------------------------------------------------------------------------------------------------
# dataset-kind
# --------------------------------------------------------------------------------------------------

ROOT_ONLY = {
    "SetPollingSource": POLLING,
    "AddPushSource": PUSH,
    "AddData": model.AddData(new_watermark=T1),
    "DisablePollingSource": model.DisablePollingSource(),
    "DisablePushSource": model.DisablePushSource(source_name="api"),
}
DERIVATIVE_ONLY = {
    "SetTransform": SET_TRANSFORM,
    "ExecuteTransform": model.ExecuteTransform(query_inputs=[qi(INPUT_A, new_block_hash=h("a1"))]),
}


@pytest.mark.parametrize("name", list(ROOT_ONLY))
def test_dataset_kind_root_only_events_rejected_on_derivative(deriv: ChainState, name: str) -> None:
    error = rejects(deriv, ROOT_ONLY[name], "dataset-kind")
    assert name in str(error) and "Root" in str(error)


@pytest.mark.parametrize("name", list(DERIVATIVE_ONLY))
def test_dataset_kind_derivative_only_events_rejected_on_root(root: ChainState, name: str) -> None:
    error = rejects(root, DERIVATIVE_ONLY[name], "dataset-kind")
    assert name in str(error) and "Derivative" in str(error)


def test_dataset_kind_passes_on_the_right_kind(root: ChainState) -> None:
    state = append(root, POLLING)
    assert state.polling_source == POLLING
    state = append(state, PUSH)
    assert state.push_sources == {"api": PUSH}
    deriv = append(append(ChainState(), seed(model.DatasetKind.DERIVATIVE)), SET_TRANSFORM)
    assert deriv.transform == SET_TRANSFORM
    assert deriv.kind is model.DatasetKind.DERIVATIVE


# --------------------------------------------------------------------------------------------------
# prev-checkpoint, prev-offset, schema-before-data, offsets-contiguous, watermark-monotonic
# --------------------------------------------------------------------------------------------------


def test_prev_checkpoint_first_must_be_absent(root_schema: ChainState) -> None:
    rejects(root_schema, model.AddData(prev_checkpoint=h("cp-0"), new_watermark=T1), "prev-checkpoint")


def test_prev_checkpoint_must_be_the_last_checkpoint(root_data: ChainState) -> None:
    assert root_data.checkpoint == model.Checkpoint(physical_hash=h("cp-1"), size=10)
    rejects(root_data, model.AddData(prev_offset=9, new_watermark=T2), "prev-checkpoint")
    rejects(
        root_data,
        model.AddData(prev_checkpoint=h("cp-x"), prev_offset=9, new_watermark=T2),
        "prev-checkpoint",
    )
    state = append(root_data, model.AddData(prev_checkpoint=h("cp-1"), prev_offset=9, new_watermark=T2))
    # a data event without a new checkpoint carries the previous one forward
    assert state.checkpoint == root_data.checkpoint
    state = append(
        state,
        model.AddData(
            prev_checkpoint=h("cp-1"),
            prev_offset=9,
            new_checkpoint=model.Checkpoint(physical_hash=h("cp-2"), size=20),
            new_watermark=T2,
        ),
    )
    assert state.checkpoint == model.Checkpoint(physical_hash=h("cp-2"), size=20)
    rejects(
        state, model.AddData(prev_checkpoint=h("cp-1"), prev_offset=9, new_watermark=T3), "prev-checkpoint"
    )


def test_prev_offset_first_must_be_absent(root_schema: ChainState) -> None:
    rejects(root_schema, model.AddData(prev_offset=0, new_data=data_slice(1, 5)), "prev-offset")


@pytest.mark.parametrize("prev_offset", [None, 8, 10])
def test_prev_offset_must_be_the_last_offset(root_data: ChainState, prev_offset: int | None) -> None:
    event = model.AddData(
        prev_checkpoint=h("cp-1"), prev_offset=prev_offset, new_data=data_slice(10, 19), new_watermark=T1
    )
    rejects(root_data, event, "prev-offset")


def test_prev_offset_passes(root_data: ChainState) -> None:
    event = model.AddData(
        prev_checkpoint=h("cp-1"), prev_offset=9, new_data=data_slice(10, 19), new_watermark=T1
    )
    state = append(root_data, event)
    assert state.last_offset == 19 and state.num_records == 20


def test_schema_before_data_rejects_data_without_schema(root: ChainState) -> None:
    rejects(root, model.AddData(new_data=data_slice(0, 9)), "schema-before-data")


def test_schema_before_data_allows_dataless_add_data(root: ChainState) -> None:
    state = append(root, model.AddData(new_watermark=T1))
    assert state.watermark == T1 and state.last_offset is None and state.schema is None


def test_schema_before_data_execute_transform(deriv: ChainState) -> None:
    event = model.ExecuteTransform(
        query_inputs=[qi(INPUT_A, new_block_hash=h("a1"), new_offset=4), qi(INPUT_B)],
        new_data=data_slice(0, 4),
    )
    rejects(deriv, event, "schema-before-data")
    state = append(append(deriv, BASE_SCHEMA), event)
    assert state.last_offset == 4 and state.num_records == 5


@pytest.mark.parametrize("start", [1, 5])
def test_offsets_contiguous_first_slice_starts_at_zero(root_schema: ChainState, start: int) -> None:
    rejects(root_schema, model.AddData(new_data=data_slice(start, start + 5)), "offsets-contiguous")


def test_offsets_contiguous_first_slice_passes(root_schema: ChainState) -> None:
    state = append(root_schema, model.AddData(new_data=data_slice(0, 0, size=7)))
    assert state.last_offset == 0 and state.num_records == 1 and state.data_size == 7


@pytest.mark.parametrize("start", [0, 9, 11, 100])
def test_offsets_contiguous_next_slice_starts_after_last(root_data: ChainState, start: int) -> None:
    event = model.AddData(
        prev_checkpoint=h("cp-1"), prev_offset=9, new_data=data_slice(start, start + 10), new_watermark=T1
    )
    rejects(root_data, event, "offsets-contiguous")


def test_offsets_contiguous_end_before_start(root_data: ChainState) -> None:
    event = model.AddData(
        prev_checkpoint=h("cp-1"), prev_offset=9, new_data=data_slice(10, 9), new_watermark=T1
    )
    rejects(root_data, event, "offsets-contiguous")


def test_watermark_decrease_fails(root_data: ChainState) -> None:
    event = model.AddData(prev_checkpoint=h("cp-1"), prev_offset=9, new_watermark=T0)
    rejects(root_data, event, "watermark-monotonic")


def test_watermark_removal_fails(root_data: ChainState) -> None:
    event = model.AddData(prev_checkpoint=h("cp-1"), prev_offset=9, new_data=data_slice(10, 10))
    rejects(root_data, event, "watermark-monotonic")


def test_watermark_equal_or_later_passes(root_data: ChainState) -> None:
    same = append(
        root_data,
        model.AddData(
            prev_checkpoint=h("cp-1"), prev_offset=9, new_data=data_slice(10, 10), new_watermark=T1
        ),
    )
    assert same.watermark == T1
    later = append(same, model.AddData(prev_checkpoint=h("cp-1"), prev_offset=10, new_watermark=T2))
    assert later.watermark == T2 and later.last_offset == 10


def test_watermark_monotonic_in_execute_transform(deriv_ran: ChainState) -> None:
    back = model.ExecuteTransform(
        query_inputs=[
            qi(INPUT_A, prev_block_hash=h("a1"), prev_offset=4, new_block_hash=h("a2")),
            qi(INPUT_B, prev_block_hash=h("b1")),
        ],
        new_watermark=T0,
    )
    rejects(deriv_ran, back, "watermark-monotonic")
    removed = model.ExecuteTransform(query_inputs=back.query_inputs)
    rejects(deriv_ran, removed, "watermark-monotonic")


# --------------------------------------------------------------------------------------------------
# no-op
# --------------------------------------------------------------------------------------------------


def test_no_op_empty_add_data(root_schema: ChainState) -> None:
    rejects(root_schema, model.AddData(), "no-op")


def test_no_op_add_data_with_nothing_new(root_data: ChainState) -> None:
    same = model.SourceState(source_name="default", kind="odf/etag", value="e1")
    rejects(
        root_data,
        model.AddData(prev_checkpoint=h("cp-1"), prev_offset=9, new_watermark=T1, new_source_state=same),
        "no-op",
    )
    rejects(root_data, model.AddData(prev_checkpoint=h("cp-1"), prev_offset=9, new_watermark=T1), "no-op")


def test_source_state_change_alone_is_not_a_no_op(root_data: ChainState) -> None:
    new = model.SourceState(source_name="default", kind="odf/etag", value="e2")
    state = append(
        root_data,
        model.AddData(prev_checkpoint=h("cp-1"), prev_offset=9, new_watermark=T1, new_source_state=new),
    )
    assert state.source_states == {"default": new}
    assert state.last_offset == 9 and state.num_records == 10


def test_no_op_execute_transform_advancing_nothing(deriv_ran: ChainState) -> None:
    nothing = model.ExecuteTransform(
        query_inputs=[
            qi(INPUT_A, prev_block_hash=h("a1"), prev_offset=4),
            qi(INPUT_B, prev_block_hash=h("b1")),
        ],
        new_watermark=T1,
    )
    rejects(deriv_ran, nothing, "no-op")
    # the same event advancing only one input block is fine
    one = model.ExecuteTransform(
        query_inputs=[
            qi(INPUT_A, prev_block_hash=h("a1"), prev_offset=4),
            qi(INPUT_B, prev_block_hash=h("b1"), new_block_hash=h("b2")),
        ],
        new_watermark=T1,
    )
    state = append(deriv_ran, one)
    assert state.transform_inputs[str(INPUT_B)].new_block_hash == h("b2")
    assert state.transform_inputs[str(INPUT_A)].new_block_hash == h("a1")


# --------------------------------------------------------------------------------------------------
# set-transform
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def deriv_seed() -> ChainState:
    return append(ChainState(), seed(model.DatasetKind.DERIVATIVE))


def test_set_transform_needs_inputs(deriv_seed: ChainState) -> None:
    rejects(deriv_seed, model.SetTransform(inputs=[], transform=sql((None, "select 1"))), "set-transform")


def test_set_transform_rejects_duplicate_inputs(deriv_seed: ChainState) -> None:
    event = model.SetTransform(
        inputs=[transform_input(INPUT_A, "a"), transform_input(INPUT_A, "a2")],
        transform=sql((None, "select * from a")),
    )
    rejects(deriv_seed, event, "set-transform")


@pytest.mark.parametrize(
    "ref, alias",
    [
        ("player-scores", "player_scores"),
        ("kamu/player-scores", "s"),
        (str(INPUT_A), None),
        (str(INPUT_A), ""),
    ],
    ids=["name-not-resolved", "alias-not-resolved", "missing-alias", "empty-alias"],
)
def test_set_transform_inputs_resolved_with_alias(
    deriv_seed: ChainState, ref: str, alias: str | None
) -> None:
    event = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref=ref, alias=alias)], transform=sql((None, "select 1"))
    )
    rejects(deriv_seed, event, "set-transform")


@pytest.mark.parametrize(
    "transform",
    [
        model.TransformSql(engine="spark", query="select * from a"),
        model.TransformSql(
            engine="spark", query="select * from a", queries=[model.SqlQueryStep(query="select * from a")]
        ),
        model.TransformSql(engine="spark"),
        model.TransformSql(engine="spark", queries=[]),
    ],
    ids=["query-only", "query-and-queries", "neither", "empty-queries"],
)
def test_set_transform_query_must_be_normalised(
    deriv_seed: ChainState, transform: model.TransformSql
) -> None:
    event = model.SetTransform(inputs=[transform_input(INPUT_A, "a")], transform=transform)
    rejects(deriv_seed, event, "set-transform")


@pytest.mark.parametrize(
    "steps",
    [
        [("a", "select 1")],
        [("x", "select 1"), ("y", "select * from x")],
        [(None, "select 1"), (None, "select 2")],
    ],
    ids=["single-with-alias", "last-with-alias", "first-without-alias"],
)
def test_set_transform_alias_rules(deriv_seed: ChainState, steps: list) -> None:
    event = model.SetTransform(inputs=[transform_input(INPUT_A, "a")], transform=sql(*steps))
    rejects(deriv_seed, event, "set-transform")


def test_set_transform_multi_step_passes(deriv_seed: ChainState) -> None:
    event = model.SetTransform(
        inputs=[transform_input(INPUT_A, "a"), transform_input(INPUT_B, "b")],
        transform=sql(("x", "select * from a"), ("y", "select * from b"), (None, "select * from x join y")),
    )
    state = append(deriv_seed, event)
    assert state.transform == event
    assert [i.dataset_ref for i in state.transform.inputs] == [str(INPUT_A), str(INPUT_B)]


def test_set_transform_rejects_malformed_did(deriv_seed: ChainState) -> None:
    event = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref="did:odf:not-a-did", alias="x")],
        transform=sql((None, "select * from x")),
    )
    rejects(deriv_seed, event, "set-transform")


# --------------------------------------------------------------------------------------------------
# ExecuteTransform: transform-before-execute, query-inputs
# --------------------------------------------------------------------------------------------------


def test_execute_transform_needs_set_transform(deriv_seed: ChainState) -> None:
    event = model.ExecuteTransform(query_inputs=[qi(INPUT_A, new_block_hash=h("a1"))])
    rejects(deriv_seed, event, "transform-before-execute")


@pytest.mark.parametrize(
    "inputs",
    [
        [qi(INPUT_B, new_block_hash=h("b1")), qi(INPUT_A, new_block_hash=h("a1"))],
        [qi(INPUT_A, new_block_hash=h("a1"))],
        [qi(INPUT_A, new_block_hash=h("a1")), qi(INPUT_B), qi(ROOT_ID, new_block_hash=h("r1"))],
        [qi(INPUT_A, new_block_hash=h("a1")), qi(ROOT_ID, new_block_hash=h("r1"))],
        [],
    ],
    ids=["swapped", "missing", "extra", "foreign", "none"],
)
def test_query_inputs_must_be_the_set_transform_inputs_in_order(deriv: ChainState, inputs: list) -> None:
    rejects(deriv, model.ExecuteTransform(query_inputs=inputs, new_watermark=T1), "query-inputs")


def test_query_inputs_first_execution_passes(deriv_ran: ChainState) -> None:
    assert deriv_ran.watermark == T1
    assert deriv_ran.transform_inputs == {
        str(INPUT_A): qi(INPUT_A, new_block_hash=h("a1"), new_offset=4),
        str(INPUT_B): qi(INPUT_B, new_block_hash=h("b1")),
    }
    assert deriv_ran.last_offset is None and deriv_ran.num_records == 0


def test_query_inputs_prev_block_hash(deriv_ran: ChainState) -> None:
    wrong = model.ExecuteTransform(
        query_inputs=[
            qi(INPUT_A, prev_block_hash=h("a0"), prev_offset=4, new_block_hash=h("a2")),
            qi(INPUT_B, prev_block_hash=h("b1")),
        ],
        new_watermark=T1,
    )
    rejects(deriv_ran, wrong, "query-inputs")
    missing = model.ExecuteTransform(
        query_inputs=[
            qi(INPUT_A, prev_offset=4, new_block_hash=h("a2")),
            qi(INPUT_B, prev_block_hash=h("b1")),
        ],
        new_watermark=T1,
    )
    rejects(deriv_ran, missing, "query-inputs")


def test_query_inputs_prev_offset(deriv_ran: ChainState) -> None:
    for prev_offset in (None, 3, 5):
        event = model.ExecuteTransform(
            query_inputs=[
                qi(INPUT_A, prev_block_hash=h("a1"), prev_offset=prev_offset, new_block_hash=h("a2")),
                qi(INPUT_B, prev_block_hash=h("b1")),
            ],
            new_watermark=T1,
        )
        rejects(deriv_ran, event, "query-inputs")
    # B contributed no records so far: its prevOffset must stay absent
    event = model.ExecuteTransform(
        query_inputs=[
            qi(INPUT_A, prev_block_hash=h("a1"), prev_offset=4),
            qi(INPUT_B, prev_block_hash=h("b1"), prev_offset=0, new_block_hash=h("b2"), new_offset=3),
        ],
        new_watermark=T1,
    )
    rejects(deriv_ran, event, "query-inputs")


def test_query_inputs_new_offset_requires_new_block_hash(deriv: ChainState) -> None:
    event = model.ExecuteTransform(query_inputs=[qi(INPUT_A, new_offset=4), qi(INPUT_B)], new_watermark=T1)
    error = rejects(deriv, event, "query-inputs")
    assert "newOffset requires newBlockHash" in str(error)


def test_query_inputs_new_equal_to_prev(deriv_ran: ChainState) -> None:
    same_block = model.ExecuteTransform(
        query_inputs=[
            qi(INPUT_A, prev_block_hash=h("a1"), prev_offset=4, new_block_hash=h("a1")),
            qi(INPUT_B, prev_block_hash=h("b1")),
        ],
        new_watermark=T2,
    )
    assert "newBlockHash equals prevBlockHash" in str(rejects(deriv_ran, same_block, "query-inputs"))
    same_offset = model.ExecuteTransform(
        query_inputs=[
            qi(INPUT_A, prev_block_hash=h("a1"), prev_offset=4, new_block_hash=h("a2"), new_offset=4),
            qi(INPUT_B, prev_block_hash=h("b1")),
        ],
        new_watermark=T2,
    )
    assert "newOffset equals prevOffset" in str(rejects(deriv_ran, same_offset, "query-inputs"))


def test_query_inputs_second_execution_passes(deriv_ran: ChainState) -> None:
    state = append(deriv_ran, BASE_SCHEMA)
    event = model.ExecuteTransform(
        query_inputs=[
            qi(INPUT_A, prev_block_hash=h("a1"), prev_offset=4, new_block_hash=h("a2"), new_offset=9),
            qi(INPUT_B, prev_block_hash=h("b1"), new_block_hash=h("b2"), new_offset=2),
        ],
        new_data=data_slice(0, 7, size=300),
        new_checkpoint=model.Checkpoint(physical_hash=h("t-cp-1"), size=33),
        new_watermark=T2,
    )
    state = append(state, event)
    assert state.transform_inputs[str(INPUT_A)] == event.query_inputs[0]
    assert state.transform_inputs[str(INPUT_B)] == event.query_inputs[1]
    assert (state.last_offset, state.num_records, state.data_size) == (7, 8, 300)
    assert state.checkpoint == model.Checkpoint(physical_hash=h("t-cp-1"), size=33)
    assert state.watermark == T2
    # the third run must continue from the second one's values, and link the checkpoint
    third = model.ExecuteTransform(
        query_inputs=[
            qi(INPUT_A, prev_block_hash=h("a2"), prev_offset=9),
            qi(INPUT_B, prev_block_hash=h("b2"), prev_offset=2, new_block_hash=h("b3"), new_offset=5),
        ],
        prev_checkpoint=h("t-cp-1"),
        prev_offset=7,
        new_data=data_slice(8, 10, size=100),
        new_watermark=T2,
    )
    state = append(state, third)
    assert (state.last_offset, state.num_records, state.data_size) == (10, 11, 400)
    # the same event again: its inputs' prev values are now stale
    rejects(state, third, "query-inputs")


def test_query_inputs_match_dids_by_identity(deriv_seed: ChainState) -> None:
    z_form = "did:odf:z" + base58btc_encode(INPUT_A.as_bytes())
    assert DatasetId.parse(z_form) == INPUT_A
    state = append(
        deriv_seed,
        model.SetTransform(
            inputs=[model.TransformInput(dataset_ref=z_form, alias="a")],
            transform=sql((None, "select * from a")),
        ),
    )
    state = append(state, model.ExecuteTransform(query_inputs=[qi(INPUT_A, new_block_hash=h("a1"))]))
    assert state.transform_inputs


# --------------------------------------------------------------------------------------------------
# disable-source
# --------------------------------------------------------------------------------------------------


def test_disable_polling_source(root: ChainState) -> None:
    rejects(root, model.DisablePollingSource(), "disable-source")
    state = append(root, POLLING)
    state = append(state, model.DisablePollingSource())
    assert state.polling_source is None
    rejects(state, model.DisablePollingSource(), "disable-source")


def test_disable_push_source(root: ChainState) -> None:
    rejects(root, model.DisablePushSource(source_name="api"), "disable-source")
    other = model.AddPushSource(
        source_name="other", read=model.ReadStepParquet(), merge=model.MergeStrategyAppend()
    )
    state = append(append(root, PUSH), other)
    assert set(state.push_sources) == {"api", "other"}
    rejects(state, model.DisablePushSource(source_name="API"), "disable-source")
    state = append(state, model.DisablePushSource(source_name="api"))
    assert state.push_sources == {"other": other}
    rejects(state, model.DisablePushSource(source_name="api"), "disable-source")


# --------------------------------------------------------------------------------------------------
# set-data-schema and schema evolution
# --------------------------------------------------------------------------------------------------


def test_set_data_schema_needs_a_schema(root: ChainState) -> None:
    rejects(root, model.SetDataSchema(), "set-data-schema")


def test_first_schema_is_recorded(root: ChainState) -> None:
    assert append(root, BASE_SCHEMA).schema == BASE_SCHEMA


def test_identical_schema_is_rejected(root_schema: ChainState) -> None:
    error = rejects(root_schema, BASE_SCHEMA, "schema-evolution")
    assert isinstance(error, SchemaEvolutionError)
    assert error.changes == []
    same_again = schema(field("offset", I64), field("event_time", opt(STR)), field("value", I64))
    assert isinstance(rejects(root_schema, same_again, "schema-evolution"), SchemaEvolutionError)


ALLOWED = {
    "new-optional-column": (
        schema(
            field("offset", I64), field("event_time", opt(STR)), field("value", I64), field("note", opt(STR))
        ),
        [("note", "optional-column-added", None, "Option<String>")],
    ),
    "reordered": (
        schema(field("value", I64), field("offset", I64), field("event_time", opt(STR))),
        [("*", "columns-reordered", None, None)],
    ),
    "field-attribute": (
        schema(
            field("offset", I64),
            field("event_time", opt(STR)),
            field("value", I64, {"opendatafabric.org/description": "the value"}),
        ),
        [("value", "attributes-changed", "Int64", "Int64")],
    ),
    "schema-attribute": (
        schema(
            field("offset", I64),
            field("event_time", opt(STR)),
            field("value", I64),
            extra={"kamu.dev/archetype": "Collection"},
        ),
        [("*", "attributes-changed", None, None)],
    ),
    "reordered-and-new-optional": (
        schema(
            field("note", opt(I64)), field("value", I64), field("event_time", opt(STR)), field("offset", I64)
        ),
        [("note", "optional-column-added", None, "Option<Int64>"), ("*", "columns-reordered", None, None)],
    ),
}


@pytest.mark.parametrize("case", list(ALLOWED))
def test_schema_evolution_allowed(root_schema: ChainState, case: str) -> None:
    new, expected = ALLOWED[case]
    changes = check_evolution(root_schema.schema, new)
    assert [(c.column, c.rule, c.old, c.new) for c in changes] == expected
    assert all(c.allowed for c in changes)
    state = append(root_schema, new)
    assert state.schema == new
    # data may follow the evolved schema
    state = append(state, model.AddData(new_data=data_slice(0, 3)))
    assert state.last_offset == 3


DENIED = {
    "removed-column": (
        schema(field("offset", I64), field("event_time", opt(STR))),
        [("value", "column-removed", "Int64", None)],
    ),
    "changed-type": (
        schema(field("offset", I64), field("event_time", opt(STR)), field("value", STR)),
        [("value", "type-changed", "Int64", "String")],
    ),
    "became-optional": (
        schema(field("offset", I64), field("event_time", opt(STR)), field("value", opt(I64))),
        [("value", "became-optional", "Int64", "Option<Int64>")],
    ),
    "became-required": (
        schema(field("offset", I64), field("event_time", STR), field("value", I64)),
        [("event_time", "became-required", "Option<String>", "String")],
    ),
    "new-required-column": (
        schema(field("offset", I64), field("event_time", opt(STR)), field("value", I64), field("extra", I64)),
        [("extra", "required-column-added", None, "Int64")],
    ),
    "changed-type-inside-option": (
        schema(field("offset", I64), field("event_time", opt(I64)), field("value", I64)),
        [("event_time", "type-changed", "Option<String>", "Option<Int64>")],
    ),
}


@pytest.mark.parametrize("case", list(DENIED))
def test_schema_evolution_denied(root_schema: ChainState, case: str) -> None:
    new, expected = DENIED[case]
    error = rejects(root_schema, new, "schema-evolution")
    assert isinstance(error, SchemaEvolutionError)
    denied = [(c.column, c.rule, c.old, c.new) for c in error.changes if not c.allowed]
    assert denied == expected
    for column, rule, _, _ in expected:
        assert f"{column}:" in str(error) and rule in str(error)


def test_schema_evolution_diff_lists_allowed_and_denied_changes(root_schema: ChainState) -> None:
    new = schema(field("value", STR), field("offset", I64), field("note", opt(STR)))
    error = rejects(root_schema, new, "schema-evolution")
    assert isinstance(error, SchemaEvolutionError)
    got = {(c.column, c.rule, c.allowed) for c in error.changes}
    assert got == {
        ("event_time", "column-removed", False),
        ("value", "type-changed", False),
        ("note", "optional-column-added", True),
        ("*", "columns-reordered", True),
    }


def test_schema_evolution_after_legacy_raw_arrow_ignores_optionality(root: ChainState) -> None:
    pa = pytest.importorskip("pyarrow")
    from airflow_odf.odf.schema.raw_arrow import encode_raw_arrow_schema

    raw = model.SetDataSchema(
        raw_arrow_schema=encode_raw_arrow_schema(pa.schema([pa.field("value", pa.int64(), nullable=True)]))
    )
    state = append(root, raw)
    # Arrow could not express optionality reliably: a required column is an allowed migration
    migrated = schema(field("value", I64))
    changes = check_evolution(state.schema, migrated)
    assert [(c.column, c.rule, c.allowed) for c in changes] == [("value", "became-required", True)]
    assert append(state, migrated).schema == migrated
    # ... but a changed type is still denied
    rejects(state, schema(field("value", STR)), "schema-evolution")


# --------------------------------------------------------------------------------------------------
# the state after valid sequences
# --------------------------------------------------------------------------------------------------


def test_state_after_a_root_sequence() -> None:
    s1 = model.SourceState(source_name="default", kind="odf/etag", value='"v1"')
    s2 = model.SourceState(source_name="api", kind="odf/last-modified", value="2024-01-02")
    s3 = model.SourceState(source_name="default", kind="odf/etag", value='"v2"')
    cp1 = model.Checkpoint(physical_hash=h("cp-1"), size=64)
    events = [
        seed(),
        POLLING,
        PUSH,
        model.SetVocab(event_time_column="event_time"),
        BASE_SCHEMA,
        model.SetInfo(description="a root", keywords=["x"]),
        model.AddData(
            new_data=data_slice(0, 9, 1000), new_watermark=T1, new_source_state=s1, new_checkpoint=cp1
        ),
        model.AddData(
            prev_checkpoint=h("cp-1"),
            prev_offset=9,
            new_data=data_slice(10, 14, 500),
            new_watermark=T1,
            new_source_state=s2,
        ),
        model.AddData(prev_checkpoint=h("cp-1"), prev_offset=14, new_watermark=T2),
        model.AddData(prev_checkpoint=h("cp-1"), prev_offset=14, new_watermark=T2, new_source_state=s3),
        model.SetInfo(description="still a root"),
    ]
    state = ChainState()
    hashes = []
    for i, event in enumerate(events):
        state = append(state, event, system_time=Timestamp(T0.seconds + i))
        hashes.append(state.head)
    assert len(set(hashes)) == len(events)
    assert state.head == hashes[-1]
    assert state.sequence_number == len(events) - 1 and state.num_blocks == len(events)
    assert state.system_time == Timestamp(T0.seconds + len(events) - 1)
    assert state.dataset_id == ROOT_ID and state.kind is model.DatasetKind.ROOT
    assert state.last_offset == 14
    assert state.num_records == 15
    assert state.data_size == 1500
    assert state.watermark == T2
    assert state.checkpoint == cp1
    assert state.source_states == {"default": s3, "api": s2}
    assert state.polling_source == POLLING and state.push_sources == {"api": PUSH}
    assert state.vocab == model.SetVocab(event_time_column="event_time")
    assert state.schema == BASE_SCHEMA
    assert state.info == model.SetInfo(description="still a root")
    assert state.latest_event(model.SetInfo) == state.info
    assert state.latest_event(model.SetPollingSource) == POLLING
    assert state.transform is None and state.transform_inputs == {}


def test_same_event_in_a_different_position_has_a_different_hash(root: ChainState) -> None:
    a = append(root, model.SetInfo(description="x"))
    b = append(a, model.SetInfo(description="x"))
    assert a.head != b.head
    assert a.info == b.info

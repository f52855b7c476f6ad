"""The metadata chain's rules, enforced on every append, and the dataset state they fold into.

`ChainState` is everything an operation needs to know about a dataset (head, kind, vocab, schema,
active sources, last offset, watermark, checkpoint, source states, transform inputs, the index of its
data slices) — the result of folding the chain's blocks oldest first. `apply_block` checks one new
block against the state with the reference implementation's validators (FORMAT-NOTES §B.7,
INGEST-TRANSFORM-SEMANTICS §1.8, §2.4) and returns the next state; a rejected block raises
`ChainRuleError` naming the rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from airflow_odf.odf.errors import ChainRuleError, OdfFormatError, quoted
from airflow_odf.odf.format import model
from airflow_odf.odf.format.fields import METADATA_EVENT
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.format.schema_bounds import schema_problem
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.schema.evolution import check_evolution, odf_schema


class SliceIndex:
    """The physical hashes of a dataset's data slices (the `newData` of AddData and ExecuteTransform),
    oldest first: what an ingest hands the engine to rebuild a merge state, known without walking the
    chain.

    It lives in the summary, one multibase text per slice (about 70 bytes for a 32-byte SHA3-256 hash),
    so 100,000 slices add about 7 MB to it — small next to the slices themselves. Hashes are kept in
    text form, parsed only when iterated (reading the summary parses none), and appending shares the
    ones already there (a chunk list), so folding a long chain stays linear.
    """

    __slots__ = ("_before", "_chunk", "_len")

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self._before: SliceIndex | None = None
        self._chunk: tuple[str, ...] = tuple(texts)
        self._len = len(self._chunk)

    def append(self, physical_hash: Multihash) -> SliceIndex:
        """A new index with one more slice; this one is unchanged."""
        index = SliceIndex((str(physical_hash),))
        if self._len:
            index._before, index._len = self, self._len + 1
        return index

    def texts(self) -> list[str]:
        """The hashes in text form, oldest first (the summary's form)."""
        chunks: list[tuple[str, ...]] = []
        node: SliceIndex | None = self
        while node is not None:
            chunks.append(node._chunk)
            node = node._before
        return [text for chunk in reversed(chunks) for text in chunk]

    def __iter__(self) -> Iterator[Multihash]:
        return (Multihash.parse(text) for text in self.texts())

    def __len__(self) -> int:
        return self._len

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SliceIndex):
            return NotImplemented
        return self._len == other._len and self.texts() == other.texts()

    def __hash__(self) -> int:
        return hash(tuple(self.texts()))

    def __repr__(self) -> str:
        return f"SliceIndex({self.texts()!r})"


@dataclass(frozen=True)
class ChainState:
    """A dataset's state after its last block. Empty (`head is None`) before the Seed."""

    head: Multihash | None = None
    sequence_number: int = -1
    system_time: Timestamp | None = None
    dataset_id: DatasetId | None = None
    kind: model.DatasetKind | None = None
    vocab: model.SetVocab | None = None
    schema: model.SetDataSchema | None = None
    polling_source: model.SetPollingSource | None = None
    push_sources: dict[str, model.AddPushSource] = field(default_factory=dict)
    transform: model.SetTransform | None = None
    info: model.SetInfo | None = None
    license: model.SetLicense | None = None
    attachments: model.SetAttachments | None = None
    last_offset: int | None = None
    watermark: Timestamp | None = None
    checkpoint: model.Checkpoint | None = None
    source_states: dict[str, model.SourceState] = field(default_factory=dict)
    transform_inputs: dict[str, model.ExecuteTransformInput] = field(default_factory=dict)
    num_records: int = 0
    data_size: int = 0
    data_slices: SliceIndex = field(default_factory=SliceIndex)
    # the checkpoint recorded by the block of the last data slice (None: that block recorded none)
    data_checkpoint: Multihash | None = None

    @property
    def num_blocks(self) -> int:
        return self.sequence_number + 1

    @property
    def checkpoint_is_current(self) -> bool:
        """Whether the checkpoint is as of all the data: recorded with the last slice. Our ingests put
        it on the block of the last slice; data added later without one (by another tool) makes it
        stale."""
        return self.checkpoint is not None and self.data_checkpoint == self.checkpoint.physical_hash

    def without_data(self) -> ChainState:
        """The state a chain of this one's metadata alone has: no data, offsets, checkpoint, watermark or
        transform progress (what a derivative rebuilt from scratch starts from)."""
        return dataclasses.replace(
            self,
            last_offset=None,
            checkpoint=None,
            watermark=None,
            transform_inputs={},
            data_slices=SliceIndex(),
            data_checkpoint=None,
        )

    def latest_event(self, cls: type) -> Any:
        """The current value of a "set" event kind (SetVocab, SetInfo, ...), or None."""
        return {
            model.SetVocab: self.vocab,
            model.SetDataSchema: self.schema,
            model.SetPollingSource: self.polling_source,
            model.SetTransform: self.transform,
            model.SetInfo: self.info,
            model.SetLicense: self.license,
            model.SetAttachments: self.attachments,
        }.get(cls)


def _fail(rule: str, message: str) -> ChainRuleError:
    return ChainRuleError(rule, message)


def _check_link(state: ChainState, block: model.MetadataBlock) -> None:
    is_seed = isinstance(block.event, model.Seed)
    if state.head is None:
        if not is_seed:
            raise _fail("seed-first", "the first block of a dataset must be a Seed")
        if block.prev_block_hash is not None or block.sequence_number != 0:
            raise _fail("seed-first", "the Seed has no previous block and sequence number 0")
        return
    if is_seed:
        raise _fail("seed-only-first", "a Seed may only be the first block")
    if block.prev_block_hash != state.head:
        raise _fail(
            "prev-block-hash",
            f"prevBlockHash must be the current head {state.head}, got {block.prev_block_hash}",
        )
    if block.sequence_number != state.sequence_number + 1:
        raise _fail(
            "sequence-number",
            f"sequenceNumber must be {state.sequence_number + 1}, got {block.sequence_number}",
        )
    assert state.system_time is not None
    if block.system_time < state.system_time:
        raise _fail(
            "system-time-monotonic",
            f"systemTime {block.system_time} is before the previous block's {state.system_time}",
        )


def _check_kind(state: ChainState, event: Any, allowed: model.DatasetKind) -> None:
    if state.kind is not allowed:
        name = METADATA_EVENT.tag(type(event))
        raise _fail("dataset-kind", f"{name} is only allowed on {allowed.name.capitalize()} datasets")


def _check_data(state: ChainState, event: model.AddData | model.ExecuteTransform) -> None:
    """Offsets, checkpoint linkage, watermark monotonicity, schema before data."""
    prev_checkpoint = state.checkpoint.physical_hash if state.checkpoint else None
    if event.prev_checkpoint != prev_checkpoint:
        raise _fail(
            "prev-checkpoint", f"prevCheckpoint must be {prev_checkpoint}, got {event.prev_checkpoint}"
        )
    if event.prev_offset != state.last_offset:
        raise _fail("prev-offset", f"prevOffset must be {state.last_offset}, got {event.prev_offset}")
    if event.new_data is not None:
        if state.schema is None:
            raise _fail("schema-before-data", "a SetDataSchema must precede the first data slice")
        interval = event.new_data.offset_interval
        expected_start = 0 if state.last_offset is None else state.last_offset + 1
        if interval.start != expected_start:
            raise _fail(
                "offsets-contiguous",
                f"the new data must start at offset {expected_start}, got {interval.start}",
            )
        if interval.end < interval.start:
            raise _fail("offsets-contiguous", f"offset interval end {interval.end} is before its start")
    if state.watermark is not None:
        if event.new_watermark is None:
            raise _fail("watermark-monotonic", "a watermark, once set, cannot be removed")
        if event.new_watermark < state.watermark:
            raise _fail(
                "watermark-monotonic",
                f"watermark {event.new_watermark} is before the current {state.watermark}",
            )


def _after_data(state: ChainState, event: model.AddData | model.ExecuteTransform) -> dict[str, Any]:
    changes: dict[str, Any] = {"watermark": event.new_watermark}
    if event.new_data is not None:
        interval = event.new_data.offset_interval
        changes["last_offset"] = interval.end
        changes["num_records"] = state.num_records + interval.end - interval.start + 1
        changes["data_size"] = state.data_size + event.new_data.size
        changes["data_slices"] = state.data_slices.append(event.new_data.physical_hash)
        changes["data_checkpoint"] = event.new_checkpoint.physical_hash if event.new_checkpoint else None
    if event.new_checkpoint is not None:
        changes["checkpoint"] = event.new_checkpoint
    return changes


def _apply_add_data(state: ChainState, event: model.AddData) -> dict[str, Any]:
    _check_kind(state, event, model.DatasetKind.ROOT)
    _check_data(state, event)
    source_state = event.new_source_state
    old_state = state.source_states.get(source_state.source_name) if source_state else None
    advanced = (
        event.new_data is not None
        or event.new_checkpoint is not None
        or event.new_watermark != state.watermark
        or (source_state is not None and source_state != old_state)
    )
    if not advanced:
        raise _fail("no-op", "AddData adds no data, checkpoint, watermark or source state")
    changes = _after_data(state, event)
    if source_state is not None:
        changes["source_states"] = {**state.source_states, source_state.source_name: source_state}
    return changes


def _apply_execute_transform(state: ChainState, event: model.ExecuteTransform) -> dict[str, Any]:
    _check_kind(state, event, model.DatasetKind.DERIVATIVE)
    if state.transform is None:
        raise _fail("transform-before-execute", "ExecuteTransform needs a SetTransform first")
    expected_ids = [str(DatasetId.parse(i.dataset_ref)) for i in state.transform.inputs]
    got_ids = [str(i.dataset_id) for i in event.query_inputs]
    if got_ids != expected_ids:
        raise _fail(
            "query-inputs",
            f"queryInputs must be the SetTransform inputs in order {expected_ids}, got {got_ids}",
        )
    advanced_input = False
    for qi in event.query_inputs:
        prev = state.transform_inputs.get(str(qi.dataset_id))
        prev_block = prev.new_block_hash if prev else None
        prev_offset = (
            prev.new_offset if prev and prev.new_offset is not None else (prev.prev_offset if prev else None)
        )
        if qi.prev_block_hash != prev_block:
            raise _fail(
                "query-inputs",
                f"input {qi.dataset_id}: prevBlockHash must be {prev_block}, got {qi.prev_block_hash}",
            )
        if qi.prev_offset != prev_offset:
            raise _fail(
                "query-inputs",
                f"input {qi.dataset_id}: prevOffset must be {prev_offset}, got {qi.prev_offset}",
            )
        if qi.new_offset is not None and qi.new_block_hash is None:
            raise _fail("query-inputs", f"input {qi.dataset_id}: newOffset requires newBlockHash")
        if qi.new_block_hash is not None and qi.new_block_hash == qi.prev_block_hash:
            raise _fail("query-inputs", f"input {qi.dataset_id}: newBlockHash equals prevBlockHash")
        if qi.new_offset is not None and qi.new_offset == qi.prev_offset:
            raise _fail("query-inputs", f"input {qi.dataset_id}: newOffset equals prevOffset")
        advanced_input = advanced_input or qi.new_block_hash is not None
    _check_data(state, event)
    advanced = (
        event.new_data is not None
        or event.new_checkpoint is not None
        or event.new_watermark != state.watermark
        or advanced_input
    )
    if not advanced:
        raise _fail("no-op", "ExecuteTransform advances no data, checkpoint, watermark or input")
    changes = _after_data(state, event)
    inputs = dict(state.transform_inputs)
    for qi in event.query_inputs:
        if qi.new_block_hash is not None:
            inputs[str(qi.dataset_id)] = qi
    changes["transform_inputs"] = inputs
    return changes


def _is_did_odf(ref: str) -> bool:
    if not ref.startswith("did:odf:"):
        return False
    try:
        DatasetId.parse(ref)
    except OdfFormatError:
        return False
    return True


def _first_repeated(items: list[str]) -> str | None:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None


def _check_set_transform(event: model.SetTransform) -> None:
    if not event.inputs:
        raise _fail("set-transform", "SetTransform needs at least one input")
    refs = [
        str(DatasetId.parse(i.dataset_ref)) if _is_did_odf(i.dataset_ref) else i.dataset_ref
        for i in event.inputs
    ]
    twice = _first_repeated(refs)
    if twice is not None:  # named alone: the list of a thousand inputs would make a huge message
        raise _fail("set-transform", f"SetTransform inputs must be unique, got {quoted(twice)} twice")
    for i in event.inputs:
        if not _is_did_odf(i.dataset_ref) or not i.alias:
            raise _fail(
                "set-transform", f"input {i.dataset_ref!r} must be resolved to a did:odf ID with an alias"
            )
    sql = event.transform
    if sql.query is not None or not sql.queries:
        raise _fail("set-transform", "transform queries must be normalised: 'queries' only, not 'query'")
    if sql.queries[-1].alias is not None or any(q.alias is None for q in sql.queries[:-1]):
        raise _fail("set-transform", "every query but the last (output) one needs an alias")


def _apply_set_data_schema(state: ChainState, event: model.SetDataSchema) -> None:
    if event.schema is None and event.raw_arrow_schema is None:
        raise _fail("set-data-schema", "SetDataSchema has neither schema nor rawArrowSchema")
    try:
        problem = schema_problem(odf_schema(event))
    except OdfFormatError:  # an undecodable legacy schema: the evolution check below names it
        problem = None
    if problem is not None:
        raise _fail("set-data-schema", f"the schema is refused: {problem}")
    if state.schema is not None:
        check_evolution(state.schema, event)


def apply_block(state: ChainState, block: model.MetadataBlock, block_hash: Multihash) -> ChainState:
    """Validates `block` as the next block after `state`; returns the new state or raises ChainRuleError."""
    _check_link(state, block)
    event = block.event
    changes: dict[str, Any] = {}
    if isinstance(event, model.Seed):
        changes = {"dataset_id": event.dataset_id, "kind": event.dataset_kind}
    elif isinstance(event, model.AddData):
        changes = _apply_add_data(state, event)
    elif isinstance(event, model.ExecuteTransform):
        changes = _apply_execute_transform(state, event)
    elif isinstance(event, model.SetPollingSource):
        _check_kind(state, event, model.DatasetKind.ROOT)
        changes = {"polling_source": event}
    elif isinstance(event, model.AddPushSource):
        _check_kind(state, event, model.DatasetKind.ROOT)
        changes = {"push_sources": {**state.push_sources, event.source_name: event}}
    elif isinstance(event, model.DisablePollingSource):
        _check_kind(state, event, model.DatasetKind.ROOT)
        if state.polling_source is None:
            raise _fail("disable-source", "there is no active polling source to disable")
        changes = {"polling_source": None}
    elif isinstance(event, model.DisablePushSource):
        _check_kind(state, event, model.DatasetKind.ROOT)
        if event.source_name not in state.push_sources:
            raise _fail("disable-source", f"there is no push source named {event.source_name!r}")
        changes = {"push_sources": {k: v for k, v in state.push_sources.items() if k != event.source_name}}
    elif isinstance(event, model.SetTransform):
        _check_kind(state, event, model.DatasetKind.DERIVATIVE)
        _check_set_transform(event)
        changes = {"transform": event}
    elif isinstance(event, model.SetDataSchema):
        _apply_set_data_schema(state, event)
        changes = {"schema": event}
    elif isinstance(event, model.SetVocab):
        changes = {"vocab": event}
    elif isinstance(event, model.SetInfo):
        changes = {"info": event}
    elif isinstance(event, model.SetLicense):
        changes = {"license": event}
    elif isinstance(event, model.SetAttachments):
        changes = {"attachments": event}
    return dataclasses.replace(
        state,
        head=block_hash,
        sequence_number=block.sequence_number,
        system_time=block.system_time,
        **changes,
    )

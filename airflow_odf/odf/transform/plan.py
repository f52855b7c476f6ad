"""Planning a derivative transform, coordinator side: which input blocks the next run(s) consume.

INGEST-TRANSFORM-SEMANTICS §2.1: from the derivative's SetTransform and what its ExecuteTransforms
already consumed, find per input the unprocessed block interval `(prevBlockHash, newBlockHash]`, its
data slices, offsets and explicit watermarks. Unlike the reference, the new end of an input can be
pinned (hashes passed through XCom), a reset input can be recovered by planning from scratch, and a
backlog can be split into bounded batches, each becoming its own ExecuteTransform. Planning reads
metadata only: no data is read, nothing is committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.offsets import consumed_interval
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.repo.repository import Repository


class TransformPlanError(OdfError):
    """The transform cannot be planned as asked: not a derivative, a missing input, a bad pinned hash."""


class InputDivergedError(TransformPlanError):
    """An input no longer contains the block the derivative last processed (it was reset or compacted)."""

    def __init__(
        self, alias: str, dataset_id: DatasetId, block_hash: Multihash, derivative: str | None = None
    ) -> None:
        who = "this derivative" if derivative is None else f"derivative {derivative!r}"
        name = derivative or "NAME"
        super().__init__(
            f"input {alias!r} ({dataset_id}) no longer contains block {block_hash}, the last one {who} "
            "processed: the input was reset or compacted. Two ways out: re-process every input from its "
            f"Seed with `odf pull {name} --reset-derivatives-on-diverged-input` (recover_diverged=True "
            f"on OdfTransformOperator), or drop the derivative's data with `odf compact {name} "
            "--keep-metadata-only` and transform it again"
        )
        self.alias = alias
        self.dataset_id = dataset_id
        self.block_hash = block_hash
        self.derivative = derivative


class PinnedHeadProcessedError(TransformPlanError):
    """An input is pinned to a block older than the last one the derivative processed: what the pin
    asks for was processed already (e.g. by an overlapping run)."""

    def __init__(self, alias: str, label: str, pinned: Multihash, processed: Multihash) -> None:
        super().__init__(
            f"pinned head {pinned} of input {label} is older than {processed}, "
            "the last block this derivative already processed"
        )
        self.alias = alias
        self.pinned = pinned
        self.processed = processed


@dataclass(frozen=True)
class PlannedInput:
    """One input's share of a batch: blocks `(prev_block_hash, new_block_hash]`, offsets `(prev, new]`.

    `new_block_hash` / `new_offset` are None when the batch takes no new block / no new record of
    this input, as ExecuteTransformInput records it.
    """

    dataset_id: DatasetId
    alias: str
    prev_block_hash: Multihash | None
    new_block_hash: Multihash | None
    prev_offset: int | None
    new_offset: int | None
    slices: list[model.DataSlice]
    explicit_watermarks: list[model.Watermark]
    from_scratch: bool = False
    vocab: model.SetVocab | None = None
    schema: model.SetDataSchema | None = None
    # the input as planning opened it, for the run to read its slices and blocks from (None: open it)
    dataset: Dataset | None = field(default=None, compare=False, repr=False)

    @property
    def offset_interval(self) -> model.OffsetInterval | None:
        """The records the engine reads, `[prev_offset + 1, new_offset]`, or None when there are none."""
        return consumed_interval(self.prev_offset, self.new_offset)

    @property
    def num_records(self) -> int:
        interval = self.offset_interval
        return 0 if interval is None else interval.end - interval.start + 1

    @property
    def last_block_hash(self) -> Multihash | None:
        """The input's last processed block once this batch is committed."""
        return self.new_block_hash if self.new_block_hash is not None else self.prev_block_hash

    def execute_input(self) -> model.ExecuteTransformInput:
        return model.ExecuteTransformInput(
            dataset_id=self.dataset_id,
            prev_block_hash=self.prev_block_hash,
            new_block_hash=self.new_block_hash,
            prev_offset=self.prev_offset,
            new_offset=self.new_offset,
        )


@dataclass(frozen=True)
class TransformBatch:
    """What one ExecuteTransform consumes; `inputs` are in SetTransform order."""

    inputs: list[PlannedInput]

    @property
    def num_records(self) -> int:
        return sum(i.num_records for i in self.inputs)

    def execute_inputs(self) -> list[model.ExecuteTransformInput]:
        """The ExecuteTransform `queryInputs` of this batch, in SetTransform order."""
        return [i.execute_input() for i in self.inputs]


@dataclass(frozen=True)
class TransformPlan:
    """The batches to run, oldest first; none when `up_to_date`, then `reason` says why.

    `ready` is False when an input was never pulled (the reference reports that as up to date too).
    `from_scratch` means an input diverged and everything is re-planned from the inputs' Seeds: the
    derivative's data must be reset before the first batch is committed. `prev_offset` and
    `prev_checkpoint` are the derivative's before the first batch (None when from scratch).
    """

    up_to_date: bool
    batches: list[TransformBatch]
    reason: str | None = None
    ready: bool = True
    from_scratch: bool = False
    prev_offset: int | None = None
    prev_checkpoint: Multihash | None = None


@dataclass(frozen=True)
class ResolvedInput:
    """An input of the SetTransform, resolved against the repository."""

    index: int
    alias: str
    name: str
    dataset_id: DatasetId
    dataset: Dataset
    state: ChainState

    def label(self) -> str:
        return f"{self.alias!r} ({self.name}, {self.dataset_id})"


@dataclass(frozen=True)
class _Unit:
    """One unprocessed input block: the smallest piece a batch can take."""

    input_index: int
    block_hash: Multihash
    block: model.MetadataBlock

    @property
    def data_event(self) -> model.AddData | model.ExecuteTransform | None:
        event = self.block.event
        return event if isinstance(event, (model.AddData, model.ExecuteTransform)) else None

    @property
    def slice(self) -> model.DataSlice | None:
        event = self.data_event
        return None if event is None else event.new_data

    @property
    def watermark(self) -> model.Watermark | None:
        event = self.data_event
        if event is None or event.new_watermark is None:
            return None
        return model.Watermark(system_time=self.block.system_time, event_time=event.new_watermark)

    @property
    def records(self) -> int:
        data = self.slice
        return 0 if data is None else data.offset_interval.end - data.offset_interval.start + 1


def plan_transform(
    repo: Repository,
    dataset: Dataset,
    *,
    state: ChainState | None = None,
    pinned_heads: Mapping[str, Multihash | str] | None = None,
    max_input_records: int | None = None,
    recover_from_scratch: bool = False,
) -> TransformPlan:
    """Plans the next transform run(s) of a derivative dataset of `repo`.

    `state` is the derivative's, when the caller has just read it (else it is read here).
    `pinned_heads` ends an input at a given block instead of its current head; keys are input aliases,
    dataset names or DIDs. `max_input_records` splits a backlog into batches of at most that many
    input records (whole slices; a larger slice is a batch of its own).
    """
    if max_input_records is not None and max_input_records < 1:
        raise TransformPlanError(f"max_input_records must be at least 1, got {max_input_records}")
    if state is None:
        state = dataset.state()
    name = repo.name_of(dataset)
    if state.kind is not model.DatasetKind.DERIVATIVE:
        raise TransformPlanError(f"{name} is not a Derivative dataset: only derivatives are transformed")
    if state.transform is None:
        raise TransformPlanError(f"{name} has no SetTransform")
    inputs = [resolve_input(repo, i, ti) for i, ti in enumerate(state.transform.inputs)]
    pins = _resolve_pins(inputs, pinned_heads or {})
    for inp in inputs:
        if inp.state.schema is None:
            return TransformPlan(
                up_to_date=True,
                batches=[],
                reason=f"not ready: input {inp.label()} was never pulled",
                ready=False,
            )

    previous = [last_processed(state, inp) for inp in inputs]
    try:
        pending = [_pending_units(inp, previous[inp.index][0], pins.get(inp.index)) for inp in inputs]
    except InputDivergedError as e:
        if not recover_from_scratch:
            raise InputDivergedError(e.alias, e.dataset_id, e.block_hash, name) from None
        previous = [(None, None) for _ in inputs]
        pending = [_pending_units(inp, None, pins.get(inp.index)) for inp in inputs]
        return TransformPlan(
            up_to_date=False,
            batches=_batches(inputs, pending, previous, max_input_records, from_scratch=True),
            reason=f"input {e.alias!r} diverged: every input is re-processed from its Seed",
            from_scratch=True,
        )

    prev_checkpoint = state.checkpoint.physical_hash if state.checkpoint else None
    if state.schema is not None and not any(u.slice or u.watermark for units in pending for u in units):
        return TransformPlan(
            up_to_date=True,
            batches=[],
            reason="up to date: no input has new data or watermarks",
            prev_offset=state.last_offset,
            prev_checkpoint=prev_checkpoint,
        )
    return TransformPlan(
        up_to_date=False,
        batches=_batches(inputs, pending, previous, max_input_records, from_scratch=False),
        prev_offset=state.last_offset,
        prev_checkpoint=prev_checkpoint,
    )


def resolve_input(repo: Repository, index: int, ti: model.TransformInput) -> ResolvedInput:
    dataset_id = DatasetId.parse(ti.dataset_ref)
    alias = ti.alias or ti.dataset_ref
    dataset = repo.dataset_by_id(dataset_id)
    state = dataset.state()
    if state.head is None:
        raise TransformPlanError(f"input {alias!r} ({dataset_id}) is not in the repository {repo.location}")
    return ResolvedInput(index, alias, repo.name_of(dataset), dataset_id, dataset, state)


def _resolve_pins(inputs: list[ResolvedInput], pinned: Mapping[str, Multihash | str]) -> dict[int, Multihash]:
    """Input index -> pinned block hash; keys match an alias, else a DID, else a name (any case)."""
    out: dict[int, Multihash] = {}
    for key, value in pinned.items():
        matches = [i for i in inputs if i.alias == key]
        if not matches and key.startswith("did:"):
            try:
                did = DatasetId.parse(key)
            except OdfError as e:
                raise TransformPlanError(f"pinned head key {key!r}: {e}") from None
            matches = [i for i in inputs if i.dataset_id == did]
        if not matches:
            matches = [i for i in inputs if i.name.lower() == key.lower()]
        if len(matches) != 1:
            known = ", ".join(i.label() for i in inputs)
            raise TransformPlanError(f"pinned head key {key!r} matches no single input (inputs: {known})")
        try:
            block_hash = Multihash.parse(value) if isinstance(value, str) else value
        except OdfError as e:
            raise TransformPlanError(f"pinned head of input {matches[0].label()}: {e}") from None
        index = matches[0].index
        if out.get(index, block_hash) != block_hash:
            raise TransformPlanError(f"input {matches[0].label()} is pinned to two different heads")
        out[index] = block_hash
    return out


def last_processed(state: ChainState, inp: ResolvedInput) -> tuple[Multihash | None, int | None]:
    """The input's last processed block and offset, from the derivative's ExecuteTransforms.

    The chain state keeps, per input, the last ExecuteTransformInput that took a new block, so its
    `new_block_hash` is the last processed block even when later runs took nothing from this input.
    """
    last = state.transform_inputs.get(str(inp.dataset_id))
    if last is None:
        return None, None
    return last.new_block_hash, last.new_offset if last.new_offset is not None else last.prev_offset


def _pending_units(inp: ResolvedInput, prev: Multihash | None, pinned: Multihash | None) -> list[_Unit]:
    """The input's blocks in `(prev, new]`, oldest first, `new` being the pinned hash or the head.

    One walk from the head checks on the way that `prev` is still in the chain and that `new` is in it,
    at or after `prev`.
    """
    new = pinned if pinned is not None else inp.state.head
    seen_new = False
    collected: list[_Unit] = []
    for h, block in inp.dataset.iter_blocks(inp.state.head):
        seen_new = seen_new or h == new
        if h == prev:
            break
        if seen_new:
            collected.append(_Unit(inp.index, h, block))
    else:
        if not seen_new:
            raise TransformPlanError(f"pinned head {new} is not in the chain of input {inp.label()}")
        if prev is not None:
            raise InputDivergedError(inp.alias, inp.dataset_id, prev)
    if not seen_new:
        assert prev is not None
        if any(h == new for h, _ in inp.dataset.iter_blocks(prev)):
            raise PinnedHeadProcessedError(inp.alias, inp.label(), new, prev)
        raise TransformPlanError(f"pinned head {new} is not in the chain of input {inp.label()}")
    collected.reverse()
    return collected


def _batches(
    inputs: list[ResolvedInput],
    pending: list[list[_Unit]],
    previous: list[tuple[Multihash | None, int | None]],
    max_input_records: int | None,
    *,
    from_scratch: bool,
) -> list[TransformBatch]:
    """Cuts the pending blocks of all inputs into contiguous batches.

    Blocks of different inputs are interleaved by system time (then SetTransform order), so that each
    batch covers about the same period of every input, which joins over inputs expect.
    """
    units = sorted((u for mine in pending for u in mine), key=lambda u: (u.block.system_time, u.input_index))
    groups: list[list[_Unit]] = [[]]
    records = 0
    for unit in units:
        if (
            unit.records
            and records
            and max_input_records is not None
            and records + unit.records > max_input_records
        ):
            groups.append([])
            records = 0
        groups[-1].append(unit)
        records += unit.records

    batches = []
    last = list(previous)
    for group in groups:
        planned = []
        for inp in inputs:
            mine = [u for u in group if u.input_index == inp.index]
            prev_block, prev_offset = last[inp.index]
            slices = [u.slice for u in mine if u.slice is not None]
            new_block = mine[-1].block_hash if mine else None
            new_offset = slices[-1].offset_interval.end if slices else None
            planned.append(
                PlannedInput(
                    dataset_id=inp.dataset_id,
                    alias=inp.alias,
                    prev_block_hash=prev_block,
                    new_block_hash=new_block,
                    prev_offset=prev_offset,
                    new_offset=new_offset,
                    slices=slices,
                    explicit_watermarks=[u.watermark for u in mine if u.watermark is not None],
                    from_scratch=from_scratch,
                    vocab=inp.state.vocab,
                    schema=inp.state.schema,
                    dataset=inp.dataset,
                )
            )
            last[inp.index] = (
                new_block if new_block is not None else prev_block,
                new_offset if new_offset is not None else prev_offset,
            )
        batches.append(TransformBatch(planned))
    return batches


class InputSchemas:
    """Each input's SetDataSchema events by sequence number, read once per input (for replays)."""

    def __init__(self, repo: Repository) -> None:
        self._repo = repo
        self._schemas: dict[DatasetId, list[tuple[int, model.SetDataSchema]]] = {}

    def at(self, dataset_id: DatasetId, block: model.MetadataBlock) -> model.SetDataSchema | None:
        """The input's schema as of `block` (the latest SetDataSchema at or before it)."""
        if dataset_id not in self._schemas:
            dataset = self._repo.dataset_by_id(dataset_id)
            self._schemas[dataset_id] = [
                (b.sequence_number, b.event)
                for _, b in dataset.iter_blocks()
                if isinstance(b.event, model.SetDataSchema)
            ]
        for seq, event in self._schemas[dataset_id]:  # newest first
            if seq <= block.sequence_number:
                return event
        return None


def replay_batch(
    repo: Repository, state: ChainState, event: model.ExecuteTransform, schemas: InputSchemas
) -> TransformBatch:
    """The batch an ExecuteTransform recorded, rebuilt from its queryInputs against `state` (the
    derivative as of before that block), so that verification can run it again."""
    if state.transform is None:
        raise TransformPlanError("an ExecuteTransform without a preceding SetTransform")
    if len(event.query_inputs) != len(state.transform.inputs):
        raise TransformPlanError(
            f"the ExecuteTransform has {len(event.query_inputs)} inputs, "
            f"its SetTransform {len(state.transform.inputs)}"
        )
    planned = []
    for ti, qi in zip(state.transform.inputs, event.query_inputs, strict=True):
        alias = ti.alias or ti.dataset_ref
        dataset = repo.dataset_by_id(qi.dataset_id)
        units: list[_Unit] = []
        reached = qi.new_block_hash is None
        last_block: model.MetadataBlock | None = None
        if qi.new_block_hash is not None:
            for h, block in dataset.iter_blocks(qi.new_block_hash):
                last_block = last_block or block
                if h == qi.prev_block_hash:
                    reached = True
                    break
                units.append(_Unit(0, h, block))
            reached = reached or qi.prev_block_hash is None
        if not reached:
            assert qi.prev_block_hash is not None
            raise InputDivergedError(alias, qi.dataset_id, qi.prev_block_hash)
        if last_block is None and qi.prev_block_hash is not None:
            last_block = dataset.block(qi.prev_block_hash)
        units.reverse()
        slices = [u.slice for u in units if u.slice is not None]
        planned.append(
            PlannedInput(
                dataset_id=qi.dataset_id,
                alias=alias,
                prev_block_hash=qi.prev_block_hash,
                new_block_hash=qi.new_block_hash,
                prev_offset=qi.prev_offset,
                new_offset=qi.new_offset,
                slices=slices,
                explicit_watermarks=[u.watermark for u in units if u.watermark is not None],
                vocab=dataset.state().vocab,
                schema=None if last_block is None else schemas.at(qi.dataset_id, last_block),
                dataset=dataset,
            )
        )
    return TransformBatch(planned)

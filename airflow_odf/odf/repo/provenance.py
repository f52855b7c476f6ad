"""Record provenance from the metadata chains alone: which input records a dataset's records came from.

An ExecuteTransform says which output offsets a transform step wrote (`newData.offsetInterval`) and, per
input, which blocks `(prevBlockHash, newBlockHash]` and which records `(prevOffset, newOffset]` that step
read (`queryInputs`). So for an output record (or a data block) the step that wrote it is known, and the
records it read; for each input dataset the blocks holding those records, and if it is a derivative,
the steps that wrote them and what they read, down to the root datasets' AddData blocks.

What this proves, and what it does not: the engine gives a step exactly the records of its intervals,
so the records of these intervals, and no others, were the inputs of the steps on the way. It does not
say which of them a query kept, joined or aggregated into the record asked about — the chain records no
row-level links — so every one of them *may* have contributed. A step that buffers records across steps
(another engine's checkpoint holding data, not only watermarks) widens that to what earlier steps read.

Bounded work: each dataset met is opened once and each of its blocks read at most once (`ChainIndex`).
The dataset asked about is read from its head only as far back as the record asked; an input only in
the block range `(prevBlockHash, newBlockHash]` its reader recorded, and only as far as the offsets read
— a few blocks wherever they are in its chain. Only when those blocks are gone (the input was reset or
compacted, then `odf gc` ran) is it searched by offset from its head. The records asked of a dataset are
kept as merged intervals, and a dataset reached again (two paths to one root) is searched only for
records not searched yet.

A block's `in_chain` says whether its records are the dataset's records now (its data slice is one of
the chain's): a reader's blocks stay readable after a reset or a compaction until `odf gc`, and are
shown as they were read, the dataset `diverged`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from airflow_odf.odf.chain.block_index import ChainIndex, IndexedBlock
from airflow_odf.odf.chain.offsets import Interval, consumed_interval, merged, without
from airflow_odf.odf.errors import OdfError, quoted
from airflow_odf.odf.format import model
from airflow_odf.odf.format.fields import METADATA_EVENT
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.repo.repository import Repository, RepositoryError

#: how a dataset's part of the answer stands
RESOLVED = "resolved"  # every record asked of it found in its chain
DIVERGED = "diverged"  # what a reader read is no longer in its chain: reset or compacted since
UNRESOLVED = "unresolved"  # some records asked of it are not in its chain (the reasons say which)
MISSING = "missing"  # the dataset is not in this repository

#: how many blocks of one dataset an answer lists (the rest are counted)
DEFAULT_MAX_BLOCKS = 1000

WHAT_IT_PROVES = (
    "the records of these intervals, and no others, were the inputs of the steps that produced it; "
    "each step read all of its input records, so any of them may have contributed (the chain records "
    "no row-level links)"
)


class ProvenanceError(RepositoryError):
    """The question cannot be asked of this dataset: an offset beyond its data, a block not in its
    chain or that records no data."""


@dataclass(frozen=True)
class StepInput:
    """What one transform step read of one input: blocks `(prev_block_hash, new_block_hash]`, records
    `offsets` (None: no record of it)."""

    dataset_id: str
    name: str | None  # its name in this repository; None: not here (or nameless)
    prev_block_hash: str | None
    new_block_hash: str | None
    offsets: Interval | None


@dataclass(frozen=True)
class ProvenanceBlock:
    """An AddData or ExecuteTransform block holding records asked about."""

    block_hash: str
    sequence_number: int
    system_time: str
    event: str  # "AddData" or "ExecuteTransform"
    offsets: Interval | None  # its newData.offsetInterval (None: a block given by hash that wrote none)
    watermark: str | None
    source_state: model.SourceState | None  # AddData: the state of the source after it
    inputs: list[StepInput]  # ExecuteTransform: what the step read
    in_chain: bool = True  # False: its records are no longer in the dataset's chain (reset, compacted)


@dataclass
class DatasetProvenance:
    """One dataset on the way down: the records asked of it and the blocks that hold them."""

    dataset_id: str
    name: str | None
    kind: str | None  # Root, Derivative; None when not in this repository or unreadable
    depth: int  # 0: the dataset asked about; n: n steps upstream of it (the shortest way)
    status: str = RESOLVED
    offsets: list[Interval] = field(default_factory=list)  # merged
    blocks: list[ProvenanceBlock] = field(default_factory=list)  # oldest first, at most max_blocks
    num_blocks: int = 0
    reasons: list[str] = field(default_factory=list)  # why it is not RESOLVED

    def flag(self, status: str, reason: str) -> None:
        """Keeps the worst status seen and each reason once: a reader's many steps say one thing once."""
        order = (RESOLVED, DIVERGED, UNRESOLVED, MISSING)
        if order.index(status) > order.index(self.status):
            self.status = status
        if reason not in self.reasons:
            self.reasons.append(reason)


@dataclass(frozen=True)
class Provenance:
    """The answer: the dataset asked about first, then its upstream datasets nearest first."""

    dataset: str
    dataset_id: str
    offset: int | None
    block: str | None
    datasets: list[DatasetProvenance]


@dataclass(frozen=True)
class _Read:
    """Records a transform step read of a dataset: their offsets and the block range it recorded."""

    offsets: Interval
    prev_block: Multihash | None
    new_block: Multihash | None
    reader: str  # the reading dataset's name (its DID when nameless), for the reasons


class _Walk:
    """The walk down from one dataset; each dataset met is opened once, each of its blocks read once."""

    def __init__(self, repo: Repository, max_blocks: int) -> None:
        self.repo = repo
        self.max_blocks = max_blocks
        self.names = {str(e.dataset_id): e.name for e in repo.scan() if e.dataset_id is not None}
        self.nodes: dict[str, DatasetProvenance] = {}
        self.indexes: dict[str, ChainIndex | None] = {}
        self.slices: dict[str, set[str]] = {}  # the physical hashes of its chain's data slices now
        self.found: dict[str, dict[str, ProvenanceBlock]] = {}
        self.searched: dict[str, list[Interval]] = {}
        self.asked: dict[str, list[_Read]] = {}
        self.queue: deque[str] = deque()

    def node(self, did: str, depth: int) -> DatasetProvenance:
        node = self.nodes.get(did)
        if node is None:
            node = self.nodes[did] = DatasetProvenance(did, self.names.get(did), None, depth)
            self.found[did], self.searched[did] = {}, []
            self._open(node)
        node.depth = min(node.depth, depth)
        return node

    def _open(self, node: DatasetProvenance) -> None:
        dataset = self.repo.dataset_by_id(DatasetId.parse(node.dataset_id))
        self.indexes[node.dataset_id] = None
        try:
            head = dataset.head()
            if head is None:
                node.flag(MISSING, "not in this repository: pull it to follow its records further")
                return
            state = dataset.state(record=False)
            node.kind = state.kind.name.capitalize() if state.kind is not None else None
            self.slices[node.dataset_id] = set(state.data_slices.texts())
            self.indexes[node.dataset_id] = ChainIndex(dataset, head)
        except OdfError as e:
            node.flag(UNRESOLVED, f"its chain cannot be read: {e}")

    def record(self, did: str, block_hash: Multihash, block: model.MetadataBlock, depth: int) -> None:
        """Adds a data block to the answer; a transform step's inputs become records asked upstream."""
        event = block.event
        assert isinstance(event, model.AddData | model.ExecuteTransform)
        reader = self.nodes[did].name or did
        inputs = []
        for qi in event.query_inputs if isinstance(event, model.ExecuteTransform) else []:
            input_id = str(qi.dataset_id)
            interval = consumed_interval(qi.prev_offset, qi.new_offset)
            offsets = None if interval is None else (interval.start, interval.end)
            inputs.append(
                StepInput(
                    input_id,
                    self.names.get(input_id),
                    None if qi.prev_block_hash is None else str(qi.prev_block_hash),
                    None if qi.new_block_hash is None else str(qi.new_block_hash),
                    offsets,
                )
            )
            if offsets is not None:
                self.node(input_id, depth + 1)
                self.asked.setdefault(input_id, []).append(
                    _Read(offsets, qi.prev_block_hash, qi.new_block_hash, reader)
                )
                if input_id not in self.queue:
                    self.queue.append(input_id)
        data = event.new_data
        self.found[did][str(block_hash)] = ProvenanceBlock(
            str(block_hash),
            block.sequence_number,
            str(block.system_time),
            METADATA_EVENT.tag(type(event)),
            None if data is None else (data.offset_interval.start, data.offset_interval.end),
            None if event.new_watermark is None else str(event.new_watermark),
            event.new_source_state if isinstance(event, model.AddData) else None,
            inputs,
            in_chain=data is None or str(data.physical_hash) in self.slices.get(did, ()),
        )

    def run(self) -> None:
        while self.queue:
            did = self.queue.popleft()
            reads = self.asked.pop(did)
            node = self.nodes[did]
            node.offsets = merged([*node.offsets, *(r.offsets for r in reads)])
            index = self.indexes[did]
            if index is None:
                continue
            try:
                for read in reads:
                    self._search(did, node, index, read)
            except OdfError as e:  # a damaged chain upstream: say so, answer the rest
                node.flag(UNRESOLVED, f"its chain cannot be read: {e}")

    def _search(self, did: str, node: DatasetProvenance, index: ChainIndex, read: _Read) -> None:
        """Finds the blocks holding what one step read of the dataset and not searched for yet: in the
        block range the step recorded (a few blocks, however long the chain), else by offset in the
        chain from its head (the range's blocks are gone: reset or compacted, then `odf gc`)."""
        for start, end in without([read.offsets], self.searched[did]):
            self.searched[did] = merged([*self.searched[did], (start, end)])
            found = None
            if read.new_block is not None:
                found = index.range_blocks(read.new_block, read.prev_block, start, end)
                if found is None:
                    node.flag(DIVERGED, _gone(read.reader))
                elif _held_up_to(found, start) < end:
                    node.flag(DIVERGED, _not_as_recorded(read.reader))
                    found = None
            if found is None:
                found = index.data_blocks(start, end)
                held = _held_up_to(found, start)
                if held < end:
                    _not_in_chain(node, max(start, held + 1), end, index.last_offset())
            for entry in found:
                if str(entry.block_hash) not in self.found[did]:
                    self.record(did, entry.block_hash, index.block(entry.block_hash), node.depth)
            if not all(self.found[did][str(e.block_hash)].in_chain for e in found):
                node.flag(DIVERGED, _no_longer_in_chain(read.reader))

    def answer(self, name: str, target: str, offset: int | None, block: str | None) -> Provenance:
        for did, node in self.nodes.items():
            blocks = sorted(self.found[did].values(), key=lambda b: b.sequence_number)
            node.num_blocks = len(blocks)
            node.blocks = blocks[: self.max_blocks]
        datasets = sorted(self.nodes.values(), key=lambda n: n.depth)  # stable: discovery order within
        return Provenance(name, target, offset, block, datasets)


def _held_up_to(found: list[IndexedBlock], start: int) -> int:
    """The last offset of `start, start + 1, ...` that the blocks (oldest first) hold without a gap."""
    held = start - 1
    for entry in found:
        if entry.start is None or entry.end is None or entry.start > held + 1:
            break
        held = max(held, entry.end)
    return held


def _gone(reader: str) -> str:
    return (
        f"blocks {reader} read are no longer in the repository (it was reset or compacted since, then "
        "`odf gc` ran): its records are found by offset in its chain now, which a hard compaction keeps "
        "and a reset followed by new data does not"
    )


def _not_as_recorded(reader: str) -> str:
    return f"the blocks {reader} recorded reading do not hold the offsets it recorded: found by offset"


def _no_longer_in_chain(reader: str) -> str:
    return (
        f"blocks {reader} read hold records that are no longer in its chain (it was reset or compacted "
        "since): they are shown as read, from the store, where they stay until `odf gc`"
    )


def _not_in_chain(node: DatasetProvenance, start: int, end: int, last: int | None) -> None:
    held = "it holds no records" if last is None else f"its records are offsets 0..{last}"
    node.flag(
        UNRESOLVED,
        f"offsets {start}..{end} are not in its chain ({held}): it was reset, or compacted with "
        "--keep-metadata-only, since they were read",
    )


def provenance(
    repo: Repository,
    name: str,
    *,
    offset: int | None = None,
    block: str | None = None,
    max_blocks: int = DEFAULT_MAX_BLOCKS,
) -> Provenance:
    """The provenance of one record (`offset`) or of the records of one block (`block`, a hash) of
    the dataset `name`, down to the root datasets."""
    if (offset is None) == (block is None):
        raise ProvenanceError("ask about an offset or a block, one of them")
    did = str(repo.resolve(name))
    walk = _Walk(repo, max_blocks)
    node = walk.node(did, 0)
    index = walk.indexes[did]
    if index is None:
        raise ProvenanceError(f"{name}: {'; '.join(node.reasons)}")
    if offset is not None:
        block_hash, asked = _block_of_offset(index, name, offset)
    else:
        block_hash, asked = _block_by_hash(index, name, block or "")
    node.offsets = asked
    walk.searched[did] = asked
    walk.record(did, block_hash, index.block(block_hash), 0)
    walk.run()
    return walk.answer(name, did, offset, None if block is None else str(block_hash))


def _block_of_offset(index: ChainIndex, name: str, offset: int) -> tuple[Multihash, list[Interval]]:
    last = index.last_offset()
    if last is None:
        raise ProvenanceError(f"{name} has no records yet: there is no offset {offset}")
    if not 0 <= offset <= last:
        raise ProvenanceError(
            f"offset {offset} is beyond the data of {name}: its records are offsets 0..{last}"
        )
    found = index.data_blocks(offset, offset)
    if len(found) != 1:
        raise ProvenanceError(
            f"{name}: {len(found)} blocks hold offset {offset}; the chain is damaged (`odf verify {name}`)"
        )
    return found[0].block_hash, [(offset, offset)]


def _block_by_hash(index: ChainIndex, name: str, text: str) -> tuple[Multihash, list[Interval]]:
    try:
        block_hash = Multihash.parse(text)
    except OdfError as e:
        raise ProvenanceError(f"{quoted(text)} is not a block hash: {e}") from None
    if index.sequence_number(block_hash) is None:
        raise ProvenanceError(
            f"block {block_hash} is not in the chain of {name} (head {index.head}): `odf log {name}` "
            "lists its blocks"
        )
    event = index.block(block_hash).event
    if not isinstance(event, model.AddData | model.ExecuteTransform):
        raise ProvenanceError(
            f"block {block_hash} of {name} is a {METADATA_EVENT.tag(type(event))}: only AddData and "
            "ExecuteTransform blocks hold records"
        )
    data = event.new_data
    return block_hash, [] if data is None else [(data.offset_interval.start, data.offset_interval.end)]

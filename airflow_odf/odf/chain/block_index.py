"""One dataset's blocks, each read at most once, and found by offset without walking its chain again.

A chain is a list linked backwards: there is no way to a block but from a later one. Questions that
jump around a chain — which block holds offset K, is block H in this chain, which blocks hold these
offsets of a block range another dataset read — would each walk it again. This index reads every block
once and remembers of each only what those questions need (sequence number, previous block, offset
interval; no decoded event, so that a chain of a million blocks fits), and answers from that:

- `data_blocks`: from the head down, only as far back as the offsets asked for, searched by bisection;
- `range_blocks`: the blocks of a range `(prev, new]` that a transform step recorded reading, walked from
  `new` down, only as far as the offsets asked for — a few blocks, wherever they are in a long chain.

`block` reads a block in full again (its hash checked again).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from airflow_odf.odf.chain.dataset import CorruptDatasetError, Dataset, block_key
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash


@dataclass(frozen=True, slots=True)
class IndexedBlock:
    """What the index keeps of a block: where it is and which offsets it added (none: no data)."""

    block_hash: Multihash
    sequence_number: int
    prev_block_hash: Multihash | None
    start: int | None
    end: int | None


class ChainIndex:
    """Blocks by hash and, along the chain from `head` back to the Seed, data blocks by offset."""

    def __init__(self, dataset: Dataset, head: Multihash) -> None:
        self.dataset = dataset
        self.head = head
        self._read: dict[Multihash, IndexedBlock] = {}  # every block read, on the chain or not
        self._next: Multihash | None = head  # where the walk from the head goes on
        self._on_chain: set[Multihash] = set()
        # the head walk's data blocks newest first, their starts and ends negated (ascending, for bisect)
        self._data: list[IndexedBlock] = []
        self._neg_starts: list[int] = []
        self._neg_ends: list[int] = []

    def _entry(self, block_hash: Multihash) -> IndexedBlock:
        entry = self._read.get(block_hash)
        if entry is None:
            block = self.dataset.block(block_hash)
            event = block.event
            data = event.new_data if isinstance(event, model.AddData | model.ExecuteTransform) else None
            interval = None if data is None else data.offset_interval
            entry = self._read[block_hash] = IndexedBlock(
                block_hash,
                block.sequence_number,
                block.prev_block_hash,
                None if interval is None else interval.start,
                None if interval is None else interval.end,
            )
        return entry

    def _step(self) -> bool:
        """Reads one more block of the chain from the head; False past the Seed."""
        if self._next is None:
            return False
        entry = self._entry(self._next)
        self._on_chain.add(entry.block_hash)
        if entry.start is not None and entry.end is not None:
            self._data.append(entry)
            self._neg_starts.append(-entry.start)
            self._neg_ends.append(-entry.end)
        self._next = entry.prev_block_hash
        return True

    def sequence_number(self, block_hash: Multihash) -> int | None:
        """The block's sequence number, or None when it is not in this chain (walks on until found)."""
        while block_hash not in self._on_chain and self._step():
            pass
        return self._read[block_hash].sequence_number if block_hash in self._on_chain else None

    def last_offset(self) -> int | None:
        """The offset of the newest record, or None when the chain holds no data."""
        while not self._data and self._step():
            pass
        return self._data[0].end if self._data else None

    def data_blocks(self, start: int, end: int) -> list[IndexedBlock]:
        """The data blocks of the chain with records in `[start, end]`, oldest first."""
        while (not self._data or (self._data[-1].start or 0) > start) and self._step():
            pass
        first = bisect_left(self._neg_starts, -end)  # the newest block starting at or before `end`
        stop = bisect_right(self._neg_ends, -start)  # past the oldest block ending at or after `start`
        return self._data[first:stop][::-1]

    def range_blocks(
        self, new: Multihash, prev: Multihash | None, start: int, end: int
    ) -> list[IndexedBlock] | None:
        """The data blocks of the range `(prev, new]` with records in `[start, end]`, oldest first; None
        when a block of the range is not in the store (removed by `odf gc` after a reset or compaction)."""
        found = []
        at: Multihash | None = new
        while at is not None and at != prev:
            try:
                entry = self._entry(at)
            except CorruptDatasetError:
                if self.dataset.store.exists(block_key(at)):
                    raise  # there, but damaged: not what a reset or a compaction leaves
                return None
            if entry.start is not None and entry.end is not None:
                if entry.end < start:
                    break
                if entry.start <= end:
                    found.append(entry)
            at = entry.prev_block_hash
        return found[::-1]

    def block(self, block_hash: Multihash) -> model.MetadataBlock:
        """A block, read (and its hash checked) again."""
        return self.dataset.block(block_hash)

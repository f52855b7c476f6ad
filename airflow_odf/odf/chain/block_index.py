"""One walk of a dataset's chain, made once and only as far back as a question needs.

A chain is a list linked backwards: there is no way to a block but from the head. Questions that jump
around a chain — which block holds offset K, is block H in this chain — would each walk it again; this
index walks it once, from the head down, and remembers what it passed: every block's sequence number
by hash, and the offset interval of every data block (AddData and ExecuteTransform with `newData`),
searched by bisection. It goes on walking only when a question reaches below what it has seen, so a
question about recent records reads only the recent blocks.

It keeps no decoded event (a chain of a million blocks would not fit); `block` reads one again.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash


@dataclass(frozen=True)
class DataBlock:
    """A block that added records: where it is and which offsets it added."""

    block_hash: Multihash
    sequence_number: int
    start: int
    end: int


class ChainIndex:
    """Blocks by hash and data blocks by offset, of the chain from `head` back to the Seed."""

    def __init__(self, dataset: Dataset, head: Multihash) -> None:
        self.dataset = dataset
        self.head = head
        self._walk: Iterator[tuple[Multihash, model.MetadataBlock]] | None = dataset.iter_blocks(head)
        self._sequence: dict[Multihash, int] = {}
        # data blocks newest first, their starts and ends negated (ascending, for bisect)
        self._data: list[DataBlock] = []
        self._neg_starts: list[int] = []
        self._neg_ends: list[int] = []

    def _step(self) -> bool:
        """Reads one more block; False at the Seed."""
        if self._walk is None:
            return False
        try:
            block_hash, block = next(self._walk)
        except StopIteration:
            self._walk = None
            return False
        self._sequence[block_hash] = block.sequence_number
        event = block.event
        if isinstance(event, model.AddData | model.ExecuteTransform) and event.new_data is not None:
            interval = event.new_data.offset_interval
            self._data.append(DataBlock(block_hash, block.sequence_number, interval.start, interval.end))
            self._neg_starts.append(-interval.start)
            self._neg_ends.append(-interval.end)
        return True

    def sequence_number(self, block_hash: Multihash) -> int | None:
        """The block's sequence number, or None when it is not in this chain (walks on until found)."""
        while block_hash not in self._sequence and self._step():
            pass
        return self._sequence.get(block_hash)

    def last_offset(self) -> int | None:
        """The offset of the newest record, or None when the chain holds no data."""
        while not self._data and self._step():
            pass
        return self._data[0].end if self._data else None

    def data_blocks(self, start: int, end: int) -> list[DataBlock]:
        """The data blocks with records in `[start, end]`, oldest first (none: no such records)."""
        while (not self._data or self._data[-1].start > start) and self._step():
            pass
        first = bisect_left(self._neg_starts, -end)  # the newest block starting at or before `end`
        stop = bisect_right(self._neg_ends, -start)  # past the oldest block ending at or after `start`
        return self._data[first:stop][::-1]

    def block(self, block_hash: Multihash) -> model.MetadataBlock:
        """A block of the chain, read (and its hash checked) again."""
        return self.dataset.block(block_hash)

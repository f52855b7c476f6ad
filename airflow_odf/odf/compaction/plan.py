"""What a compaction will do, planned from one walk of the chain back from the head.

As the reference (`compaction_planner_impl.rs`): consecutive AddData blocks are grouped, newest first,
while the group's slices together stay within `max_slice_size` bytes and `max_slice_records` records;
any other event ends a group and is kept as it is. A slice larger than the limits is a group of its
own. Each group becomes one AddData: `prevOffset` and `prevCheckpoint` of its first block, the offset
interval of all its slices, and the watermark, source state and checkpoint of its last. We also end a
group where the source state's source changes, so that no source's state is lost.
`keep_metadata_only` instead drops every AddData and ExecuteTransform: what remains is the metadata, from
which the next ingest or transform starts over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.rules import ChainState, apply_block
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash

DEFAULT_MAX_SLICE_SIZE = 300_000_000
DEFAULT_MAX_SLICE_RECORDS = 10_000


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


class CompactionError(OdfError):
    """The compaction cannot be done as asked (bad limits, a derivative without keep_metadata_only)."""


def parse_byte_size(text: str | int) -> int:
    """A size such as `300MB` (decimal units, as the reference's default of 300,000,000 bytes), `64MiB`
    or a plain number of bytes."""
    if isinstance(text, int):
        return text
    found = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    unit = found.group(2).upper() if found else None
    if found is None or unit not in _UNITS:
        raise CompactionError(f"{text!r}: expected a size such as 300MB, 64MiB or a number of bytes")
    return int(found.group(1)) * _UNITS[unit]


@dataclass(frozen=True)
class CompactionOptions:
    """The limits of a merged slice, whether to drop all data instead, and whether to check afterwards
    that every record is unchanged (`verify`)."""

    max_slice_size: int = DEFAULT_MAX_SLICE_SIZE
    max_slice_records: int = DEFAULT_MAX_SLICE_RECORDS
    keep_metadata_only: bool = False
    verify: bool = False

    def check(self) -> None:
        for name in ("max_slice_size", "max_slice_records"):
            if getattr(self, name) < 1:
                raise CompactionError(f"{name} must be at least 1, got {getattr(self, name)}")


def _records(data: model.DataSlice | None) -> int:
    return 0 if data is None else data.offset_interval.end - data.offset_interval.start + 1


@dataclass
class SliceGroup:
    """Consecutive AddData blocks (oldest first) that become one; `schema_epoch`: how many SetDataSchema
    precede them (groups of one epoch share a schema). Built newest first (`prepend`)."""

    blocks: list[model.AddData] = field(default_factory=list)
    schema_epoch: int = 0
    records: int = 0
    size: int = 0
    source_name: str | None = None

    @property
    def slices(self) -> list[model.DataSlice]:
        return [b.new_data for b in self.blocks if b.new_data is not None]

    @property
    def needs_merge(self) -> bool:
        """Whether its slices must be merged into a new file (two or more of them)."""
        return len(self.slices) > 1

    def admits(self, block: model.AddData, options: CompactionOptions) -> bool:
        """Whether `block` may join (the group stays within the limits and has one source)."""
        if not self.blocks:
            return True
        size = 0 if block.new_data is None else block.new_data.size
        source = block.new_source_state.source_name if block.new_source_state is not None else None
        return (
            self.records + _records(block.new_data) <= options.max_slice_records
            and self.size + size <= options.max_slice_size
            and (source is None or self.source_name in (None, source))
        )

    def prepend(self, block: model.AddData) -> None:
        """Adds the block before the group's first (the walk goes from the head back)."""
        self.blocks.insert(0, block)
        self.records += _records(block.new_data)
        self.size += 0 if block.new_data is None else block.new_data.size
        if block.new_source_state is not None:
            self.source_name = block.new_source_state.source_name

    def event(self, merged: model.DataSlice | None) -> model.AddData:
        """The group as one AddData; `merged`: the new file of a group that `needs_merge`."""
        first, last = self.blocks[0], self.blocks[-1]
        if len(self.blocks) == 1:
            return first
        slices = self.slices
        new_data = merged if self.needs_merge else (slices[0] if slices else None)
        return model.AddData(
            prev_checkpoint=first.prev_checkpoint,
            prev_offset=first.prev_offset,
            new_data=new_data,
            new_checkpoint=_last(b.new_checkpoint for b in self.blocks),
            new_watermark=_last(b.new_watermark for b in self.blocks),
            new_source_state=_last(b.new_source_state for b in self.blocks),
            extra=last.extra,
        )


def _last(values: Any) -> Any:
    found = None
    for value in values:
        found = value if value is not None else found
    return found


@dataclass
class CompactionPlan:
    """The chain to build on the Seed: `entries` oldest first, each an event kept as it is or a group."""

    head: Multihash
    seed_hash: Multihash
    seed_state: ChainState
    entries: list[Any]
    old_blocks: int
    old_slices: int
    keep_metadata_only: bool

    @property
    def groups(self) -> list[SliceGroup]:
        return [e for e in self.entries if isinstance(e, SliceGroup)]

    @property
    def to_merge(self) -> list[SliceGroup]:
        return [g for g in self.groups if g.needs_merge]

    @property
    def new_blocks(self) -> int:
        return 1 + len(self.entries)

    @property
    def changes_anything(self) -> bool:
        return self.new_blocks != self.old_blocks

    @property
    def new_slices(self) -> int:
        return sum(min(1, len(g.slices)) for g in self.groups)

    def events(self, merged: dict[int, model.DataSlice]) -> list[Any]:
        """The events to commit onto the Seed; `merged`: the new slice of each group to merge, by its
        index in `to_merge`."""
        to_merge = {id(g): i for i, g in enumerate(self.to_merge)}
        events = []
        for entry in self.entries:
            if isinstance(entry, SliceGroup):
                index = to_merge.get(id(entry))
                events.append(entry.event(None if index is None else merged[index]))
            else:
                events.append(entry)
        return events


def plan_compaction(dataset: Dataset, name: str, options: CompactionOptions) -> CompactionPlan:
    """Plans the compaction of `dataset` (named `name` in messages) from one walk of its chain."""
    options.check()
    head = dataset.existing_head()
    newest_first: list[Any] = []
    group: SliceGroup | None = None
    old_blocks = old_slices = 0
    kind = None
    seed: tuple[Multihash, model.MetadataBlock] | None = None
    for h, block in dataset.iter_blocks(head):
        old_blocks += 1
        event = block.event
        if isinstance(event, model.Seed):
            seed, kind = (h, block), event.dataset_kind
            break
        if isinstance(event, model.AddData | model.ExecuteTransform) and event.new_data is not None:
            old_slices += 1
        if isinstance(event, model.AddData) and not options.keep_metadata_only:
            if group is None or not group.admits(event, options):
                group = SliceGroup()
                newest_first.append(group)
            group.prepend(event)
            continue
        group = None
        if not (options.keep_metadata_only and isinstance(event, model.AddData | model.ExecuteTransform)):
            newest_first.append(event)
    if seed is None:
        raise CompactionError(f"{name}: the chain has no Seed")
    if kind is not model.DatasetKind.ROOT and not options.keep_metadata_only:
        raise CompactionError(
            f"{name} is a derivative: its data is derived, so only keep_metadata_only "
            "(`odf compact --keep-metadata-only`) applies, after which its next transform re-derives it"
        )
    entries = list(reversed(newest_first))
    _number_epochs(entries)
    seed_hash, seed_block = seed
    return CompactionPlan(
        head=head,
        seed_hash=seed_hash,
        seed_state=apply_block(ChainState(), seed_block, seed_hash),
        entries=entries,
        old_blocks=old_blocks,
        old_slices=old_slices,
        keep_metadata_only=options.keep_metadata_only,
    )


def _number_epochs(entries: list[Any]) -> None:
    epoch = 0
    for entry in entries:
        if isinstance(entry, model.SetDataSchema):
            epoch += 1
        elif isinstance(entry, SliceGroup):
            entry.schema_epoch = epoch

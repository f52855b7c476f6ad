"""Spark's part files, published to the coordinator as soon as their tasks have committed them.

A transform's slice is spliced from the part files of one Spark write, in the order of the partitions'
keys (`partition_order`). Spark's file committer (FileOutputCommitter, algorithm 1) moves the output of
every task that commits into `<parts>/_temporary/<attempt>/task_*/`, and all of it into `<parts>/` once
the whole job is done; a part is final from its task's commit on. While the write runs, a thread here
hard-links each committed part into the request's `parts_ready_dir` as `<place>-<file>.parquet`: its
partition's place in the slice among the partitions that hold rows, and the file number of Spark's name,
so that the coordinator can hash the parts' columns while the job's last tasks still run
(`airflow_odf.odf.hashing.parts_ahead`). The coordinator uses what it hashed only where the slice's column
chunks turn out to be byte for byte the parts' ones; publishing is an optimisation and never fails a
write: a part that cannot be linked is simply not published.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow.parquet as pq

from airflow_odf.engine.partition_order import PartitionKey
from airflow_odf.utils.background import BackgroundWork

_PART_FILE = re.compile(r"part-(\d+)-.*?(?:-c(\d+))?\.[^/]*parquet")
POLL_SECONDS = 0.01
"""How often the committer's task directories are looked at (a directory listing: microseconds)."""


def part_numbers(name: str) -> tuple[int, int] | None:
    """(partition, file number) of a part file Spark's writer names `part-<partition>-<job>[-c<n>]...
    parquet`; None for any other name."""
    match = _PART_FILE.fullmatch(name)
    return None if match is None else (int(match.group(1)), int(match.group(2) or 0))


@dataclass(frozen=True)
class PartsTarget:
    """Where a write's parts are published (`TransformRequest.parts_ready_dir`), and the row groups'
    middles of the slice files it reads, by first offset (which partitions write a part)."""

    ready_dir: str
    midpoints: Mapping[int, Sequence[int]]


def row_group_midpoints(footer: pq.FileMetaData) -> list[int]:
    """Where each row group's middle is in the file: its first page plus half its compressed size."""
    middles = []
    for index in range(footer.num_row_groups):
        group = footer.row_group(index)
        if group.num_columns and group.num_rows:
            first = group.column(0)
            start = first.data_page_offset
            if first.has_dictionary_page and 0 < first.dictionary_page_offset < start:
                start = first.dictionary_page_offset
            size = sum(group.column(c).total_compressed_size for c in range(group.num_columns))
            middles.append(start + size // 2)
    return middles


class PartsPublisher(BackgroundWork):
    """`with PartsPublisher(parts_dir, target, keys, cores):` around the write of `parts_dir`, whose
    slice follows the partitions' `keys` (nothing is published before they are known, and nothing at all
    if they turn out None). A split holds a row group when it holds its middle (Parquet's rule), so a
    split without one writes no part and gets no place. Parts are published once no more than `cores` - 1
    of them are still to come: before that no core is left for hashing them.
    """

    def __init__(
        self, parts_dir: str, target: PartsTarget, keys: Future[list[PartitionKey | None] | None], cores: int
    ) -> None:
        self._parts_dir = parts_dir
        self._ready_dir = target.ready_dir
        self._keys = keys
        self._midpoints = target.midpoints
        self._cores = cores
        self._positions: dict[int, int] | None = None
        self._published: set[str] = set()
        super().__init__("odf-parts-publisher", join=True)

    def _ready(self) -> bool:
        try:
            os.makedirs(self._ready_dir, exist_ok=True)
        except OSError:  # not a place this driver can write: nothing is published
            return False
        return True

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            if self._positions is None:
                if not self._keys.done():
                    continue
                keys = self._keys.result()
                if keys is None:
                    return
                self._positions = places(keys, self._midpoints)
            committed = [
                (self._positions[partition], file, path)
                for path, partition, file in _committed_parts(self._parts_dir)
                if partition in self._positions
            ]
            to_come = len(self._positions) - len({place for place, _, _ in committed})
            if not self._published and to_come >= self._cores:
                continue
            # in name order: a task's files before the next partition's (the coordinator relies on it)
            for position, file, path in sorted(committed):
                name = f"{position:06d}-{file:03d}.parquet"
                if name not in self._published:
                    self._publish(path, name)

    def _publish(self, path: str, name: str) -> None:
        # linked under a temporary name and renamed: the coordinator never sees a name without its file
        ready = os.path.join(self._ready_dir, name)
        linking = ready + ".linking"
        try:
            os.link(path, linking)
            os.replace(linking, ready)
        except OSError:  # moved by the job's commit meanwhile, or no hard links on this file system
            with contextlib.suppress(OSError):
                os.unlink(linking)
            return
        self._published.add(name)


def places(keys: Sequence[PartitionKey | None], midpoints: Mapping[int, Sequence[int]]) -> dict[int, int]:
    """Partition -> its part's place in the slice, for the partitions whose split holds a row group's
    middle (the others read no rows); `keys` end with (first offset of the file, split start, length)."""
    holding = [
        partition
        for partition, key in enumerate(keys)
        if key is not None
        and any(key[-2] <= middle < key[-2] + key[-1] for middle in midpoints.get(key[-3], ()))
    ]
    return {partition: place for place, partition in enumerate(sorted(holding, key=keys.__getitem__))}


def _committed_parts(parts_dir: str) -> Iterator[tuple[str, int, int]]:
    """(path, partition, file number) of every part in the committer's committed task directories, and
    of every part already in `parts_dir` (moved there by the job's commit, or by a task's under
    algorithm 2)."""
    directories = [parts_dir]
    for attempt in _entries(os.path.join(parts_dir, "_temporary")):
        # `_temporary` in there holds the task attempts still running
        directories += [task.path for task in _entries(attempt.path) if task.name.startswith("task_")]
    for directory in directories:
        for part in _entries(directory):
            numbers = part_numbers(part.name)
            if numbers is not None:
                yield part.path, *numbers


def _entries(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as entries:
            return list(entries)
    except OSError:  # not there yet, or moved by the job's commit
        return []

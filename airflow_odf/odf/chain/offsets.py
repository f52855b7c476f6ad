"""Record offset intervals as the chain records them, and sets of them kept merged.

An ExecuteTransformInput names the records a transform step read of one input by two offsets:
`prevOffset` (the last one read before, exclusive) and `newOffset` (the last one read now, inclusive).
Planning, the transform's XCom and provenance all need the closed interval between them; provenance
also collects many intervals of one dataset and must keep them few (adjacent and overlapping ones
combined) so that a walk down a lineage stays bounded.

Intervals here are `(start, end)` pairs, both inclusive, as ODF's `OffsetInterval`.
"""

from __future__ import annotations

from collections.abc import Iterable

from airflow_odf.odf.format import model

Interval = tuple[int, int]


def consumed_interval(prev_offset: int | None, new_offset: int | None) -> model.OffsetInterval | None:
    """The records `(prev_offset, new_offset]` an input step read, or None when it read none."""
    if new_offset is None:
        return None
    return model.OffsetInterval(start=0 if prev_offset is None else prev_offset + 1, end=new_offset)


def merged(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals sorted, overlapping and adjacent ones combined (`(0, 4), (5, 9)` -> `(0, 9)`)."""
    out: list[Interval] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1] + 1:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def without(intervals: list[Interval], taken: list[Interval]) -> list[Interval]:
    """The parts of `intervals` not in `taken` (both merged): what is left to look at."""
    out: list[Interval] = []
    i = 0
    for start, end in intervals:
        while i < len(taken) and taken[i][1] < start:
            i += 1
        j = i
        while start <= end and j < len(taken) and taken[j][0] <= end:
            if taken[j][0] > start:
                out.append((start, taken[j][0] - 1))
            start = max(start, taken[j][1] + 1)
            j += 1
        if start <= end:
            out.append((start, end))
    return out


def interval_plain(interval: Interval) -> dict[str, int]:
    """The JSON form, as ODF writes an `offsetInterval`."""
    return {"start": interval[0], "end": interval[1]}

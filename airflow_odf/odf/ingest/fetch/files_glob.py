"""FetchStep::FilesGlob: local files matching a glob, ingested in order a few at a time.

The state is `SourceState{kind: "odf/etag", value: <name of the last ingested file>}` for both orders,
as the reference writes it for ByName. With ByEventTime the resume point is the key
(event time parsed from that name, name): files sorting after it are new. The listing is made once per
run and kept while the caller hands back the state it was given, so a backfill of n files is O(n log n),
not the reference's O(n²).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.model import (
    EventTimeSourceFromMetadata,
    EventTimeSourceFromPath,
    FetchStepFilesGlob,
    SourceOrdering,
    SourceState,
)
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.fetch.local_files import list_glob
from airflow_odf.odf.ingest.fetch.time_formats import parse_timestamp
from airflow_odf.odf.ingest.fetch.types import (
    STATE_ETAG,
    FetchedFile,
    FetchError,
    FetchOptions,
    FetchResult,
    SourceNotFoundError,
    file_mtime,
    make_state,
    up_to_date,
)

#: Sort key of a file: `(name,)` for ByName, `(event time, name)` for ByEventTime.
SortKey = tuple[str] | tuple[Timestamp, str]


@dataclass(frozen=True)
class _Entry:
    path: Path  # as the glob matched it: its name is what the state records
    real_path: Path  # what is read: the symlink-free path, checked to be in an allowed directory
    event_time: Timestamp | None  # parsed when listing, for ByEventTime only

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def key(self) -> SortKey:
        return (self.name,) if self.event_time is None else (self.event_time, self.name)


class GlobSource:
    """Lists the glob once per run and hands out `files_per_batch` files per iteration."""

    def __init__(self, step: FetchStepFilesGlob, options: FetchOptions) -> None:
        self._step = step
        self._options = options
        self._by_event_time = step.order == SourceOrdering.BY_EVENT_TIME
        self._pattern = self._compile_pattern(step.event_time)
        if self._by_event_time and self._pattern is None:
            raise FetchError(
                "fetch.order: ByEventTime takes the event time from file names; "
                "expected eventTime of kind FromPath with a pattern and timestampFormat"
            )
        self._listing: list[_Entry] | None = None
        self._position = 0
        self._returned_state: SourceState | None = None

    @staticmethod
    def _compile_pattern(event_time: object) -> re.Pattern[str] | None:
        if not isinstance(event_time, EventTimeSourceFromPath):
            return None
        try:
            pattern = re.compile(event_time.pattern)
        except re.error as e:
            raise FetchError(
                f"fetch.eventTime.pattern: {event_time.pattern!r} is not a valid regex: {e}"
            ) from None
        if pattern.groups < 1:
            raise FetchError(
                f"fetch.eventTime.pattern: pattern {event_time.pattern!r} has no group 1; "
                "expected a capture group around the timestamp, e.g. 'data-(\\d+-\\d+-\\d+)\\.csv'"
            )
        return pattern

    def fetch(self, prev_state: SourceState | None, system_time: Timestamp) -> FetchResult:
        if self._listing is None or prev_state != self._returned_state:
            self._listing = self._list()
            self._position = self._first_new(self._listing, prev_state)
        if not self._listing and prev_state is None:
            raise SourceNotFoundError(f"fetch.path: no regular file matches {self._step.path!r}")
        batch = self._listing[self._position : self._position + self._options.files_per_batch]
        if not batch:
            self._options.log(f"fetch.path: no file after {prev_state.value if prev_state else '-'} is new")
            return up_to_date(prev_state)
        self._position += len(batch)
        self._returned_state = make_state(STATE_ETAG, batch[-1].name)
        return FetchResult(
            files=[FetchedFile(e.real_path, self._event_time(e, system_time), e.name) for e in batch],
            new_source_state=self._returned_state,
            has_more=self._position < len(self._listing),
        )

    def pending(self, prev_state: SourceState | None) -> list[Path]:
        """Files sorting after the last ingested one: what the next fetches would hand out, unread."""
        listing = self._list()
        return [e.path for e in listing[self._first_new(listing, prev_state) :]]

    def _list(self) -> list[_Entry]:
        entries = [
            _Entry(p, real, self._time_from_name(p.name, f"file {p}") if self._by_event_time else None)
            for p, real in list_glob(self._step.path, self._options, "fetch.path")
        ]
        entries.sort(key=lambda e: (e.key, str(e.path)))
        self._options.log(f"fetch.path: {len(entries)} files match {self._step.path!r}")
        return entries

    def _first_new(self, listing: list[_Entry], prev_state: SourceState | None) -> int:
        """Index of the first listed file that sorts after the last ingested one."""
        if prev_state is None:
            return 0
        return bisect_right(listing, self._resume_key(prev_state), key=lambda e: e.key)

    def _resume_key(self, prev_state: SourceState) -> SortKey:
        if prev_state.kind != STATE_ETAG:
            raise FetchError(
                f"fetch.path: previous source state has kind {prev_state.kind!r}; "
                f"expected {STATE_ETAG!r} holding the name of the last ingested file"
            )
        name = prev_state.value
        if not self._by_event_time:
            return (name,)
        return (self._time_from_name(name, "the last ingested file (source state)"), name)

    def _time_from_name(self, name: str, what: str) -> Timestamp:
        """Event time from group 1 of the FromPath pattern; `what` says whose name it is, for errors."""
        event_time = self._step.event_time
        assert self._pattern is not None and isinstance(event_time, EventTimeSourceFromPath)
        match = self._pattern.search(name)
        if match is None or match.group(1) is None:
            raise FetchError(
                f"fetch.eventTime.pattern: file name {name!r} of {what} does not match pattern "
                f"{self._pattern.pattern!r}; expected group 1 to capture its timestamp"
            )
        try:
            return parse_timestamp(match.group(1), event_time.timestamp_format)
        except OdfFormatError as e:
            raise FetchError(f"fetch.eventTime.timestampFormat: file name {name!r} of {what}: {e}") from None

    def _event_time(self, entry: _Entry, system_time: Timestamp) -> Timestamp:
        if entry.event_time is not None:
            return entry.event_time
        if self._pattern is not None:
            return self._time_from_name(entry.name, f"file {entry.path}")
        if isinstance(self._step.event_time, EventTimeSourceFromMetadata):
            return file_mtime(entry.real_path.stat())
        return system_time

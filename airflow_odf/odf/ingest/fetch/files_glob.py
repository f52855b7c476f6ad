"""FetchStep::FilesGlob: local files (or S3 objects, `s3_glob`) matching a glob, ingested in order a few
at a time.

The state is `SourceState{kind: "odf/etag", value: <name of the last ingested file>}` for both orders,
as the reference writes it for ByName. With ByEventTime the resume point is the key
(event time parsed from that name, name): files sorting after it are new. The listing is made once per
run and kept while the caller hands back the state it was given, so a backfill of n files is O(n log n),
not the reference's O(n²). An S3 pattern whose matches lie in one "directory", ordered ByName, is not
listed in full: key order is name order there, so the listing starts after the last ingested name and
is read page by page as batches are taken.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath

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
from airflow_odf.odf.ingest.fetch.s3_glob import S3GlobListing, S3Object, is_s3_path
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
    path: PurePath  # as the glob matched it (an S3 key): its name is what the state records
    location: Path | S3Object  # what is read: the symlink-free path (in an allowed directory), or the object
    event_time: Timestamp | None  # parsed when listing, for ByEventTime only

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def key(self) -> SortKey:
        return (self.name,) if self.event_time is None else (self.event_time, self.name)


class _Ahead:
    """The entries still to hand out, with one looked at ahead so a batch knows whether more follow."""

    def __init__(self, entries: Iterator[_Entry]) -> None:
        self._entries = entries
        self._next = next(entries, None)

    def take(self, count: int) -> list[_Entry]:
        batch: list[_Entry] = []
        while self._next is not None and len(batch) < count:
            batch.append(self._next)
            self._next = next(self._entries, None)
        return batch

    @property
    def more(self) -> bool:
        return self._next is not None


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
        self._bucket = S3GlobListing(step.path, options) if is_s3_path(step.path) else None
        self._ahead: _Ahead | None = None
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
        try:
            if self._ahead is None or prev_state != self._returned_state:
                self._ahead = _Ahead(self._entries_after(prev_state))
            batch = self._ahead.take(self._options.files_per_batch)
            files = [self._fetched(e, system_time) for e in batch]
        except BaseException:
            self._ahead = None  # a listing or download broke off: list again next time, from the state
            raise
        if not batch and prev_state is None:
            raise SourceNotFoundError(f"fetch.path: no regular file matches {self._step.path!r}")
        if not batch:
            self._options.log(f"fetch.path: no file after {prev_state.value if prev_state else '-'} is new")
            return up_to_date(prev_state)
        self._returned_state = make_state(STATE_ETAG, batch[-1].name)
        return FetchResult(files=files, new_source_state=self._returned_state, has_more=self._ahead.more)

    def pending(self, prev_state: SourceState | None) -> list[PurePath]:
        """Files sorting after the last ingested one: what the next fetches would hand out, unread."""
        return [e.path for e in self._entries_after(prev_state)]

    def _entries_after(self, prev_state: SourceState | None) -> Iterator[_Entry]:
        """The files sorting after the last ingested one, in order: from a listing that starts there
        (S3, one level, ByName), else from the full sorted listing."""
        resume = None if prev_state is None else self._resume_key(prev_state)
        if self._bucket is not None and self._bucket.in_name_order and not self._by_event_time:
            after = None if resume is None else str(resume[0])
            return (_Entry(path, obj, None) for path, obj in self._bucket.objects(after))
        listing = self._list()
        return iter(listing[0 if resume is None else self._first_new(listing, resume) :])

    def _list(self) -> list[_Entry]:
        found: list[tuple[PurePath, Path | S3Object]] = (
            list(self._bucket.objects())
            if self._bucket is not None
            else list(list_glob(self._step.path, self._options, "fetch.path"))
        )
        entries = [
            _Entry(p, where, self._time_from_name(p.name, f"file {p}") if self._by_event_time else None)
            for p, where in found
        ]
        entries.sort(key=lambda e: (e.key, str(e.path)))
        self._options.log(f"fetch.path: {len(entries)} files match {self._step.path!r}")
        return entries

    @staticmethod
    def _first_new(listing: list[_Entry], resume: SortKey) -> int:
        """Index of the first listed file that sorts after the last ingested one."""
        return bisect_right(listing, resume, key=lambda e: e.key)

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

    def _fetched(self, entry: _Entry, system_time: Timestamp) -> FetchedFile:
        event_time = self._event_time(entry, system_time)
        if isinstance(entry.location, S3Object):
            assert self._bucket is not None
            return self._bucket.fetched(entry.location, event_time, entry.name)
        return FetchedFile(entry.location, event_time, entry.name)

    def _event_time(self, entry: _Entry, system_time: Timestamp) -> Timestamp:
        if entry.event_time is not None:
            return entry.event_time
        if self._pattern is not None:
            return self._time_from_name(entry.name, f"file {entry.path}")
        if isinstance(self._step.event_time, EventTimeSourceFromMetadata):
            if isinstance(entry.location, S3Object):
                return entry.location.last_modified
            return file_mtime(entry.location.stat())
        return system_time

"""The fetch step of polling ingestion: what is new at a source, as local files plus the next source state.

`SourceFetcher` is what the ingest layer calls, once per iteration of a pull. It applies the rules every
source shares (the reference's "uncacheable" skip, `cache: Forever`) and hands the rest to the module of
the step's kind: `url`, `files_glob`, `container`.
"""

from __future__ import annotations

from typing import Protocol

from airflow_odf.odf.format.model import (
    FetchStep,
    FetchStepContainer,
    FetchStepFilesGlob,
    FetchStepUrl,
    SourceCachingForever,
    SourceState,
)
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.fetch.container import ContainerSource
from airflow_odf.odf.ingest.fetch.files_glob import GlobSource
from airflow_odf.odf.ingest.fetch.templating import TemplateError
from airflow_odf.odf.ingest.fetch.types import (
    ContainerRuntimeError,
    FetchedFile,
    FetchError,
    FetchOptions,
    FetchResult,
    SourceNotFoundError,
    SourceUnreachableError,
    up_to_date,
)
from airflow_odf.odf.ingest.fetch.url import UrlSource

__all__ = [
    "ContainerRuntimeError",
    "FetchError",
    "FetchOptions",
    "FetchResult",
    "FetchedFile",
    "SourceFetcher",
    "SourceNotFoundError",
    "SourceUnreachableError",
]


class _Source(Protocol):
    def fetch(self, prev_state: SourceState | None, system_time: Timestamp) -> FetchResult: ...


class SourceFetcher:
    """One per pull run; keeps the sorted FilesGlob listing between iterations so a backfill is not quadratic.

    Raises `FetchError` at construction for a step this provider cannot run (Mqtt, EthereumLogs, a bad
    FromPath pattern, ...), so a misconfigured source fails before anything is downloaded.
    """

    def __init__(self, step: FetchStep, options: FetchOptions) -> None:
        if options.files_per_batch < 1:
            raise FetchError(f"files_per_batch is {options.files_per_batch}; expected 1 or more")
        self._step = step
        self._options = options
        self._source = _source_for(step, options)

    def fetch(self, prev_state: SourceState | None, system_time: Timestamp) -> FetchResult:
        """Fetch what is new since `prev_state`; `system_time` is the iteration's system time."""
        options = self._options
        if options.has_previous_data and prev_state is None and not options.fetch_uncacheable:
            options.log(
                "fetch: the source gave no ETag/Last-Modified last time, so it cannot tell whether it "
                "changed; skipping it (pull with fetch_uncacheable to fetch it again)"
            )
            return up_to_date(None, uncacheable=True)
        if options.has_previous_data and isinstance(getattr(self._step, "cache", None), SourceCachingForever):
            options.log("fetch.cache: the source is cached forever and was ingested already")
            return up_to_date(prev_state)
        try:
            return self._source.fetch(prev_state, system_time)
        except TemplateError as e:
            raise FetchError(str(e)) from None


def _source_for(step: FetchStep, options: FetchOptions) -> _Source:
    if isinstance(step, FetchStepUrl):
        return UrlSource(step, options)
    if isinstance(step, FetchStepFilesGlob):
        return GlobSource(step, options)
    if isinstance(step, FetchStepContainer):
        return ContainerSource(step, options)
    kind = type(step).__name__.removeprefix("FetchStep")
    raise FetchError(
        f"fetch: FetchStep kind {kind} is not supported by this provider; "
        "expected Url, FilesGlob or Container (a Container step can bridge other protocols)"
    )

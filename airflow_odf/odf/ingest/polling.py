"""Polling ingest: fetch and prepare from the dataset's polling source, then one iteration per batch
until the source has no more.

An iteration that loses the race for the head to another writer (an overlapping run) fetches again
from the source state the winner recorded: what the winner ingested is not ingested twice, and when it
took everything the pull ends up to date at the winner's head (`chain.reconcile`). Overlapping pulls
sharing a scratch space find out before the engine work: the first to need the engine claims the
dataset until its pull ends, the others wait, then compare the head and fetch again from the source
state it recorded — up to date, with no engine work (`chain.claims`).
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.reconcile import reconciling_from
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.checks.request import check_suite_sql
from airflow_odf.odf.engine_client.contract import InputFile
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.fetch.fetcher import FetchOptions, SourceFetcher
from airflow_odf.odf.ingest.fetch.types import EngineS3
from airflow_odf.odf.ingest.iteration import Run, engine_claim, new_result, root_state, run_and_commit
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.prepare import prepare
from airflow_odf.odf.ingest.sources import POLLING_SOURCE_NAME, Source
from airflow_odf.odf.operation import IngestError, IngestResult, operation_dir
from airflow_odf.odf.storage.s3 import S3ObjectStore


def pull_polling(
    dataset: Dataset,
    alias: str,
    runner: EngineRunner,
    options: IngestOptions,
    *,
    system_time: Timestamp | None = None,
) -> IngestResult:
    """Ingests from the dataset's polling source until it has no more (one AddData group per iteration)."""
    if options.checks:  # refused before anything is fetched or run
        check_suite_sql(options.checks)
    state = root_state(dataset, alias)
    _polling_source(state, alias)
    result = new_result(alias, state)
    if options.checks:
        result.checks = []  # declared: the key is there even when nothing new came
    with engine_claim(dataset, alias, options) as claim:
        poller = _Poller(Run(dataset, runner, options, result, claim), system_time, state)
        iteration = 0
        more = True
        while more and (options.max_iterations is None or iteration < options.max_iterations):
            iteration += 1
            state, more = reconciling_from(
                dataset, state, poller.iteration, what=alias, record=result.reconciliation, log=options.log
            )
    result.new_head = None if state.head is None else str(state.head)
    return result


def _polling_source(state: ChainState, alias: str) -> model.SetPollingSource:
    if state.polling_source is None:
        raise IngestError("no-source", f"{alias} has no active polling source (SetPollingSource)")
    return state.polling_source


class _Poller:
    """The iterations of one pull. The fetcher (and its FilesGlob listing) is made once; again only
    when the source changed, or when another writer ingested the dataset's first data meanwhile
    (whether the dataset has data decides how an uncacheable source is treated)."""

    def __init__(self, run: Run, system_time: Timestamp | None, state: ChainState) -> None:
        self.run = run
        self.system_time = system_time
        self.has_previous_data = state.last_offset is not None
        self.last_head = state.head  # where this pull's own iterations left the dataset
        self._fetcher: SourceFetcher | None = None
        self._fetcher_for: tuple[model.SetPollingSource, bool] | None = None

    def fetcher(self, state: ChainState) -> SourceFetcher:
        if state.head != self.last_head:  # another writer's head: its data counts as previous data
            self.has_previous_data = self.has_previous_data or state.last_offset is not None
        source = _polling_source(state, self.run.result.dataset)
        key = (source, self.has_previous_data)
        if self._fetcher is None or self._fetcher_for != key:
            options = self.run.options
            self._fetcher = SourceFetcher(
                source.fetch,
                FetchOptions(
                    cache_dir=self.cache_dir(state),
                    has_previous_data=self.has_previous_data,
                    fetch_uncacheable=options.fetch_uncacheable,
                    files_per_batch=options.files_per_batch,
                    base_dir=options.source_dir,
                    engine_s3=self.engine_s3(source),
                    trust=options.trust,
                    log=options.log,
                ),
            )
            self._fetcher_for = key
        return self._fetcher

    def engine_s3(self, source: model.SetPollingSource) -> EngineS3 | None:
        """The S3 endpoint the engine reads itself (the repository's, with `engine_scheme`), unless a
        prepare step needs the fetched files on this disk."""
        store = self.run.dataset.store
        if source.prepare or not isinstance(store, S3ObjectStore) or store.engine_scheme is None:
            return None
        return EngineS3(store.engine_scheme, store.endpoint_url)

    def cache_dir(self, state: ChainState) -> Path:
        """Where downloads of this dataset's source go (removed once ingested)."""
        return self.run.options.work_dir / "fetch" / str(state.dataset_id).removeprefix("did:odf:")

    def iteration(self, state: ChainState) -> tuple[ChainState, bool]:
        """Fetches what is new since `state`'s source state, ingests and commits it onto `state`'s head;
        the state committed and whether the source has more."""
        options = self.run.options
        alias = self.run.result.dataset
        source = _polling_source(state, alias)
        fetcher = self.fetcher(state)
        now = self.system_time or Timestamp.now()
        fetched = fetcher.fetch(state.source_states.get(POLLING_SOURCE_NAME), now)
        if fetched.up_to_date and options.set_watermark is None:
            if fetched.uncacheable:
                options.log(f"{alias}: source is uncacheable and was ingested before; use fetch_uncacheable")
            return state, False
        cache_dir = self.cache_dir(state)
        try:
            with operation_dir(options.work_dir) as op_dir:
                inputs = [
                    InputFile(
                        # absolute: the engine's working directory is not ours (a session started elsewhere)
                        f.uri
                        or os.path.abspath(
                            prepare(
                                source.prepare or [],
                                _local(f.path),
                                op_dir,
                                allow_shell=options.trust.allow_shell_steps,
                            )
                        ),
                        (f.source_event_time or now).isoformat(),
                        size=f.size if f.uri else None,
                    )
                    for f in fetched.files
                ]
                state = run_and_commit(
                    self.run, state, Source.polling(source), inputs, fetched.new_source_state, now, op_dir
                )
                self.last_head = state.head
        finally:
            for f in fetched.files:  # downloads, not the user's own files (file://, FilesGlob)
                if f.path is not None and f.path.is_relative_to(cache_dir):
                    f.path.unlink(missing_ok=True)
        return state, fetched.has_more


def _local(path: Path | None) -> Path:
    """A fetched file's path: every fetched file without an engine URI has one."""
    assert path is not None
    return path

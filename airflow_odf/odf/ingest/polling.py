"""Polling ingest: fetch and prepare from the dataset's polling source, then one iteration per batch
until the source has no more."""

from __future__ import annotations

import os

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.engine_client.contract import InputFile
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.fetch.fetcher import FetchOptions, SourceFetcher
from airflow_odf.odf.ingest.iteration import Run, new_result, root_state, run_and_commit
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.prepare import prepare
from airflow_odf.odf.ingest.sources import Source
from airflow_odf.odf.operation import IngestError, IngestResult, operation_dir


def pull_polling(
    dataset: Dataset,
    alias: str,
    runner: EngineRunner,
    options: IngestOptions,
    *,
    system_time: Timestamp | None = None,
) -> IngestResult:
    """Ingests from the dataset's polling source until it has no more (one AddData group per iteration)."""
    state = root_state(dataset, alias)
    if state.polling_source is None:
        raise IngestError("no-source", f"{alias} has no active polling source (SetPollingSource)")
    source = state.polling_source
    result = new_result(alias, state)
    cache_dir = options.work_dir / "fetch" / str(state.dataset_id).removeprefix("did:odf:")
    fetcher = SourceFetcher(
        source.fetch,
        FetchOptions(
            cache_dir=cache_dir,
            has_previous_data=state.last_offset is not None,
            fetch_uncacheable=options.fetch_uncacheable,
            files_per_batch=options.files_per_batch,
            base_dir=options.source_dir,
            trust=options.trust,
            log=options.log,
        ),
    )
    run = Run(dataset, runner, options, result)
    allow_shell = options.trust.allow_shell_steps
    iteration = 0
    while options.max_iterations is None or iteration < options.max_iterations:
        iteration += 1
        now = system_time or Timestamp.now()
        prev_source_state = state.source_states.get("default")
        fetched = fetcher.fetch(prev_source_state, now)
        if fetched.up_to_date and options.set_watermark is None:
            if fetched.uncacheable:
                options.log(f"{alias}: source is uncacheable and was ingested before; use fetch_uncacheable")
            break
        try:
            with operation_dir(options.work_dir) as op_dir:
                inputs = [
                    InputFile(
                        # absolute: the engine's working directory is not ours (a session started elsewhere)
                        os.path.abspath(
                            prepare(source.prepare or [], f.path, op_dir, allow_shell=allow_shell)
                        ),
                        (f.source_event_time or now).isoformat(),
                    )
                    for f in fetched.files
                ]
                src = Source.polling(source)
                state = run_and_commit(run, state, src, inputs, fetched.new_source_state, now, op_dir)
        finally:
            for f in fetched.files:  # downloads, not the user's own files (file://, FilesGlob)
                if f.path.is_relative_to(cache_dir):
                    f.path.unlink(missing_ok=True)
        if not fetched.has_more:
            break
    return result

"""Push ingest: files or bytes given by the caller, through one of the dataset's push sources."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.engine_client.contract import InputFile
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.iteration import Run, Source, new_result, root_state, run_and_commit
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.operation import IngestError, IngestResult, operation_dir


def push_ingest(
    dataset: Dataset,
    alias: str,
    runner: EngineRunner,
    files: Sequence[Path],
    options: IngestOptions,
    *,
    source_name: str | None = None,
    event_time: Timestamp | None = None,
    system_time: Timestamp | None = None,
) -> IngestResult:
    """Ingests the given files through one of the dataset's push sources (AddPushSource)."""
    state = root_state(dataset, alias)
    push = push_source(state, alias, source_name)
    result = new_result(alias, state)
    now = system_time or Timestamp.now()
    for path in files:
        if not Path(path).is_file():
            raise IngestError("bad-input", f"{path}: no such file to ingest")
    with operation_dir(options.work_dir) as op_dir:
        inputs = [InputFile(os.path.abspath(p), (event_time or now).isoformat()) for p in files]
        src = Source(push.source_name, push.read, push.preprocess, push.merge)
        run_and_commit(Run(dataset, runner, options, result), state, src, inputs, None, now, op_dir)
    return result


def push_ingest_bytes(
    dataset: Dataset,
    alias: str,
    runner: EngineRunner,
    data: bytes,
    options: IngestOptions,
    **kwargs: Any,
) -> IngestResult:
    """Ingests in-memory data (spilled to a file first, as the reference does)."""
    with operation_dir(options.work_dir) as spill_dir:
        path = spill_dir / "input-data"
        path.write_bytes(data)
        return push_ingest(dataset, alias, runner, [path], options, **kwargs)


def push_source(state: ChainState, alias: str, source_name: str | None) -> model.AddPushSource:
    sources = state.push_sources
    if source_name is not None:
        if source_name not in sources:
            known = ", ".join(sorted(sources)) or "none"
            raise IngestError(
                "no-source", f"{alias} has no push source {source_name!r} (push sources: {known})"
            )
        return sources[source_name]
    if not sources:
        raise IngestError("no-source", f"{alias} has no push source (AddPushSource)")
    if len(sources) > 1:
        raise IngestError(
            "no-source", f"{alias} has several push sources ({', '.join(sorted(sources))}): name one"
        )
    return next(iter(sources.values()))

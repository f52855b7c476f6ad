"""Push ingest: files or bytes given by the caller, through one of the dataset's push sources."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.reconcile import reconciling_from
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.checks.request import check_suite_sql
from airflow_odf.odf.engine_client.contract import InputFile
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.iteration import Run, engine_claim, new_result, root_state, run_and_commit
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.sources import push_source
from airflow_odf.odf.operation import IngestError, IngestResult, committed_with_extra, operation_dir


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
    """Ingests the given files through one of the dataset's push sources (AddPushSource).

    When another writer moves the head first, the files are ingested again onto its head (pushing the
    same file twice is two pieces of data) — unless the winner's blocks carry this push's `extra`
    (`options.extra`, e.g. the Airflow task run): then the winner was an earlier try of the same push,
    and its commit is the result.
    """
    if options.checks:  # refused before anything is fetched or run
        check_suite_sql(options.checks)
    state = root_state(dataset, alias)
    push_source(state, alias, source_name)
    result = new_result(alias, state)
    if options.checks:
        result.checks = []  # declared: the key is there even when nothing new came
    now = system_time or Timestamp.now()
    for path in files:
        if not Path(path).is_file():
            raise IngestError("bad-input", f"{path}: no such file to ingest")
    claim = engine_claim(dataset, alias, options)
    run = Run(dataset, runner, options, result, claim)
    started_at = state.head

    def attempt(current: ChainState) -> ChainState:
        if current.head != started_at:
            landed = committed_with_extra(dataset, alias, options.extra or {}, since=started_at)
            if landed is not None:
                options.log(f"{alias}: an earlier try of this push committed it ({landed.new_head})")
                result.new_blocks, result.records = landed.new_blocks, landed.records
                return current
        with operation_dir(options.work_dir) as op_dir:
            inputs = [InputFile(os.path.abspath(p), (event_time or now).isoformat()) for p in files]
            source = push_source(current, alias, source_name)
            return run_and_commit(run, current, source, inputs, None, now, op_dir)

    with claim:
        final = reconciling_from(
            dataset, state, attempt, what=alias, record=result.reconciliation, log=options.log
        )
    result.new_head = None if final.head is None else str(final.head)
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

"""Ahead-of-data schema inference: the schema a root dataset's first ingest would record, from a sample.

The sample is fetched and prepared the way a polling ingest does it (the first batch of the source, as
if nothing had been ingested yet, in a scratch directory that is removed afterwards), or, for a push
source, it is the files the user gives. The engine reads and preprocesses it with the ingest's own code and
answers with the output schema — system columns included — without writing data (InferRequest). The
result is the ODF schema the first ingest would commit; `commit=True` records it before any data, which
push-style datasets need so that producers know the contract first.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.reconcile import Reconciliation, reconciling_from
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.engine_client.contract import (
    InferRequest,
    InferResponse,
    InputFile,
    TypeWidening,
    Vocab,
    schema_from_text,
)
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import union_to_plain
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.fetch.fetcher import FetchOptions, SourceFetcher
from airflow_odf.odf.ingest.prepare import prepare
from airflow_odf.odf.ingest.sources import Source, push_source
from airflow_odf.odf.ingest.trust import SourceTrust
from airflow_odf.odf.operation import (
    IngestError,
    Staging,
    engine_inputs,
    engine_out_dir,
    operation_dir,
    preprocess_steps,
    read_schema_text,
)
from airflow_odf.odf.schema.data_schema import data_schema_from_arrow, strip_encoding
from airflow_odf.odf.schema.evolution import SchemaChange, diff_schemas, odf_schema

_log = logging.getLogger(__name__)


class SchemaInferenceError(IngestError):
    """Inference was refused or failed; `kind` is the engine's or the core's reason. Nothing committed."""


@dataclass(frozen=True)
class InferOptions:
    """Scratch space, where relative FilesGlob paths resolve and what the manifest may do (as ingest's)."""

    work_dir: Path
    source_dir: Path | None = None
    trust: SourceTrust = field(default_factory=SourceTrust.resolve)
    log: Callable[[str], None] = _log.info


@dataclass
class InferResult:
    """The inferred schema, where it came from, and how it compares with the recorded one (if any)."""

    dataset: str
    source: str
    sample: list[str]
    schema: model.DataSchema
    widenings: list[TypeWidening] = field(default_factory=list)
    changes: list[SchemaChange] | None = None  # against the current schema; None: there is none
    committed: bool = False
    new_head: str | None = None
    reconciliation: Reconciliation = field(default_factory=Reconciliation)  # races lost while committing


def _source(state: ChainState, alias: str, source_name: str | None, with_files: bool) -> Source:
    """The polling source (unless sample files are given for a push source), or the named (or only)
    push source."""
    polling, pushes = state.polling_source, state.push_sources
    if source_name is None and polling is not None and (not with_files or not pushes):
        return Source.polling(polling)
    if source_name is None and not pushes:
        raise SchemaInferenceError("no-source", f"{alias} has no source (SetPollingSource or AddPushSource)")
    try:
        return push_source(state, alias, source_name)
    except IngestError as e:
        raise SchemaInferenceError(e.kind, str(e)) from None


def infer_schema(
    dataset: Dataset,
    alias: str,
    runner: EngineRunner,
    options: InferOptions,
    *,
    files: Sequence[Path] = (),
    source_name: str | None = None,
    commit: bool = False,
    system_time: Timestamp | None = None,
) -> InferResult:
    """The ODF schema the dataset's first ingest of the sample would record; committed if `commit` and the
    dataset has no schema yet (if it has exactly this one, nothing is done; another one is an error)."""
    state = dataset.state()
    if state.kind is not model.DatasetKind.ROOT:
        raise SchemaInferenceError(
            "not-root", f"{alias} is not a Root dataset: a derivative's schema comes from its first transform"
        )
    source = _source(state, alias, source_name, bool(files))
    if source.fetch is None and not files:
        raise SchemaInferenceError(
            "no-sample", f"{alias}: push source {source.name!r} has nothing to fetch; give sample files"
        )
    for path in files:
        if not Path(path).is_file():
            raise SchemaInferenceError("bad-input", f"{path}: no such sample file")
    now = system_time or Timestamp.now()
    with operation_dir(options.work_dir) as op_dir:
        inputs = _sample(source, files, alias, options, op_dir, now)
        staging = Staging.of(dataset, op_dir)
        try:
            request = _request(dataset, state, alias, source, inputs, op_dir, staging)
            response = InferResponse.from_json(runner.run(request.to_json(), op_dir))
        finally:
            if staging is not None:
                staging.clear(dataset)
    if response.error is not None:
        raise SchemaInferenceError(response.error.kind, f"{alias}: {response.error.message}")
    if response.output_schema is None:
        raise SchemaInferenceError("engine", f"{alias}: the engine reported no schema")
    schema = strip_encoding(data_schema_from_arrow(schema_from_text(response.output_schema)))
    result = InferResult(alias, source.name, [i.path for i in inputs], schema, response.widenings)
    result.changes = _changes(state, schema)
    if commit:
        reconciling_from(
            dataset,
            state,
            lambda current: _commit(dataset, current, result, now),
            what=f"{alias}: recording the inferred schema",
            record=result.reconciliation,
            log=options.log,
        )
    return result


def _request(
    dataset: Dataset,
    state: ChainState,
    alias: str,
    source: Source,
    inputs: list[InputFile],
    op_dir: Path,
    staging: Staging | None,
) -> InferRequest:
    """The engine's request. With a staging folder (a cluster that shares no disk with this process)
    sample files on this disk are uploaded there first, as an ingest's are (`engine_inputs`)."""
    return InferRequest(
        operation_id=op_dir.name,
        dataset_id=str(state.dataset_id),
        dataset_alias=alias,
        inputs=engine_inputs(dataset, staging, inputs),
        read=union_to_plain(model.ReadStep, source.read),
        merge=union_to_plain(model.MergeStrategy, source.merge),
        out_dir=engine_out_dir(staging, op_dir),  # nothing is written; where the engine could
        vocab=Vocab.of(state.vocab),
        read_schema=read_schema_text(source.read, alias),
        preprocess=preprocess_steps(source.preprocess, alias),
    )


def _changes(state: ChainState, schema: model.DataSchema) -> list[SchemaChange] | None:
    """How `schema` differs from the dataset's current one; None when it has none."""
    return None if state.schema is None else diff_schemas(odf_schema(state.schema), schema)


def _sample(
    source: Source, files: Sequence[Path], alias: str, options: InferOptions, op_dir: Path, now: Timestamp
) -> list[InputFile]:
    """The sample's input files: the given ones, else the source's first batch, prepared like an ingest."""
    sample = [(Path(os.path.abspath(p)), now) for p in files]
    if not sample:
        assert source.fetch is not None
        fetcher = SourceFetcher(
            source.fetch,
            FetchOptions(
                cache_dir=op_dir / "fetch",
                fetch_uncacheable=True,
                base_dir=options.source_dir,
                trust=options.trust,
                log=options.log,
            ),
        )
        fetched = fetcher.fetch(None, now)  # as for a dataset without data: from the start
        if not fetched.files:
            raise SchemaInferenceError("no-sample", f"{alias}: the source has no data to take a sample from")
        sample = [(f.path, f.source_event_time or now) for f in fetched.files]
    allow_shell = options.trust.allow_shell_steps
    return [
        InputFile(str(prepare(source.prepare, path, op_dir, allow_shell=allow_shell)), t.isoformat())
        for path, t in sample
    ]


def _commit(dataset: Dataset, state: ChainState, result: InferResult, now: Timestamp) -> None:
    """Records the inferred schema before any data; an existing equal schema is left alone (also one that
    another writer recorded while this one was inferring: `state` is then the head it left)."""
    result.changes = _changes(state, result.schema)
    if state.schema is not None:
        if not result.changes:
            return
        raise SchemaInferenceError(
            "has-schema",
            f"{result.dataset} already has a different schema; the inferred one was not committed "
            "(compare them with `odf schema diff`, change the schema with `odf schema apply`)",
        )
    commit = dataset.commit(
        [model.SetDataSchema(schema=result.schema)], system_time=now, expected_head=state.head
    )
    result.committed = True
    result.new_head = str(commit.new_head)

"""Running a query or an export on the engine: the request, the engine's answer, the result placed.

Read-only: the engine reads slice files where they lie (or staged copies in the operation's folder) and
writes only into the operation's output folder, from where the result is read (capped) or moved to the
asked path. For a repository in a bucket that the engine writes itself (s3a: a cluster that shares no
disk with this process) that folder is the operation's staging folder in the bucket,
`cache/operations/<id>/out`: the core fetches the result files from there and removes the folder, so no
executor needs this process's disk. Nothing in the repository changes — no block, ref or summary.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.odf.chain.dataset import STAGING_PREFIX
from airflow_odf.odf.engine_client.query_contract import QueryRequest, QueryResponse
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.operation import Staging, engine_out_dir, operation_dir
from airflow_odf.odf.query.output import place_file, place_folder, require_free
from airflow_odf.odf.query.tables import QueryError, dataset_names, query_tables
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.utils.engine_json import Vocab

DEFAULT_MAX_ROWS = 1000
FILE_FORMATS = ("parquet", "csv", "json")
_FILE_SUFFIXES = {".csv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json"}
EXPORT_FORMATS = {"parquet": "parquet", "csv": "csv", "ndjson": "json"}  # export name -> engine format


class ResultTooLargeError(QueryError):
    """A result asked for in memory (printed, XCom) has more rows than allowed."""


@dataclass(frozen=True)
class QueryOptions:
    """Where the engine works (`work_dir`) and which tables show the past (`as_of`: name -> block)."""

    work_dir: Path
    as_of: Mapping[str, str] = field(default_factory=dict)


def file_format(path: Path, fmt: str | None) -> str:
    """The format asked for, else the one the file's suffix names (.csv, .json/.jsonl/.ndjson), else
    Parquet."""
    return fmt or _FILE_SUFFIXES.get(path.suffix.lower(), "parquet")


def query_rows(
    repo: Repository, sql: str, runner: EngineRunner, options: QueryOptions, max_rows: int = DEFAULT_MAX_ROWS
) -> pa.Table:
    """The result in memory; ResultTooLargeError when it has more than `max_rows` rows."""
    with query_operation(repo, options.work_dir) as operation:
        request = _request(repo, sql, operation, options, fmt="parquet", max_rows=max_rows)
        files = operation.fetch(repo, run_request(repo, request, runner, operation.op_dir).files)
        table = pq.read_table(files[0]) if files else pa.table({})
    if table.num_rows > max_rows:
        raise ResultTooLargeError(
            f"the result has more than {max_rows} rows: write it to a file (an output path), "
            "aggregate it, or allow more rows"
        )
    return table


def query_to_file(
    repo: Repository,
    sql: str,
    runner: EngineRunner,
    options: QueryOptions,
    output: Path,
    fmt: str = "parquet",
    *,
    force: bool = False,
) -> Path:
    """Writes the whole result as one file at `output` (Parquet, CSV with a header, or JSON lines)."""
    if fmt not in FILE_FORMATS:
        raise QueryError(f"format {fmt!r}: expected one of {', '.join(FILE_FORMATS)}")
    require_free(output, force=force, forbidden=repo.root if repo.is_local else None)
    with query_operation(repo, options.work_dir) as operation:
        request = _request(repo, sql, operation, options, fmt=fmt)
        [written] = operation.fetch(repo, run_request(repo, request, runner, operation.op_dir).files)
        return place_file(written, output)


def export_dataset(
    repo: Repository,
    name: str,
    runner: EngineRunner,
    options: QueryOptions,
    to: Path,
    fmt: str = "parquet",
    *,
    force: bool = False,
) -> list[Path]:
    """Writes a dataset's records (every column, system columns too) in offset order into the folder
    `to` as `part-00000.<fmt>`, ...; `options.as_of` may hold its block."""
    if fmt not in EXPORT_FORMATS:
        raise QueryError(f"format {fmt!r}: expected one of {', '.join(EXPORT_FORMATS)}")
    require_free(to, force=force, forbidden=repo.root if repo.is_local else None)
    state = repo.dataset(name).state(record=False)
    if state.schema is None:
        raise QueryError(f"{name} has no data yet: nothing to export")
    offset = Vocab.of(state.vocab).offset_column
    sql = f"SELECT * FROM {_quoted(name)} ORDER BY {_quoted(offset)}"
    with query_operation(repo, options.work_dir) as operation:
        request = _request(repo, sql, operation, options, fmt=EXPORT_FORMATS[fmt], single_file=False)
        files = operation.fetch(repo, run_request(repo, request, runner, operation.op_dir).files)
        return place_folder(files, to, fmt)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class QueryOperation:
    """One query's folders: the local operation folder, and its staging folder in the repository's bucket
    when the engine writes there itself (then the engine's output goes there)."""

    op_dir: Path
    staging: Staging | None

    @property
    def out_dir(self) -> str:
        return engine_out_dir(self.staging, self.op_dir)

    def fetch(self, repo: Repository, files: list[str]) -> list[str]:
        """The engine's result files as local paths, in their order: downloaded from the staging folder
        (the result crosses to this process once, as the caller asked for it), or as they are."""
        if self.staging is None:
            return files
        local = []
        for index, uri in enumerate(files):
            target = self.op_dir / "result" / f"{index:05d}-{uri.rpartition('/')[2]}"
            repo.store.get_file(self.staging.key_of(uri), target)
            local.append(str(target))
        return local


@contextmanager
def query_operation(repo: Repository, work_dir: Path) -> Iterator[QueryOperation]:
    """A query's folders for its duration; its staging folder in the bucket is emptied at the end,
    whatever happened (a killed process leaves it to `odf gc`)."""
    with operation_dir(work_dir) as op_dir:
        staging = Staging.in_store(repo.store, op_dir)
        try:
            yield QueryOperation(op_dir, staging)
        finally:
            if staging is not None:
                staging.clear_in(repo.store)


def collect_query_staging(repo: Repository, min_age_seconds: float) -> list[str]:
    """Removes what killed queries left in the staging folders of a repository in a bucket (at its top
    level: `cache/operations/`) at least `min_age_seconds` old (`odf gc`); the keys removed. A local
    repository's `cache/operations` holds live operation folders instead, which `odf gc` collects by
    their locks: it is left alone here."""
    if repo.is_local:
        return []
    now = time.time()
    old = [key for key, modified in repo.store.list_tree(STAGING_PREFIX) if now - modified >= min_age_seconds]
    for key in old:
        repo.store.delete(key)
    return old


def _request(
    repo: Repository,
    sql: str,
    operation: QueryOperation,
    options: QueryOptions,
    *,
    fmt: str,
    max_rows: int | None = None,
    single_file: bool = True,
) -> QueryRequest:
    if not sql.strip():
        raise QueryError("the query is empty")
    return QueryRequest(
        operation_id=operation.op_dir.name,
        sql=sql,
        tables=query_tables(repo, sql, operation.op_dir, options.as_of),
        out_dir=operation.out_dir,
        format=fmt,
        single_file=single_file,
        max_rows=max_rows,
    )


def run_request(repo: Repository, request: QueryRequest, runner: EngineRunner, op_dir: Path) -> QueryResponse:
    """The engine's answer to `request`; QueryError with its message (naming the repository's datasets
    for an unknown table) when it refused or failed."""
    response = QueryResponse.from_json(runner.run(request.to_json(), op_dir))
    if response.error is None:
        return response
    message = response.error.message
    if response.error.kind == "unknown-table":
        message += (
            f"; the datasets of {repo.location}: {', '.join(dataset_names(repo)) or 'none'} (quote names "
            "with dots in backticks: SELECT * FROM `com.example.trades`)"
        )
    raise QueryError(message)

"""Running a query or an export on the engine: the request, the engine's answer, the result placed.

Read-only: the engine reads slice files where they lie (or staged copies in the operation's folder) and
writes only into the operation's folder, from where the result is read (capped) or moved to the asked
path. Nothing in the repository changes — no block, ref or summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.odf.engine_client.query_contract import QueryRequest, QueryResponse
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.operation import operation_dir
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
    with operation_dir(options.work_dir) as op_dir:
        request = _request(repo, sql, op_dir, options, fmt="parquet", max_rows=max_rows)
        response = run_request(repo, request, runner, op_dir)
        table = pq.read_table(response.files[0]) if response.files else pa.table({})
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
    with operation_dir(options.work_dir) as op_dir:
        request = _request(repo, sql, op_dir, options, fmt=fmt)
        [written] = run_request(repo, request, runner, op_dir).files
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
    with operation_dir(options.work_dir) as op_dir:
        request = _request(repo, sql, op_dir, options, fmt=EXPORT_FORMATS[fmt], single_file=False)
        files = run_request(repo, request, runner, op_dir).files
        return place_folder(files, to, fmt)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _request(
    repo: Repository,
    sql: str,
    op_dir: Path,
    options: QueryOptions,
    *,
    fmt: str,
    max_rows: int | None = None,
    single_file: bool = True,
) -> QueryRequest:
    if not sql.strip():
        raise QueryError("the query is empty")
    return QueryRequest(
        operation_id=op_dir.name,
        sql=sql,
        tables=query_tables(repo, sql, op_dir, options.as_of),
        out_dir=str(op_dir / "out"),
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

"""The `odf` commands of odf sql and odf export (queries over datasets, as of any block; docs/sql.md).

Both run on the engine the engine options choose (local Spark by default, spark-submit, Spark Connect)
and never write to the repository.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from airflow_odf.cli.engine import LazyRunner, engine_options
from airflow_odf.cli.errors import CommandError, positive_int
from airflow_odf.odf.repo.repository import Repository

_PRINTED = ("table", "csv", "json")


def _as_of(values: list[str] | None) -> dict[str, str]:
    pins: dict[str, str] = {}
    for value in values or []:
        name, sep, block = value.partition("=")
        if not sep or not name.strip() or not block.strip():
            raise CommandError(f"--as-of {value!r}: expected NAME=BLOCKHASH")
        pins[name.strip()] = block.strip()
    return pins


def cmd_sql(args: argparse.Namespace) -> None:
    from airflow_odf.odf.query.output import write_rows
    from airflow_odf.odf.query.run import QueryOptions, file_format, query_rows, query_to_file

    if args.format == "parquet" and args.output is None:
        raise CommandError("--format parquet needs --output PATH")
    repo = Repository.open(args.repo)
    options = QueryOptions(work_dir=repo.work_dir, as_of=_as_of(args.as_of))
    runner = LazyRunner(args)
    if args.output is not None:
        fmt = file_format(Path(args.output), args.format)
        if fmt == "table":
            raise CommandError("--format table is printed only: give csv, json or parquet with --output")
        path = query_to_file(repo, args.sql, runner, options, Path(args.output), fmt, force=args.force)
        print(f"wrote {path}", file=sys.stderr)
        return
    table = query_rows(repo, args.sql, runner, options, args.max_rows)
    write_rows(table, args.format or "table", sys.stdout)


def cmd_export(args: argparse.Namespace) -> None:
    from airflow_odf.odf.query.run import QueryOptions, export_dataset

    repo = Repository.open(args.repo)
    options = QueryOptions(work_dir=repo.work_dir, as_of={args.name: args.as_of} if args.as_of else {})
    files = export_dataset(
        repo, args.name, LazyRunner(args), options, Path(args.to), args.format, force=args.force
    )
    print(f"wrote {len(files)} file(s) into {args.to}", file=sys.stderr)


def register(groups: Any, repo_arg: argparse.ArgumentParser) -> None:
    """Adds `sql` and `export` to the `odf` parser."""
    engine_arg = engine_options()
    p = groups.add_parser(
        "sql",
        parents=[repo_arg, engine_arg],
        help="run a Spark SQL query over the repository's datasets (each a table by its name)",
    )
    p.add_argument("sql", help="one query (SELECT, WITH, VALUES, TABLE); dotted names in backticks")
    p.add_argument(
        "--as-of",
        action="append",
        metavar="NAME=BLOCKHASH",
        help="the table NAME shows only the data up to that block of its chain (repeatable)",
    )
    p.add_argument(
        "--format",
        choices=(*_PRINTED, "parquet"),
        help="printed: table (default), csv or json; with --output: parquet, csv or json (JSON lines), "
        "by default from the file's suffix (else parquet)",
    )
    p.add_argument("--output", "-o", metavar="PATH", help="write the whole result to this file")
    p.add_argument(
        "--max-rows",
        type=positive_int,
        default=1000,
        help="printed results: fail above this many rows (default 1000; --output has no limit)",
    )
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    p.set_defaults(func=cmd_sql)
    p = groups.add_parser(
        "export",
        parents=[repo_arg, engine_arg],
        help="write a dataset's records (system columns too, in offset order) to files",
    )
    p.add_argument("name")
    p.add_argument("--to", required=True, metavar="PATH", help="the folder to write part files into")
    p.add_argument("--format", choices=("parquet", "csv", "ndjson"), default="parquet")
    p.add_argument("--as-of", metavar="BLOCKHASH", help="the records up to this block of the chain")
    p.add_argument("--force", action="store_true", help="replace PATH if it is not empty")
    p.set_defaults(func=cmd_export)

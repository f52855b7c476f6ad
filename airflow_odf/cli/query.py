"""The `odf` commands of odf sql, odf export and odf verify-query (queries over datasets, as of any
block, and their signed commitments; docs/sql.md, docs/query-commitments.md).

They run on the engine the engine options choose (local Spark by default, spark-submit, Spark Connect)
and never write to the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_odf.cli.engine import LazyRunner, engine_options
from airflow_odf.cli.errors import CommandError, VerificationFailed, positive_int
from airflow_odf.odf.query.request import DATA_FORMATS
from airflow_odf.odf.repo.repository import Repository

if TYPE_CHECKING:
    from airflow_odf.odf.query.endpoint import QueryEndpoint
    from airflow_odf.odf.query.request import QueryInput

_PRINTED = ("table", "csv", "json")
MAX_COMMITMENT_FILE_BYTES = 64 * 1024 * 1024


def _as_of(values: list[str] | None) -> dict[str, str]:
    pins: dict[str, str] = {}
    for value in values or []:
        name, sep, block = value.partition("=")
        if not sep or not name.strip() or not block.strip():
            raise CommandError(f"--as-of {value!r}: expected NAME=BLOCKHASH")
        pins[name.strip()] = block.strip()
    return pins


def _rows(text: str) -> int:
    """An argparse type for --limit and --skip: 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number, 0 or more")
    return int(text)


def cmd_sql(args: argparse.Namespace) -> None:
    from airflow_odf.odf.query.output import write_rows
    from airflow_odf.odf.query.run import QueryOptions, file_format, query_rows, query_to_file

    if args.format == "parquet" and args.output is None:
        raise CommandError("--format parquet needs --output PATH")
    repo = Repository.open(args.repo)
    if args.proof is not None:
        _write_proof(args, repo)
        return
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


def _commitment_request(args: argparse.Namespace, repo: Repository) -> QueryInput:
    """The kamu query request `odf sql --proof` answers: the SQL, paging, format, and the --as-of pins
    (the other datasets it reads are pinned to their heads when it runs)."""
    from airflow_odf.odf.query.request import DatasetPin, QueryInput, parse_multihash

    pins = tuple(
        DatasetPin(repo.resolve(name), name, parse_multihash(block, f"--as-of {name}"))
        for name, block in _as_of(args.as_of).items()
    )
    return QueryInput(
        query=args.sql,
        data_format=args.data_format,
        include=frozenset({"Proof", "Schema"} if args.schema else {"Proof"}),
        datasets=pins or None,
        skip=args.skip,
        limit=args.limit,
    )


def _write_proof(args: argparse.Namespace, repo: Repository) -> None:
    """`odf sql --proof [FILE]`: the signed commitment document, to FILE or stdout."""
    from airflow_odf.odf.query.commitment import answer_query
    from airflow_odf.odf.query.output import require_free

    if args.output is not None or args.format is not None:
        raise CommandError("--proof writes the commitment document (JSON): give no --output or --format")
    target = None if args.proof == "-" else Path(args.proof)
    if target is not None:
        require_free(target, force=args.force, forbidden=repo.root if repo.is_local else None)
    request = _commitment_request(args, repo)
    node_key = repo.keys.node_secret()
    answer = answer_query(repo, LazyRunner(args), request, work_dir=repo.work_dir, node_key=node_key)
    text = json.dumps(answer, indent=2, ensure_ascii=False) + "\n"
    if target is None:
        sys.stdout.write(text)
        return
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, target)
    print(f"wrote {target} (signed by {answer['proof']['verificationMethod']})", file=sys.stderr)


def _read_document(path: str) -> Any:
    """A commitment document from a file (`-`: stdin), bounded in size."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_COMMITMENT_FILE_BYTES + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_COMMITMENT_FILE_BYTES + 1)
    except OSError as e:
        raise CommandError(f"{path}: cannot read file: {e.strerror or e}") from None
    if len(data) > MAX_COMMITMENT_FILE_BYTES:
        raise CommandError(f"{path}: larger than the {MAX_COMMITMENT_FILE_BYTES} bytes a commitment may have")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise CommandError(f"{path}: not JSON: {e}") from None


def cmd_verify_query(args: argparse.Namespace) -> None:
    """Prints kamu's /verify answer; exit 0 when it is ok, 4 (as `odf verify`) when the commitment fails
    a check."""
    from airflow_odf.odf.query.commitment import verify_commitment
    from airflow_odf.odf.query.request import RequestError

    repo = Repository.open(args.repo)
    document = _read_document(args.file)
    try:
        verdict = verify_commitment(repo, LazyRunner(args), document, work_dir=repo.work_dir)
    except RequestError as e:
        raise CommandError(f"{args.file}: {e}") from None
    print(json.dumps(verdict, indent=2, ensure_ascii=False))
    if not verdict["ok"]:
        raise VerificationFailed


def query_endpoint(args: argparse.Namespace, repo: Repository) -> QueryEndpoint:
    """kamu's query API over `repo` for `odf serve --query`: the engine of the engine options, the
    node's key from the repository's key store (created on first use)."""
    from airflow_odf.odf.query.endpoint import QueryEndpoint

    return QueryEndpoint(repo, LazyRunner(args), work_dir=repo.work_dir, node_key=repo.keys.node_secret())


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
    p.add_argument("--force", action="store_true", help="overwrite --output (or --proof FILE) if it exists")
    p.add_argument(
        "--proof",
        nargs="?",
        const="-",
        metavar="FILE",
        help="write kamu's signed query commitment (input, output, subQueries, commitment, proof) as JSON "
        "to FILE (default: stdout), signed by the node key (docs/query-commitments.md)",
    )
    p.add_argument("--limit", type=_rows, default=100, help="--proof: at most this many rows (default 100)")
    p.add_argument("--skip", type=_rows, default=0, help="--proof: leave out the first rows (default 0)")
    p.add_argument(
        "--data-format",
        choices=DATA_FORMATS,
        default="JsonAoS",
        help="--proof: the output's layout (default JsonAoS)",
    )
    p.add_argument("--schema", action="store_true", help="--proof: include the result's schema (ArrowJson)")
    p.set_defaults(func=cmd_sql)
    p = groups.add_parser(
        "verify-query",
        parents=[repo_arg, engine_arg],
        help="re-execute a query commitment against the repository and answer as kamu's /verify",
    )
    p.add_argument(
        "file", metavar="FILE", help="the commitment (as `odf sql --proof` writes it); - for stdin"
    )
    p.set_defaults(func=cmd_verify_query)
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

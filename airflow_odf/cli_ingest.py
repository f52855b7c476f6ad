"""The data commands of `odf`: `pull` (polling ingest), `ingest` (push), `transform` and `tail`.

The engine is the in-process local Spark (default) or `spark-submit` (`--engine spark-submit --master
URL`), also chosen with $ODF_ENGINE and $ODF_SPARK_MASTER.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.repository import Repository
from airflow_odf.odf.timestamps import Timestamp

if TYPE_CHECKING:  # the data modules load pyarrow: only the data commands pay for it
    from airflow_odf.odf.engine_runner import EngineRunner
    from airflow_odf.odf.ingest import IngestOptions, IngestResult


class CommandError(OdfError):
    """A bad command-line value (reported like other bad input: exit code 2)."""


def _runner(args: argparse.Namespace) -> EngineRunner:
    from airflow_odf.odf.engine_runner import SparkSubmitRunner

    if args.engine == "spark-submit":
        return SparkSubmitRunner(args.master or "local[*]", log=lambda line: print(line, file=sys.stderr))
    from airflow_odf.engine.local_runner import LocalSparkRunner  # imports pyspark: only when needed

    return LocalSparkRunner(args.master or "local[*]")


def _timestamp(value: str | None, option: str) -> Timestamp | None:
    if value is None:
        return None
    try:
        return Timestamp.parse(value)
    except OdfError as e:
        raise CommandError(f"{option}: {e} (expected RFC 3339, e.g. 2024-01-31T00:00:00Z)") from None


def _options(args: argparse.Namespace, repo: Repository, **kwargs: Any) -> IngestOptions:
    from airflow_odf.odf.ingest import IngestOptions

    return IngestOptions(
        work_dir=repo.root / "cache",
        max_records_per_slice=args.max_records_per_slice,
        bad_records="quarantine" if args.quarantine_bad_records else "fail",
        log=lambda line: print(line, file=sys.stderr),
        **kwargs,
    )


def _report(args: argparse.Namespace, result: IngestResult) -> None:
    if args.format == "json":
        print(json.dumps(result.as_dict(), indent=2))
    elif result.up_to_date:
        print(f"{result.dataset}: up to date ({result.new_head})")
    else:
        print(
            f"{result.dataset}: {result.records} record(s) in {len(result.new_blocks)} new block(s), "
            f"head {result.new_head}"
        )


def cmd_pull(args: argparse.Namespace) -> None:
    from airflow_odf.odf.ingest import pull_polling

    repo = Repository.open(args.repo)
    dataset = repo.dataset(args.name)
    options = _options(
        args,
        repo,
        fetch_uncacheable=args.fetch_uncacheable,
        set_watermark=_timestamp(args.set_watermark, "--set-watermark"),
        files_per_batch=args.files_per_batch,
    )
    _report(args, pull_polling(dataset, args.name, _runner(args), options))


def cmd_ingest(args: argparse.Namespace) -> None:
    from airflow_odf.odf.ingest import push_ingest

    repo = Repository.open(args.repo)
    dataset = repo.dataset(args.name)
    result = push_ingest(
        dataset,
        args.name,
        _runner(args),
        [os.path.abspath(f) for f in args.files],
        _options(args, repo),
        source_name=args.source,
        event_time=_timestamp(args.event_time, "--event-time"),
    )
    _report(args, result)


def cmd_transform(args: argparse.Namespace) -> None:
    from airflow_odf.odf.transform import TransformOptions, run_transform

    pins = {}
    for value in args.input_head or []:
        alias, sep, block = value.partition("=")
        if not sep or not alias or not block:
            raise CommandError(f"--input-head {value!r}: expected ALIAS=HASH")
        pins[alias] = block
    repo = Repository.open(args.repo)
    options = TransformOptions(
        work_dir=repo.root / "cache",
        pinned_heads=pins or None,
        max_input_records=args.max_input_records,
        log=lambda line: print(line, file=sys.stderr),
    )
    _report(args, run_transform(repo, args.name, _runner(args), options))


def cmd_tail(args: argparse.Namespace) -> None:
    from airflow_odf.odf.data_access import tail

    dataset = Repository.open(args.repo).dataset(args.name)
    table = tail(dataset, args.n)
    rows = [] if table is None else table.to_pylist()
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=str, ensure_ascii=False))
        return
    names = [] if table is None else table.column_names
    if args.format == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([["" if r[c] is None else r[c] for c in names] for r in rows])
        return
    cells = [names, *[["" if r[c] is None else str(r[c]) for c in names] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(names))]
    for row in cells:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def register(groups: Any, repo_arg: argparse.ArgumentParser) -> None:
    """Adds `pull`, `ingest`, `transform` and `tail` to the `odf` parser."""
    engine_arg = argparse.ArgumentParser(add_help=False)
    engine_arg.add_argument(
        "--engine", choices=("local", "spark-submit"), default=os.environ.get("ODF_ENGINE", "local")
    )
    engine_arg.add_argument("--master", default=os.environ.get("ODF_SPARK_MASTER"), help="Spark master URL")
    engine_arg.add_argument("--format", choices=("text", "json"), default="text")
    ingest_arg = argparse.ArgumentParser(add_help=False)
    ingest_arg.add_argument("--max-records-per-slice", type=int, help="split the new data into slices")
    ingest_arg.add_argument(
        "--quarantine-bad-records", action="store_true", help="set malformed records aside instead of failing"
    )
    p = groups.add_parser(
        "pull", parents=[repo_arg, engine_arg, ingest_arg], help="ingest from a dataset's polling source"
    )
    p.add_argument("name")
    p.add_argument(
        "--fetch-uncacheable", action="store_true", help="re-fetch sources without caching headers"
    )
    p.add_argument("--set-watermark", metavar="T", help="advance the watermark to this RFC 3339 time")
    p.add_argument("--files-per-batch", type=int, default=1, help="FilesGlob: files per AddData block")
    p.set_defaults(func=cmd_pull)
    p = groups.add_parser(
        "ingest", parents=[repo_arg, engine_arg, ingest_arg], help="push files into a push source"
    )
    p.add_argument("name")
    p.add_argument("files", nargs="+")
    p.add_argument("--source", help="the push source's name (needed when there are several)")
    p.add_argument("--event-time", metavar="T", help="event time for records that carry none (RFC 3339)")
    p.set_defaults(func=cmd_ingest)
    p = groups.add_parser(
        "transform", parents=[repo_arg, engine_arg], help="bring a derivative dataset up to date"
    )
    p.add_argument("name")
    p.add_argument(
        "--input-head",
        action="append",
        metavar="ALIAS=HASH",
        help="process this input only up to that block (repeatable)",
    )
    p.add_argument("--max-input-records", type=int, help="split a backlog into runs of this many records")
    p.set_defaults(func=cmd_transform)
    p = groups.add_parser("tail", parents=[repo_arg], help="print a dataset's last records")
    p.add_argument("name")
    p.add_argument("-n", type=int, default=10)
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")
    p.set_defaults(func=cmd_tail)

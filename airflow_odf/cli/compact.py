"""The `odf compact` command: hard compaction of a dataset's slices (docs/compaction.md)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from airflow_odf.cli.engine import LazyRunner, engine_options
from airflow_odf.cli.errors import CommandError, positive_int
from airflow_odf.odf.compaction.plan import (
    DEFAULT_MAX_SLICE_RECORDS,
    DEFAULT_MAX_SLICE_SIZE,
    CompactionError,
    parse_byte_size,
)
from airflow_odf.odf.repo.repository import Repository


def _byte_size(text: str) -> int:
    try:
        value = parse_byte_size(text)
    except CompactionError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected at least 1 byte")
    return value


def cmd_compact(args: argparse.Namespace) -> None:
    from airflow_odf.odf.compaction.execute import run_compaction  # loads pyarrow
    from airflow_odf.odf.compaction.plan import CompactionOptions

    if args.keep_metadata_only and args.verify:
        raise CommandError("odf compact: --verify checks merged records; --keep-metadata-only keeps none")
    repo = Repository.open(args.repo)
    options = CompactionOptions(
        max_slice_size=args.max_slice_size,
        max_slice_records=args.max_slice_records,
        keep_metadata_only=args.keep_metadata_only,
        verify=args.verify,
    )
    result = run_compaction(
        repo, args.name, LazyRunner(args), options, log=lambda line: print(line, file=sys.stderr)
    )
    if args.format == "json":
        print(json.dumps(result.as_dict(), indent=2))
    elif result.up_to_date:
        print(f"{result.dataset}: nothing to compact (head {result.new_head})")
    else:
        print(
            f"{result.dataset}: {result.blocks_before} block(s) with {result.slices_before} slice(s) "
            f"became {result.blocks_after} block(s) with {result.slices_after} slice(s), "
            f"head {result.new_head}" + (" (records verified)" if result.verified else "")
        )


def register(groups: Any, repo_arg: argparse.ArgumentParser) -> None:
    """Adds `odf compact` to the `odf` parser."""
    p = groups.add_parser(
        "compact",
        parents=[repo_arg, engine_options()],
        help="merge a dataset's small slices into bigger ones (hard compaction: every block hash changes)",
    )
    p.add_argument("name")
    p.add_argument(
        "--max-slice-size",
        type=_byte_size,
        default=DEFAULT_MAX_SLICE_SIZE,
        metavar="SIZE",
        help="largest merged slice, e.g. 300MB (the default) or 64MiB",
    )
    p.add_argument(
        "--max-slice-records",
        type=positive_int,
        default=DEFAULT_MAX_SLICE_RECORDS,
        metavar="N",
        help=f"most records in a merged slice (default {DEFAULT_MAX_SLICE_RECORDS:,})",
    )
    p.add_argument(
        "--keep-metadata-only",
        action="store_true",
        help="drop all data blocks and keep the metadata (roots and derivatives): the next pull starts over",
    )
    p.add_argument(
        "--verify", action="store_true", help="check that every merged record is unchanged before committing"
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_compact)

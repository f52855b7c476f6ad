"""The schema commands of `odf` (docs/schemas.md): show, infer, diff, apply, migrate.

`show` and `infer` print the schema alone on stdout (ODF YAML by default, which `diff` and `apply` read
back), and notes — widenings, details a format cannot carry, a legacy schema — on stderr. `diff` checks
a proposed schema against the evolution rules without committing: it prints one line per change
(column, old, new, rule, allowed) and exits with 4 when a change is denied (2: the check could not run).
`apply` commits a proposed schema the rules allow; `migrate` turns a legacy raw Arrow schema (RFC-010)
into ODF form. Only `infer` runs the engine (`--engine`, `--master`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from airflow_odf.cli.data import source_trust, trust_options
from airflow_odf.cli.engine import LazyRunner, engine_options
from airflow_odf.cli.errors import SchemaCommandError, VerificationFailed
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository

FORMATS = ("odf-yaml", "ddl", "arrow", "spark")


def _note(line: str) -> None:
    print(line, file=sys.stderr)


def _render(schema: model.DataSchema, fmt: str, name: str) -> str:
    """The schema as text in `fmt`; what the format cannot carry is noted on stderr."""
    from airflow_odf.odf.schema.data_schema import data_schema_to_arrow
    from airflow_odf.odf.schema.text import schema_ddl, schema_yaml

    if fmt == "odf-yaml":
        return schema_yaml(schema)
    if fmt == "ddl":
        ddl = schema_ddl(schema)
        for note in ddl.notes:
            _note(f"{name}: not in the DDL: {note}")
        return ddl.text + "\n"
    arrow = data_schema_to_arrow(schema)
    if fmt == "arrow":
        return arrow.to_string(show_schema_metadata=False) + "\n"
    return _spark_tree(arrow, name)


def _spark_tree(arrow: Any, name: str) -> str:
    """The Spark schema the engine works with, and every recorded widening (pyspark loaded, no JVM)."""
    from airflow_odf.engine.errors import EngineInputError
    from airflow_odf.engine.spark_types import arrow_to_spark
    from airflow_odf.utils.engine_json import TypeWidening

    widenings: list[TypeWidening] = []
    try:
        struct = arrow_to_spark(arrow, widenings)
    except EngineInputError as e:
        raise SchemaCommandError(f"{name}: {e.message}") from None
    for w in widenings:
        _note(f"{name}: widened in Spark: {w}")
    return struct.treeString()


def _dataset_schema(args: argparse.Namespace) -> tuple[model.DataSchema, model.SetDataSchema]:
    from airflow_odf.odf.repo.schema_migration import current_schema

    dataset = Repository.open(args.repo).dataset(args.name)
    state = dataset.state()
    schema = current_schema(state, args.name)
    assert state.schema is not None
    return schema, state.schema


def cmd_show(args: argparse.Namespace) -> None:
    from airflow_odf.odf.repo.schema_migration import is_legacy
    from airflow_odf.odf.schema.raw_arrow import decode_raw_arrow_schema

    schema, event = _dataset_schema(args)
    if is_legacy(event):
        _note(
            f"{args.name}: the schema is a legacy rawArrowSchema (RFC-010), shown in ODF form; "
            f"`odf schema migrate {args.name}` records it so"
        )
        if args.format == "arrow":  # the Arrow schema as recorded, layouts included
            assert event.raw_arrow_schema is not None
            raw = decode_raw_arrow_schema(event.raw_arrow_schema)
            sys.stdout.write(raw.to_string(show_schema_metadata=False) + "\n")
            return
    sys.stdout.write(_render(schema, args.format, args.name))


def changes_plain(changes: list[Any]) -> list[dict[str, Any]]:
    return [
        {"column": c.column, "old": c.old, "new": c.new, "rule": c.rule, "allowed": c.allowed}
        for c in changes
    ]


def print_changes(changes: list[Any], out: Any = None) -> None:
    """One line per change, in aligned columns: COLUMN OLD NEW RULE ALLOWED (to stdout by default)."""
    rows = [("COLUMN", "OLD", "NEW", "RULE", "ALLOWED")]
    rows += [(c.column, c.old or "-", c.new or "-", c.rule, "yes" if c.allowed else "no") for c in changes]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip(),
            file=out or sys.stdout,
        )


def cmd_infer(args: argparse.Namespace) -> None:
    from airflow_odf.odf.ingest.schema_inference import InferOptions, infer_schema

    repo = Repository.open(args.repo)
    dataset = repo.dataset(args.name)
    result = infer_schema(
        dataset,
        args.name,
        LazyRunner(args),
        InferOptions(work_dir=repo.work_dir, trust=source_trust(args), log=_note),
        files=[Path(f) for f in args.files],
        source_name=args.source,
        commit=args.commit,
    )
    sys.stdout.write(_render(result.schema, args.format, args.name))
    _note(f"{args.name}: inferred from {', '.join(result.sample)} (source {result.source})")
    for w in result.widenings:
        _note(f"{args.name}: widened in Spark: {w}")
    if result.changes:
        _note(f"{args.name}: differs from the recorded schema:")
        print_changes(result.changes, sys.stderr)
    if result.committed:
        _note(f"{args.name}: schema committed before any data (block {result.new_head})")
    elif args.commit:
        _note(f"{args.name}: the recorded schema is already this one; nothing committed")


def cmd_diff(args: argparse.Namespace) -> None:
    from airflow_odf.odf.repo.schema_migration import check_proposed
    from airflow_odf.odf.schema.text import read_proposed_schema

    proposed = read_proposed_schema(args.proposed)
    dataset = Repository.open(args.repo).dataset(args.name)
    _, changes = check_proposed(dataset, proposed, args.name)
    allowed = all(c.allowed for c in changes)
    if args.format == "json":
        report = {"dataset": args.name, "allowed": allowed, "changes": changes_plain(changes)}
        print(json.dumps(report, indent=2))
    elif not changes:
        print(f"{args.name}: no change")
    else:
        print_changes(changes)
    if not allowed:
        denied = sorted({c.rule for c in changes if not c.allowed})
        _note(f"{args.name}: the proposed schema breaks the evolution rules ({', '.join(denied)})")
        raise VerificationFailed


def cmd_apply(args: argparse.Namespace) -> None:
    from airflow_odf.odf.repo.schema_migration import apply_schema
    from airflow_odf.odf.schema.text import read_proposed_schema

    proposed = read_proposed_schema(args.proposed)
    dataset = Repository.open(args.repo).dataset(args.name)
    result = apply_schema(dataset, proposed, args.name)
    if result.changes:
        print_changes(result.changes)
    print(result.message)


def cmd_migrate(args: argparse.Namespace) -> None:
    from airflow_odf.odf.repo.schema_migration import migrate_schema

    dataset = Repository.open(args.repo).dataset(args.name)
    print(migrate_schema(dataset, args.name).message)


SUBCOMMANDS = ("show", "infer", "diff", "apply", "migrate")


def expand_shorthand(argv: list[str]) -> list[str]:
    """`odf schema NAME ...` is `odf schema show NAME ...` (the short form the issue and docs use)."""
    if len(argv) >= 2 and argv[0] == "schema" and argv[1] not in SUBCOMMANDS and not argv[1].startswith("-"):
        return ["schema", "show", *argv[1:]]
    return argv


def register(groups: Any, repo_arg: argparse.ArgumentParser) -> None:
    """Adds `odf schema show|infer|diff|apply|migrate` to the `odf` parser."""
    schema = groups.add_parser(
        "schema", help="show, infer, check, change and migrate dataset schemas"
    ).add_subparsers(dest="command", required=True)
    format_arg = argparse.ArgumentParser(add_help=False)
    format_arg.add_argument("--format", choices=FORMATS, default="odf-yaml", help="default: odf-yaml")

    p = schema.add_parser("show", parents=[repo_arg, format_arg], help="print a dataset's current schema")
    p.add_argument("name")
    p.set_defaults(func=cmd_show)

    p = schema.add_parser(
        "infer",
        parents=[repo_arg, format_arg, engine_options(), trust_options()],
        help="the schema the first ingest of a sample would record (from the source, or the given files)",
    )
    p.add_argument("name")
    p.add_argument("files", nargs="*", metavar="FILE", help="sample files (needed for a push source)")
    p.add_argument("--source", help="the push source's name (needed when there are several)")
    p.add_argument("--commit", action="store_true", help="record the schema now, before any data")
    p.set_defaults(func=cmd_infer)

    p = schema.add_parser(
        "diff", parents=[repo_arg], help="check a proposed schema against the evolution rules (no commit)"
    )
    p.add_argument("name")
    p.add_argument("--proposed", required=True, metavar="FILE", help="ODF YAML (schema or event) or DDL")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_diff)

    p = schema.add_parser(
        "apply", parents=[repo_arg], help="commit a proposed schema, if the evolution rules allow it"
    )
    p.add_argument("name")
    p.add_argument("--proposed", required=True, metavar="FILE", help="ODF YAML (schema or event) or DDL")
    p.set_defaults(func=cmd_apply)

    p = schema.add_parser(
        "migrate", parents=[repo_arg], help="record a legacy raw Arrow schema (RFC-010) in ODF form"
    )
    p.add_argument("name")
    p.set_defaults(func=cmd_migrate)

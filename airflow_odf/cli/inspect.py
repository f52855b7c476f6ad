"""The `odf` commands of odf delete, odf rename and odf inspect lineage|query|schema|provenance|rejected
(docs/inspect.md, docs/provenance.md, docs/repository.md, docs/checks.md).

`delete` and `rename` change names only (objects become garbage for `odf gc`); `inspect` reads. What a
repository holds is untrusted text: JSON and HTML escape it, text output escapes control characters.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import Any

from airflow_odf.cli.errors import CommandError, positive_int
from airflow_odf.cli.schema import changes_plain, print_changes
from airflow_odf.odf.chain.offsets import Interval, interval_plain
from airflow_odf.odf.checks.quarantine import RejectedSlice, find_rejected, list_rejected
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.manifests import table_to_plain
from airflow_odf.odf.repo.history import QueryVersion, SchemaVersion, query_history, schema_history
from airflow_odf.odf.repo.lineage import Lineage, lineage
from airflow_odf.odf.repo.lineage_picture import (
    GraphvizMissingError,
    lineage_dot,
    lineage_html,
    lineage_svg,
    lineage_text,
)
from airflow_odf.odf.repo.overview import repository_overview
from airflow_odf.odf.repo.provenance import (
    DEFAULT_MAX_BLOCKS,
    RESOLVED,
    WHAT_IT_PROVES,
    DatasetProvenance,
    Provenance,
    ProvenanceBlock,
    StepInput,
    provenance,
)
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.text import schema_ddl, schema_yaml

LINEAGE_FORMATS = ("shell", "dot", "svg", "html", "json")


def _printable(text: str) -> str:
    return text if text.isprintable() else repr(text)


# ----- delete and rename -----


def cmd_delete(args: argparse.Namespace) -> None:
    for name, did in Repository.open(args.repo).delete(args.names, recursive=args.recursive):
        print(f"deleted {_printable(name)} ({did})")
    print("their blocks and data are garbage now: `odf gc` removes them")


def cmd_rename(args: argparse.Namespace) -> None:
    did = Repository.open(args.repo).rename(args.old, args.new)
    print(f"renamed {args.old} to {args.new} ({did})")


# ----- lineage -----


def lineage_plain(graph: Lineage) -> dict[str, Any]:
    """The `-o json` form: nodes with what is known of each, and edges `from` an input `to` its reader."""
    return {
        "nodes": [
            {
                "id": n.key,
                "name": n.name,
                "kind": n.kind,
                "head": n.head,
                "records": n.records,
                "last_update": n.last_update,
                "error": n.error,
            }
            for n in graph.nodes
        ],
        "edges": [{"from": e.source, "to": e.target, "relation": e.relation} for e in graph.edges],
    }


def cmd_lineage(args: argparse.Namespace) -> None:
    repo = Repository.open(args.repo)
    graph = lineage(repository_overview(repo))
    if args.names:
        graph = graph.around([str(repo.resolve(name, damaged=True)) for name in args.names])
    try:
        if args.output == "shell":
            text = lineage_text(graph)
        elif args.output == "dot":
            text = lineage_dot(graph)
        elif args.output == "svg":
            text = lineage_svg(graph) + "\n"
        elif args.output == "html":
            text = lineage_html(graph, f"Lineage of {repo.location}")
        else:
            text = json.dumps(lineage_plain(graph), indent=2) + "\n"
    except GraphvizMissingError as e:
        raise CommandError(
            f"{e}: install it (Debian: apt-get install graphviz), or ask for -o dot, json or shell"
        ) from None
    sys.stdout.write(text)


# ----- query history -----


def _recorded(version: SchemaVersion | QueryVersion) -> dict[str, Any]:
    r = version.recorded
    return {"block": str(r.block_hash), "sequence_number": r.sequence_number, "system_time": r.system_time}


def _query_plain(v: QueryVersion) -> dict[str, Any]:
    t = v.transform
    return {
        **_recorded(v),
        "engine": t.engine,
        "version": t.version,
        "queries": [{"alias": s.alias, "query": s.query} for s in t.queries or []],
        "temporal_tables": [table_to_plain(tt) for tt in t.temporal_tables or []],
        "inputs": [{"alias": i.alias, "dataset_id": i.dataset_id, "name": i.name} for i in v.inputs],
    }


def _indented(text: str, by: str = "    ") -> str:
    """Each line indented, and escaped when it holds control characters (tabs are fine)."""
    return "".join(f"{by}{_printable(line.expandtabs())}\n" for line in text.rstrip().splitlines())


def _heading(version: SchemaVersion | QueryVersion) -> str:
    r = version.recorded
    return f"block {r.block_hash}  #{r.sequence_number}  {r.system_time}\n"


def _query_text(v: QueryVersion) -> str:
    t = v.transform
    out = _heading(v) + f"  engine: {t.engine}" + (f" {t.version}" if t.version else "") + "\n  inputs:\n"
    for i in v.inputs:
        name = _printable(i.name) if i.name else "(not in this repository)"
        out += f"    {_printable(i.alias)}: {name} {i.dataset_id}\n"
    for tt in t.temporal_tables or []:
        out += f"  temporal table {_printable(tt.name)} (primary key {', '.join(tt.primary_key)})\n"
    for step in t.queries or []:
        out += f"  step {_printable(step.alias)}:\n" if step.alias else "  output:\n"
        out += _indented(step.query)
    return out


def cmd_query(args: argparse.Namespace) -> None:
    versions = query_history(Repository.open(args.repo), args.name)
    if args.format == "json":
        print(json.dumps({"dataset": args.name, "versions": [_query_plain(v) for v in versions]}, indent=2))
    else:
        sys.stdout.write("\n".join(_query_text(v) for v in versions))


# ----- schema and its history -----


def _schema_plain(v: SchemaVersion) -> dict[str, Any]:
    changes = None if v.changes is None else changes_plain(v.changes)
    return {**_recorded(v), "legacy": v.legacy, "schema": table_to_plain(v.schema), "changes": changes}


def _print_schema(v: SchemaVersion, history: bool) -> None:
    legacy = "  (a legacy raw Arrow schema, shown in ODF form)" if v.legacy else ""
    sys.stdout.write(_heading(v).rstrip("\n") + legacy + "\n")
    if history:
        if v.changes is None:
            print("  the first schema")
        elif not v.changes:
            print("  no column changed (the same schema recorded again)")
        else:
            table = io.StringIO()
            print_changes(v.changes, table)
            sys.stdout.write(_indented(table.getvalue(), "  "))
    try:
        columns = schema_ddl(v.schema).text + "\n"
    except OdfError:  # a type without a DDL form: the whole schema as ODF YAML
        columns = schema_yaml(v.schema)
    sys.stdout.write(_indented(columns))


def cmd_schema(args: argparse.Namespace) -> None:
    dataset = Repository.open(args.repo).dataset(args.name)
    history = schema_history(dataset, dataset.existing_head(), max_versions=None if args.history else 1)
    if not history.versions:
        raise CommandError(f"{args.name} has no schema yet: its first ingest or transform records one")
    if args.format == "json":
        versions = [_schema_plain(v) for v in history.versions]
        print(json.dumps({"dataset": args.name, "versions": versions}, indent=2))
        return
    for i, v in enumerate(history.versions):
        if i:
            print()
        _print_schema(v, args.history)


# ----- record provenance -----


def _interval_plain(interval: Interval | None) -> dict[str, int] | None:
    return None if interval is None else interval_plain(interval)


def _step_input_plain(i: StepInput) -> dict[str, Any]:
    return {
        "dataset_id": i.dataset_id,
        "name": i.name,
        "prev_block_hash": i.prev_block_hash,
        "new_block_hash": i.new_block_hash,
        "offsets": _interval_plain(i.offsets),
    }


def _provenance_block_plain(b: ProvenanceBlock) -> dict[str, Any]:
    state = b.source_state
    return {
        "block": b.block_hash,
        "sequence_number": b.sequence_number,
        "system_time": b.system_time,
        "event": b.event,
        "offsets": _interval_plain(b.offsets),
        "watermark": b.watermark,
        "source_state": None
        if state is None
        else {"source_name": state.source_name, "kind": state.kind, "value": state.value},
        "inputs": [_step_input_plain(i) for i in b.inputs],
        "in_chain": b.in_chain,
    }


def provenance_plain(answer: Provenance) -> dict[str, Any]:
    """The `-o json` form: the question, what the answer proves, and each dataset on the way down."""
    return {
        "dataset": answer.dataset,
        "dataset_id": answer.dataset_id,
        "offset": answer.offset,
        "block": answer.block,
        "note": WHAT_IT_PROVES,
        "datasets": [
            {
                "dataset_id": n.dataset_id,
                "name": n.name,
                "kind": n.kind,
                "depth": n.depth,
                "status": n.status,
                "reasons": list(n.reasons),
                "offsets": [_interval_plain(i) for i in n.offsets],
                "num_blocks": n.num_blocks,
                "blocks": [_provenance_block_plain(b) for b in n.blocks],
            }
            for n in answer.datasets
        ],
    }


def _intervals_text(intervals: list[Interval]) -> str:
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in intervals) or "none"


def _provenance_block_text(b: ProvenanceBlock, last: bool) -> list[str]:
    offsets = "no records" if b.offsets is None else f"offsets {_intervals_text([b.offsets])}"
    line = (
        f"{'└─' if last else '├─'} {b.event} {b.block_hash}  #{b.sequence_number}  {b.system_time}  {offsets}"
    )
    if b.watermark is not None:
        line += f"  watermark {b.watermark}"
    if b.source_state is not None:
        s = b.source_state
        line += f"  source {_printable(s.source_name)} {_printable(s.kind)} {_printable(s.value)}"
    if not b.in_chain:
        line += "  (no longer in its chain)"
    lines = [line]
    lead = "   " if last else "│  "
    for k, i in enumerate(b.inputs):
        read = "no records" if i.offsets is None else f"offsets {_intervals_text([i.offsets])}"
        blocks = f"blocks up to {i.new_block_hash}" if i.new_block_hash else "no new block"
        if i.prev_block_hash and i.new_block_hash:
            blocks = f"blocks after {i.prev_block_hash} up to {i.new_block_hash}"
        name = _printable(i.name) if i.name else "(not in this repository)"
        branch = "└─" if k == len(b.inputs) - 1 else "├─"
        lines.append(f"{lead}{branch} read {name}  {i.dataset_id}  {read}  {blocks}")
    return lines


def _dataset_provenance_text(n: DatasetProvenance) -> list[str]:
    name = _printable(n.name) if n.name else "(not in this repository)"
    kind = f"  {n.kind}" if n.kind else ""
    status = "" if n.status == RESOLVED else f"  [{n.status}]"
    lines = [f"{name}  {n.dataset_id}{kind}  offsets {_intervals_text(n.offsets)}{status}"]
    lines += [f"  ! {_printable(reason)}" for reason in n.reasons]
    for k, b in enumerate(n.blocks):
        lines += _provenance_block_text(b, last=k == len(n.blocks) - 1 and n.num_blocks == len(n.blocks))
    if n.num_blocks > len(n.blocks):
        lines.append(f"└─ ... and {n.num_blocks - len(n.blocks)} more block(s) (--max-blocks)")
    return lines


def provenance_text(answer: Provenance) -> str:
    """A heading naming the block asked about, what the answer proves, then each dataset on the way
    down (nearest first) with its blocks and, for a transform step, what it read of each input."""
    first = answer.datasets[0].blocks[0]
    if answer.offset is not None:
        heading = f"{answer.dataset} offset {answer.offset}: written by {first.event} {first.block_hash}"
        heading += f" (#{first.sequence_number})"
    else:
        offsets = "no records" if first.offsets is None else f"offsets {_intervals_text([first.offsets])}"
        heading = (
            f"{answer.dataset} block {first.block_hash} (#{first.sequence_number}, {first.event}): {offsets}"
        )
    lines = [heading]
    if len(answer.datasets) > 1:
        lines.append(f"Note: {WHAT_IT_PROVES}.")
    for n in answer.datasets:
        lines += ["", *_dataset_provenance_text(n)]
    return "\n".join(lines) + "\n"


def cmd_provenance(args: argparse.Namespace) -> None:
    answer = provenance(
        Repository.open(args.repo),
        args.name,
        offset=args.offset,
        block=args.block,
        max_blocks=args.max_blocks,
    )
    if args.output == "json":
        print(json.dumps(provenance_plain(answer), indent=2))
    else:
        sys.stdout.write(provenance_text(answer))


# ----- rejected slices -----


def _rejected_line(r: RejectedSlice) -> str:
    failed = [c.name for c in r.results if not c.success]
    return (
        f"{r.path.name}  {_printable(r.dataset)}  {r.rejected_at}  {r.records} record(s)  "
        f"{len(failed)} of {len(r.results)} failed: {', '.join(_printable(n) for n in failed)}"
    )


def _rejected_text(r: RejectedSlice) -> str:
    lines = [
        f"rejected slice {r.path.name} of {_printable(r.dataset)} ({r.dataset_id})",
        f"  rejected at {r.rejected_at}, against head {r.head or '(none: the first data)'}, "
        f"{r.records} record(s)",
        *(f"  file {f}" for f in r.files),
        *(f"  {_printable(c.line())}" for c in r.results if not c.success),
    ]
    for c in r.results:
        if not c.success and c.failing_rows:
            lines.append(f"  failing rows of {_printable(c.name)}:")
            lines += [
                f"    {_printable(json.dumps(row, ensure_ascii=False, default=str))}"
                for row in c.failing_rows
            ]
    return "\n".join(lines) + "\n"


def cmd_rejected(args: argparse.Namespace) -> None:
    """Lists the rejected slices kept in the scratch space (of a dataset, by name or DID), or shows one
    (by its id or a prefix of it)."""
    work_dir = args.work_dir or Repository.open(args.repo).work_dir
    one = find_rejected(work_dir, args.name) if args.name else None
    if one is not None:
        if args.format == "json":
            print(json.dumps(one.as_dict(), indent=2, ensure_ascii=False, default=str))
        else:
            sys.stdout.write(_rejected_text(one))
        return
    kept = list_rejected(work_dir, args.name)
    if args.format == "json":
        print(json.dumps([r.as_dict() for r in kept], indent=2, ensure_ascii=False, default=str))
    elif not kept:
        print("no rejected slices" + (f" of {_printable(args.name)}" if args.name else ""))
    else:
        print("\n".join(_rejected_line(r) for r in kept))


def _offset(text: str) -> int:
    """An argparse type for a record offset (0 or more)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a record offset, a whole number of at least 0")
    return value


def register(groups: Any, repo_arg: argparse.ArgumentParser) -> None:
    """Adds `odf delete`, `odf rename` and `odf inspect lineage|query|schema|provenance` to the `odf`
    parser."""
    p = groups.add_parser(
        "delete", parents=[repo_arg], help="delete datasets (their objects become garbage for `odf gc`)"
    )
    p.add_argument("names", nargs="+", metavar="NAME", help="a dataset's name or did:odf")
    p.add_argument(
        "-r", "--recursive", action="store_true", help="also delete every derivative that reads them"
    )
    p.set_defaults(func=cmd_delete)
    p = groups.add_parser("rename", parents=[repo_arg], help="give a dataset a new name")
    p.add_argument("old")
    p.add_argument("new")
    p.set_defaults(func=cmd_rename)

    inspect = groups.add_parser(
        "inspect",
        help="the lineage of datasets, the history of a query or a schema, record provenance, "
        "rejected slices",
    ).add_subparsers(dest="command", required=True)
    p = inspect.add_parser(
        "lineage", parents=[repo_arg], help="the dependency graph of the repository's datasets"
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="only these and their upstream and downstream")
    p.add_argument("-o", "--output", choices=LINEAGE_FORMATS, default="shell", help="default: shell")
    p.set_defaults(func=cmd_lineage)
    p = inspect.add_parser(
        "query", parents=[repo_arg], help="how a derivative's transformation changed, newest first"
    )
    p.add_argument("name")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_query)
    p = inspect.add_parser(
        "schema", parents=[repo_arg], help="a dataset's schema, or (--history) every schema it had"
    )
    p.add_argument("name")
    p.add_argument(
        "--history", action="store_true", help="every SetDataSchema and what changed, newest first"
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_schema)
    p = inspect.add_parser(
        "provenance",
        parents=[repo_arg],
        help="which input records a record (or a block's records) came from, down to the root datasets",
    )
    p.add_argument("name")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--offset", type=_offset, metavar="K", help="the record at this offset")
    which.add_argument(
        "--block", metavar="HASH", help="the records of this AddData or ExecuteTransform block"
    )
    p.add_argument(
        "-o",
        "--output",
        "--format",
        dest="output",
        choices=("text", "json"),
        default="text",
        help="default: text",
    )
    p.add_argument(
        "--max-blocks",
        type=positive_int,
        default=DEFAULT_MAX_BLOCKS,
        metavar="N",
        help=f"list at most N blocks per dataset, count the rest (default {DEFAULT_MAX_BLOCKS})",
    )
    p.set_defaults(func=cmd_provenance)
    p = inspect.add_parser(
        "rejected",
        parents=[repo_arg],
        help="the slices that failed their checks and were kept (--quarantine); gc removes them",
    )
    p.add_argument(
        "name", nargs="?", metavar="NAME", help="a dataset (name or DID), or a rejected slice's id"
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--work-dir",
        type=Path,
        help="the scratch space to look in (default: the repository's; give an Airflow connection's "
        "work_dir extra here)",
    )
    p.set_defaults(func=cmd_rejected)

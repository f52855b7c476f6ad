"""The `odf` command: inspection, conformance and workspace tools over the ODF core (no Airflow).

Bad input never shows a traceback: the command prints one line per problem (file, field path,
what was expected) to stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from airflow_odf.cli.compact import register as register_compact_commands
from airflow_odf.cli.data import register as register_data_commands
from airflow_odf.cli.engine import LazyRunner, engine_options
from airflow_odf.cli.engine import register as register_engine_commands
from airflow_odf.cli.errors import (
    EXIT_BAD_INPUT,
    EXIT_CONFLICT,
    EXIT_VERIFICATION_FAILED,
    CliError,
    VerificationFailed,
    positive_int,
)
from airflow_odf.cli.inspect import register as register_inspect_commands
from airflow_odf.cli.keys import register as register_keys_commands
from airflow_odf.cli.query import register as register_query_commands
from airflow_odf.cli.schema import expand_shorthand
from airflow_odf.cli.schema import register as register_schema_commands
from airflow_odf.cli.sync import register as register_sync_commands
from airflow_odf.odf.chain.integrity import collect_garbage
from airflow_odf.odf.chain.reconcile import Reconciliation
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.chain.verification import Blocks, verify_dataset
from airflow_odf.odf.checks.quarantine import collect_rejected
from airflow_odf.odf.checks.results import ChecksFailed
from airflow_odf.odf.errors import ChainRuleError, ManifestError, OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import block_hash, decode_block, encode_block
from airflow_odf.odf.format.manifests import (
    Manifest,
    dump_manifest,
    manifest_to_plain,
    read_manifests,
    read_single,
)
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.format.sql_policy import snapshot_sql_problems
from airflow_odf.odf.limits import MAX_BLOCK_BYTES_ENV, max_block_bytes
from airflow_odf.odf.repo.operation_folders import collect_operations
from airflow_odf.odf.repo.repository import ListedDataset, Repository, RepositoryError
from airflow_odf.odf.repo.snapshot_order import dependency_order
from airflow_odf.odf.storage.store import ConflictError


def _read_bytes(path: str, limit: int | None = None) -> bytes:
    """The file's bytes; with `limit`, a larger file is refused without being read whole."""
    try:
        with open(path, "rb") as f:
            data = f.read() if limit is None else f.read(limit + 1)
    except OSError as e:
        raise CliError([f"{path}: cannot read file: {e.strerror or e}"]) from None
    if limit is not None and len(data) > limit:
        raise CliError([f"{path}: larger than the {limit} bytes a block may have ({MAX_BLOCK_BYTES_ENV})"])
    return data


def cmd_block_encode(args: argparse.Namespace) -> None:
    block = read_single(args.file, "MetadataBlock")
    try:
        data = encode_block(block)
    except OdfError as e:
        raise CliError([f"{args.file}: {e}"]) from None
    if args.output:
        try:
            Path(args.output).write_bytes(data)
        except OSError as e:
            raise CliError([f"{args.output}: cannot write the block file: {e.strerror or e}"]) from None
    print(block_hash(data))


def cmd_block_decode(args: argparse.Namespace) -> None:
    data = _read_bytes(args.file, max_block_bytes())
    try:
        block = decode_block(data)
    except OdfError as e:
        raise CliError([f"{args.file}: {e}"]) from None
    if args.format == "json":
        print(json.dumps(manifest_to_plain(block), indent=2, ensure_ascii=False))
    else:
        sys.stdout.write(dump_manifest(block))


def cmd_block_hash(args: argparse.Namespace) -> None:
    print(block_hash(_read_bytes(args.file)))


def _read_snapshot_manifests(path: str) -> tuple[list[Manifest], list[str]]:
    """The manifests of a file that should hold only DatasetSnapshots, and a line per problem."""
    try:
        manifests = read_manifests(path)
    except ManifestError as e:
        return [], e.lines()
    lines = [
        f"{path}: kind: document {i + 1} is a {m.kind}, expected DatasetSnapshot"
        for i, m in enumerate(manifests)
        if m.kind != "DatasetSnapshot"
    ]
    return manifests, lines


def cmd_snapshot_validate(args: argparse.Namespace) -> None:
    lines: list[str] = []
    for path in args.files:
        manifests, problems = _read_snapshot_manifests(path)
        lines += problems
        for m in manifests:
            refused = (
                [f"{path}: {p}" for p in snapshot_sql_problems(m.content)]
                if m.kind == "DatasetSnapshot"
                else []
            )
            lines += refused
            if m.kind == "DatasetSnapshot" and not refused and not args.quiet:
                print(
                    f"{path}: ok ({m.content.name}, {m.content.kind.name.capitalize()}, "
                    f"{len(m.content.metadata)} events)"
                )
    if lines:
        raise CliError(lines)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _repo(args: argparse.Namespace) -> Repository:
    return Repository.open(args.repo)


def cmd_init(args: argparse.Namespace) -> None:
    repo = Repository.init(args.repo)
    print(f"initialised ODF repository in {repo.location}")


def _checked(repo: Repository, snapshot: model.DatasetSnapshot, runner: LazyRunner) -> model.DatasetSnapshot:
    """The snapshot, once a changed query of an existing derivative passed the schema-evolution check."""
    if snapshot.kind is not model.DatasetKind.DERIVATIVE:
        return snapshot
    from airflow_odf.odf.transform.evolution import check_transform_change  # loads pyarrow

    return check_transform_change(repo, snapshot, runner, repo.work_dir)


def cmd_add(args: argparse.Namespace) -> None:
    repo = _repo(args)
    snapshots: list[model.DatasetSnapshot] = []
    lines: list[str] = []
    for path in args.manifests:
        manifests, problems = _read_snapshot_manifests(path)
        lines += problems
        snapshots += [m.content for m in manifests if m.kind == "DatasetSnapshot"]
    if lines:
        raise CliError(lines)
    runner = LazyRunner(args)
    for snapshot in dependency_order(snapshots):
        record = Reconciliation()
        try:
            result = repo.add_reconciling(
                snapshot, record, check=lambda s: _checked(repo, s, runner), log=_stderr
            )
        except ConflictError:
            raise
        except OdfError as e:
            named = str(e).startswith(f"{snapshot.name}: ")  # e.g. a damaged dataset of that name
            lines.append(str(e) if named else f"{snapshot.name}: {e}")
            continue
        what = "created" if result.created else f"{len(result.commit.new_blocks)} new blocks"
        print(f"{result.name}\t{result.dataset_id}\t{result.commit.new_head}\t({what})")
    if lines:
        raise CliError(lines)


def _listed_row(repo: Repository, entry: ListedDataset) -> dict[str, Any]:
    """One row of `odf list`; a dataset that cannot be read gets `error` (and no state) instead."""
    row: dict[str, Any] = {
        "name": entry.name,
        "id": None if entry.dataset_id is None else str(entry.dataset_id),
    }
    try:
        dataset = repo.dataset_of(entry)
        dataset.existing_head()
        state = dataset.state()
    except OdfError as e:
        return {**row, **dict.fromkeys(("kind", "head", "blocks", "records", "size")), "error": str(e)}
    return {
        **row,
        "kind": state.kind.name.capitalize() if state.kind is not None else None,
        "head": str(state.head),
        "blocks": state.num_blocks,
        "records": state.num_records,
        "size": state.data_size,
    }


def cmd_list(args: argparse.Namespace) -> None:
    """Every dataset; a broken one is listed as BROKEN, named on stderr, and makes the exit code 4."""
    repo = _repo(args)
    rows = [_listed_row(repo, entry) for entry in repo.scan()]
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        header = ("NAME", "KIND", "BLOCKS", "RECORDS", "HEAD")
        table = [header]
        for r in rows:
            if "error" in r:
                table.append((r["name"], "BROKEN", "-", "-", "-"))
            else:
                table.append((r["name"], r["kind"] or "", str(r["blocks"]), str(r["records"]), r["head"]))
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        for row in table:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    broken = [f"{r['name']}: {r['error']}" for r in rows if "error" in r]
    for line in broken:
        _stderr(line)
    if broken:
        raise VerificationFailed


def cmd_log(args: argparse.Namespace) -> None:
    dataset = _repo(args).dataset(args.name)
    entries = []
    for i, (h, block) in enumerate(dataset.iter_blocks(dataset.existing_head())):
        if args.limit is not None and i >= args.limit:
            break
        entries.append((h, block))
    if args.format == "json":
        print(
            json.dumps(
                [{"hash": str(h), **manifest_to_plain(b)} for h, b in entries], indent=2, ensure_ascii=False
            )
        )
        return
    sys.stdout.write("---\n".join(f"# block {h}\n{dump_manifest(b)}" for h, b in entries))


def cmd_reset(args: argparse.Namespace) -> None:
    dataset = _repo(args).dataset(args.name)
    try:
        to = Multihash.parse(args.hash)
    except OdfError as e:
        raise CliError([f"HASH: {e}"]) from None
    result = dataset.reset(to)
    print(f"{args.name}: head moved from {result.old_head} to {result.new_head}")


def cmd_verify(args: argparse.Namespace) -> None:
    """Checks what came after the last verified head (`--full`: everything); see docs/repository.md."""
    repo = _repo(args)
    dataset = repo.dataset(args.name, damaged=True)

    def replay(since: ChainState, blocks: Blocks) -> list[Any]:
        from airflow_odf.odf.transform.verify import verify_reproducibility  # loads pyarrow

        return verify_reproducibility(
            repo,
            args.name,
            LazyRunner(args),
            repo.work_dir,
            log=lambda line: print(line, file=sys.stderr),
            since=since,
            blocks=blocks,
        )

    result = verify_dataset(
        dataset, full=args.full, replay=None if args.integrity else replay, engine=args.engine
    )
    if args.format == "json":
        report = {
            "dataset": args.name,
            "ok": result.ok,
            "problems": [{"kind": p.kind, "ref": p.ref, "message": p.message} for p in result.problems],
            "not_reproducible": [
                {"block": str(p.block_hash), "field": p.field, "recorded": p.recorded, "replayed": p.replayed}
                for p in result.not_reproducible
            ],
            **result.fields(),
        }
        print(json.dumps(report, indent=2))
    elif not result.ok:
        for line in [*result.problems, *result.not_reproducible]:
            print(f"{args.name}: {line}")
    elif result.state is not None:
        print(f"{args.name}: ok ({result.state.num_blocks} blocks; checked {result.describe()})")
    if not result.ok:
        raise VerificationFailed


def cmd_gc(args: argparse.Namespace) -> None:
    """Collects every readable dataset (in a bucket: the objects dead operations staged there), then
    the folders of dead operations in the scratch space; a dataset whose head or chain cannot be read
    is left whole, named on stderr, and makes the exit code 4."""
    repo = _repo(args)
    removed = 0
    skipped = []
    for entry in repo.scan():
        try:
            removed += len(collect_garbage(repo.dataset_of(entry), args.min_age))
        except OdfError as e:
            skipped.append(f"{entry.name}: {e}; nothing of it was removed")
    from airflow_odf.odf.query.run import collect_query_staging

    removed += len(collect_query_staging(repo, args.min_age))  # what killed queries staged in a bucket
    try:
        # a repository in a bucket: only what dead operations staged there (`collect_garbage`)
        for path in repo.unnamed_datasets(args.min_age) if repo.is_local else []:
            repo.remove_dataset_dir(path)
            removed += 1
    except RepositoryError as e:
        skipped.append(f"unnamed dataset folders were not removed: {e}")
    try:
        for operation in collect_operations(args.work_dir or repo.work_dir, args.min_age):
            print(f"removed the folder of a dead operation: {operation}")
            removed += 1
    except OSError as e:
        skipped.append(f"operation folders were not all removed: {e}")
    try:
        for rejected in collect_rejected(args.work_dir or repo.work_dir, args.min_age):
            print(f"removed a rejected slice: {rejected}")
            removed += 1
    except OSError as e:
        skipped.append(f"rejected slices were not all removed: {e}")
    print(f"removed {removed} unreferenced objects and folders")
    for line in skipped:
        _stderr(line)
    if skipped:
        raise VerificationFailed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="odf", description="Open Data Fabric tools of airflow-provider-odf")
    groups = parser.add_subparsers(dest="group", required=True)

    block = groups.add_parser("block", help="encode, decode and hash metadata blocks").add_subparsers(
        dest="command", required=True
    )
    p = block.add_parser("encode", help="encode a MetadataBlock YAML manifest; prints the block hash")
    p.add_argument("file")
    p.add_argument("-o", "--output", help="write the block file here")
    p.set_defaults(func=cmd_block_encode)
    p = block.add_parser("decode", help="print a block file as a MetadataBlock manifest")
    p.add_argument("file")
    p.add_argument("--format", choices=("yaml", "json"), default="yaml")
    p.set_defaults(func=cmd_block_decode)
    p = block.add_parser("hash", help="print the multihash of a block file")
    p.add_argument("file")
    p.set_defaults(func=cmd_block_hash)

    snapshot = groups.add_parser("snapshot", help="work with DatasetSnapshot manifests").add_subparsers(
        dest="command", required=True
    )
    p = snapshot.add_parser("validate", help="exit 0 when every manifest is a valid DatasetSnapshot")
    p.add_argument("files", nargs="+")
    p.add_argument("-q", "--quiet", action="store_true", help="print problems only")
    p.set_defaults(func=cmd_snapshot_validate)

    repo_arg = argparse.ArgumentParser(add_help=False)
    repo_arg.add_argument(
        "--repo",
        default=os.environ.get("ODF_REPO", "."),
        help="repository directory (default: $ODF_REPO or the current directory)",
    )
    p = groups.add_parser("init", parents=[repo_arg], help="create a repository")
    p.set_defaults(func=cmd_init)
    p = groups.add_parser(
        "add",
        parents=[repo_arg, engine_options()],
        help="create or evolve datasets from DatasetSnapshot manifests (of a name given twice the last wins)",
    )
    p.add_argument("manifests", nargs="+")
    p.set_defaults(func=cmd_add)
    p = groups.add_parser("list", parents=[repo_arg], help="list the datasets of the repository")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_list)
    p = groups.add_parser("log", parents=[repo_arg], help="print a dataset's blocks, newest first")
    p.add_argument("name")
    p.add_argument("--format", choices=("yaml", "json"), default="yaml")
    p.add_argument("--limit", type=positive_int, help="at most this many blocks (at least 1)")
    p.set_defaults(func=cmd_log)
    p = groups.add_parser("reset", parents=[repo_arg], help="move a dataset's head back to an earlier block")
    p.add_argument("name")
    p.add_argument("hash")
    p.set_defaults(func=cmd_reset)
    p = groups.add_parser(
        "verify",
        parents=[repo_arg, engine_options()],
        help="verify a dataset: integrity, and for a derivative the reproducibility of its transforms",
    )
    p.add_argument("name")
    p.add_argument(
        "--integrity", action="store_true", help="only re-check hashes, chain rules and objects (no replay)"
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="check the whole chain, not only the blocks after the last verified head",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_verify)
    p = groups.add_parser(
        "gc",
        parents=[repo_arg],
        help="remove objects no dataset head refers to, dead operations' folders and old rejected slices",
    )
    p.add_argument(
        "--min-age",
        type=float,
        default=3600.0,
        help="only remove objects, folders of dead operations and rejected slices older than this many "
        "seconds (protects commits in progress)",
    )
    p.add_argument(
        "--work-dir",
        type=Path,
        help="the scratch space whose dead operation folders to remove (default: the repository's, "
        "<repository>/cache or under $ODF_WORK_DIR; give an Airflow connection's work_dir extra here)",
    )
    p.set_defaults(func=cmd_gc)
    register_data_commands(groups, repo_arg)
    register_schema_commands(groups, repo_arg)
    register_sync_commands(groups, repo_arg)
    register_compact_commands(groups, repo_arg)
    register_inspect_commands(groups, repo_arg)
    register_keys_commands(groups, repo_arg)
    register_query_commands(groups, repo_arg)
    register_engine_commands(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(expand_shorthand(list(sys.argv[1:] if argv is None else argv)))
    func: Callable[[argparse.Namespace], None] = args.func
    code = EXIT_BAD_INPUT
    try:
        func(args)
    except VerificationFailed:
        return EXIT_VERIFICATION_FAILED
    except ManifestError as e:
        lines = e.lines()
    except CliError as e:
        lines = e.lines
    except ConflictError as e:
        lines, code = [f"conflict: {e}"], EXIT_CONFLICT
    except ChecksFailed as e:  # the data was refused, not the command: as a failed verification
        lines, code = [*e.lines(), *e.sample_lines()], EXIT_VERIFICATION_FAILED
    except ChainRuleError as e:
        lines = [f"rejected: {e}"]
    except OdfError as e:
        lines = [str(e)]
    else:
        return 0
    for line in lines:
        print(line, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())

"""The `odf` command: inspection and conformance tools over the ODF core (no Airflow, no Spark needed).

Bad input never shows a traceback: the command prints one line per problem (file, field path,
what was expected) to stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from airflow_odf.odf.errors import ManifestError, OdfError
from airflow_odf.odf.flatbuffers_codec import block_hash, decode_block, encode_block
from airflow_odf.odf.manifests import dump_manifest, manifest_to_plain, read_manifests, read_single

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """Bad input reported as `lines`, one problem per line."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def _read_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise CliError([f"{path}: cannot read file: {e.strerror or e}"]) from None


def cmd_block_encode(args: argparse.Namespace) -> None:
    block = read_single(args.file, "MetadataBlock")
    data = encode_block(block)
    if args.output:
        Path(args.output).write_bytes(data)
    print(block_hash(data))


def cmd_block_decode(args: argparse.Namespace) -> None:
    data = _read_bytes(args.file)
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


def cmd_snapshot_validate(args: argparse.Namespace) -> None:
    lines: list[str] = []
    for path in args.files:
        try:
            manifests = read_manifests(path)
        except ManifestError as e:
            lines += e.lines()
            continue
        for i, m in enumerate(manifests):
            if m.kind != "DatasetSnapshot":
                lines.append(f"{path}: kind: document {i + 1} is a {m.kind}, expected DatasetSnapshot")
            elif not args.quiet:
                print(
                    f"{path}: ok ({m.content.name}, {m.content.kind.name.capitalize()}, "
                    f"{len(m.content.metadata)} events)"
                )
    if lines:
        raise CliError(lines)


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], None] = args.func
    try:
        func(args)
    except ManifestError as e:
        lines = e.lines()
    except CliError as e:
        lines = e.lines
    except OdfError as e:
        lines = [str(e)]
    else:
        return 0
    for line in lines:
        print(line, file=sys.stderr)
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())

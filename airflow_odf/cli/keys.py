"""The `odf keys` commands: which datasets are owned here, and moving their keys (docs/keys.md).

Whoever holds a dataset's private key can sign its heads, so moving the key moves ownership. A key is
printed only by `odf keys export` without `--output`: asking for it is the only way to see it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from airflow_odf.cli.errors import CliError, CommandError
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.identity.keys import (
    KeyStore,
    NodeKeyExistsError,
    export_text,
    private_key_pem,
    write_private_file,
)
from airflow_odf.odf.identity.signing import public_key_of
from airflow_odf.odf.repo.repository import Repository

_MAX_KEY_INPUT_BYTES = 64 * 1024  # far above any key: parse_private_key names the real bound

OWNED, READ_ONLY, NO_DATASET, UNUSABLE = "owned", "read-only", "no dataset here", "unusable"
_SHOWN = {OWNED: "owned here", READ_ONLY: "no key (read-only)", NO_DATASET: "key of no dataset here"}


def _dataset(repo: Repository, ref: str) -> tuple[DatasetId, str]:
    """The identity a name or DID refers to, and how to name it in messages. A DID need not be a
    dataset of the repository: its key may be moved before the dataset is pulled."""
    if not ref.startswith("did:"):
        return repo.resolve(ref, damaged=True), ref
    try:
        identity = DatasetId.parse(ref)
    except OdfError as e:
        raise CommandError(f"{ref!r}: {e}") from None
    names = repo.names_of(identity)
    return identity, names[0] if names else str(identity)


def _folder(keys: KeyStore) -> str | None:
    """The key folder as an absolute path: where to look, and what to back up."""
    return None if keys.folder is None else str(keys.folder.absolute())


def _key_state(keys: KeyStore, identity: DatasetId, held: str, missing: str) -> dict[str, Any]:
    """`{"key": held}` when the store has a usable key of `identity`, `missing` when it has none, and
    `unusable` with the reason when its file cannot be used."""
    try:
        return {"key": held if keys.has(identity) else missing}
    except OdfError as e:
        return {"key": UNUSABLE, "error": str(e)}


def _node_state(keys: KeyStore) -> dict[str, Any]:
    """The node's `did:key` (None while it has none: it is made on first use)."""
    try:
        secret = keys.stored_node_secret()
    except OdfError as e:
        return {"id": None, "key": UNUSABLE, "error": str(e)}
    return {"id": None if secret is None else public_key_of(secret).to_did_key()}


def key_listing(repo: Repository) -> dict[str, Any]:
    """Every dataset of the repository with whether its key is here, the keys of no dataset here, and
    the node's identity: what `odf keys list` shows."""
    keys = repo.keys
    names: dict[DatasetId, list[str]] = {}
    for entry in repo.scan():
        if entry.dataset_id is not None:  # a damaged alias file: `odf list` reports it
            names.setdefault(entry.dataset_id, []).append(entry.name)
    datasets = [
        {"names": shown, "id": str(did), **_key_state(keys, did, OWNED, READ_ONLY)}
        for did, shown in names.items()
    ]
    others = [
        {"id": str(did), **_key_state(keys, did, NO_DATASET, NO_DATASET)}
        for did in keys.identities()
        if did not in names
    ]
    return {
        "keys_dir": _folder(keys),
        "datasets": datasets,
        "other_keys": others,
        "node": _node_state(keys),
    }


def cmd_keys_list(args: argparse.Namespace) -> None:
    """Lists everything; a key file that cannot be used is shown as such, named on stderr, and makes
    the exit code 2."""
    listing = key_listing(Repository.open(args.repo))
    node = listing["node"]
    if args.format == "json":
        print(json.dumps(listing, indent=2))
    else:
        rows = [(", ".join(d["names"]), d["key"], d["id"]) for d in listing["datasets"]]
        rows += [("-", o["key"], o["id"]) for o in listing["other_keys"]]
        node_shown = node["id"] or "none yet (made on first use)"
        rows.append(("(node)", node.get("key", "node identity"), node_shown))
        name_width = max(len(row[0]) for row in rows)
        print(f"{'NAME':<{name_width}}  {'KEY':<22}  DID")
        for name, state, did in rows:
            print(f"{name:<{name_width}}  {_SHOWN.get(state, state):<22}  {did or '-'}")
        print(f"keys in {listing['keys_dir']}")
    problems = [d for d in [*listing["datasets"], *listing["other_keys"], node] if "error" in d]
    if problems:
        raise CliError([d["error"] for d in problems])


def _secret_to_export(repo: Repository, args: argparse.Namespace) -> tuple[bytes, str]:
    """The key asked for, and the warning that goes with it."""
    if args.node:
        secret = repo.keys.node_secret()
        who = public_key_of(secret).to_did_key()
        return secret, f"whoever has it can sign query commitments as this node ({who})"
    identity, label = _dataset(repo, args.ref)
    secret = repo.keys.secret(identity)
    if secret is None:
        raise CommandError(
            f"{label}: no key of {identity} in {_folder(repo.keys)}: the dataset is read-only here "
            "(pulled from elsewhere, or its key lives on another machine)"
        )
    return secret, f"whoever has it controls {label} ({identity}): it can sign that dataset's heads"


def cmd_keys_export(args: argparse.Namespace) -> None:
    _one_target(args)
    repo = Repository.open(args.repo)
    secret, control = _secret_to_export(repo, args)
    data = private_key_pem(secret) if args.format == "pem" else f"{export_text(secret)}\n".encode()
    if args.output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    elif not write_private_file(Path(args.output), data, replace=args.force):
        raise CommandError(f"{args.output}: the file exists (--force replaces it)")
    print(f"warning: this is a private key; {control}. Keep it secret.", file=sys.stderr)


def _read_key_input(path: str) -> bytes:
    """The text of a key file, or of stdin for `-`."""
    try:
        if path == "-":
            return sys.stdin.buffer.read(_MAX_KEY_INPUT_BYTES)
        with open(path, "rb") as f:
            return f.read(_MAX_KEY_INPUT_BYTES)
    except OSError as e:
        raise CommandError(f"{path}: cannot read the key file: {e.strerror or e}") from None


def cmd_keys_import(args: argparse.Namespace) -> None:
    _one_target(args)
    repo = Repository.open(args.repo)
    text = _read_key_input(args.file)
    if args.node:
        try:
            identity = repo.keys.import_node_key(text, replace=args.force)
        except NodeKeyExistsError as e:
            raise CommandError(
                f"{e}; --force replaces it (what the old key signed stays checkable by its did:key)"
            ) from None
        print(f"this node is now {identity.to_did_key()} (its key is in {_folder(repo.keys)})")
        return
    if args.force:
        raise CommandError("--force replaces only a node key: a dataset's DID has exactly one key")
    identity, label = _dataset(repo, args.ref)
    try:
        repo.keys.import_key(text, expected=identity)
    except OdfError as e:
        raise CommandError(f"{label}: {e}") from None
    print(f"{label}: owned here now (the key of {identity} is in {_folder(repo.keys)})")


def _one_target(args: argparse.Namespace) -> None:
    """Exactly one of NAME|DID and --node."""
    if args.node and args.ref is not None:
        raise CommandError(f"give NAME|DID or --node, not both ({args.ref!r} and --node)")
    if not args.node and args.ref is None:
        raise CommandError("give the dataset (NAME|DID), or --node for this node's key")


def register(groups: Any, repo_arg: argparse.ArgumentParser) -> None:
    """Adds `odf keys list|export|import` to the `odf` parser."""
    keys = groups.add_parser(
        "keys", help="the private keys of the datasets owned here and of this node (docs/keys.md)"
    ).add_subparsers(dest="command", required=True)

    p = keys.add_parser(
        "list", parents=[repo_arg], help="each dataset with whether its key is here; other keys; the node"
    )
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_keys_list)

    p = keys.add_parser(
        "export",
        parents=[repo_arg],
        help="print or write a private key (whoever has it controls the dataset)",
    )
    p.add_argument("ref", nargs="?", metavar="NAME|DID")
    p.add_argument("--node", action="store_true", help="this node's key (signs query commitments)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the key to this new file (mode 0600)")
    p.add_argument(
        "--format",
        choices=("pem", "multibase"),
        default="pem",
        help="pem: PKCS#8 (default); multibase: the raw key as kamu's tools take it",
    )
    p.add_argument("--force", action="store_true", help="replace FILE when it exists")
    p.set_defaults(func=cmd_keys_export)

    p = keys.add_parser(
        "import",
        parents=[repo_arg],
        help="store a dataset's key here (it must be the key of that DID): moves ownership here",
    )
    p.add_argument("ref", nargs="?", metavar="NAME|DID")
    p.add_argument("file", metavar="FILE|-", help="PKCS#8 PEM or multibase; - reads stdin")
    p.add_argument("--node", action="store_true", help="this node's key (signs query commitments)")
    p.add_argument("--force", action="store_true", help="with --node: replace the node's key")
    p.set_defaults(func=cmd_keys_import)

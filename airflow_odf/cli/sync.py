"""The sharing commands of `odf`: `push`, `serve`, and `pull` from a remote dataset URL.

Credentials come from the environment, never from the command line (where `ps` would show them):
S3 through the usual AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
`AWS_ENDPOINT_URL`, ...), an HTTP bearer token through `$ODF_REMOTE_TOKEN`; `odf serve` requires
`$ODF_SERVE_TOKEN` from its clients when that is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from airflow_odf.cli.engine import engine_options
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.identity.attestation import DEFAULT_SIGNATURE_POLICY, SIGNATURE_POLICIES
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.sharing.push_pull import SharingResult, pull_dataset, push_dataset, remotes
from airflow_odf.odf.sharing.serve import DEFAULT_BACKLOG as DEFAULT_SERVE_BACKLOG
from airflow_odf.odf.sharing.serve import DEFAULT_TIMEOUT as DEFAULT_SERVE_TIMEOUT
from airflow_odf.odf.sharing.sync import SyncError
from airflow_odf.odf.storage.url import StoreCredentials

REMOTE_TOKEN_ENV = "ODF_REMOTE_TOKEN"
SERVE_TOKEN_ENV = "ODF_SERVE_TOKEN"


def _credentials() -> StoreCredentials:
    return StoreCredentials(bearer_token=os.environ.get(REMOTE_TOKEN_ENV) or None)


def _log(line: str) -> None:
    print(line, file=sys.stderr)


def _report(args: argparse.Namespace, shared: SharingResult) -> None:
    if args.format == "json":
        print(json.dumps(shared.as_dict(), indent=2))
        return
    r = shared.result
    arrow = "->" if shared.direction == "push" else "<-"
    if r.up_to_date:
        print(f"{shared.dataset} {arrow} {shared.remote_url}: up to date ({r.new_head})")
        return
    signed = "" if r.signature is None or r.signature.signer is None else f", signed by {r.signature.signer}"
    print(
        f"{shared.dataset} {arrow} {shared.remote_url}: {len(r.new_blocks)} block(s), "
        f"{r.objects_transferred} object(s) ({r.bytes_transferred} bytes) transferred, "
        f"{r.objects_skipped} already there; head {r.new_head}{signed}"
    )


def is_remote_pull(args: argparse.Namespace, repo: Repository) -> bool:
    """`odf pull URL`, `--as`, or a single dataset that was pulled from a remote before."""
    if args.as_name or any("://" in n for n in args.names):
        return True
    if len(args.names) != 1 or args.recursive or args.all:
        return False
    try:
        return bool(remotes(repo.dataset(args.names[0]))["pull"])
    except OdfError:  # an unknown name is reported by the ordinary pull
        return False


def cmd_remote_pull(args: argparse.Namespace, repo: Repository) -> None:
    if len(args.names) != 1:
        raise SyncError("odf pull URL --as NAME: one remote dataset at a time")
    ref = args.names[0]
    url, name = (ref, args.as_name) if "://" in ref else (None, args.as_name or ref)
    shared = pull_dataset(
        repo,
        url,
        name=name,
        credentials=_credentials(),
        force=args.force,
        remember=not args.no_alias,
        log=_log,
        signatures=args.signatures,
    )
    _report(args, shared)


def cmd_push(args: argparse.Namespace) -> None:
    shared = push_dataset(
        Repository.open(args.repo),
        args.name,
        args.to,
        credentials=_credentials(),
        force=args.force,
        remember=not args.no_alias,
        log=_log,
    )
    _report(args, shared)


def cmd_serve(args: argparse.Namespace) -> None:
    from airflow_odf.cli.query import query_endpoint
    from airflow_odf.odf.sharing.serve import RepositoryServer

    repo = Repository.open(args.repo)
    api = query_endpoint(args, repo) if args.query else None
    server = RepositoryServer(
        repo,
        args.host,
        args.port,
        token=os.environ.get(SERVE_TOKEN_ENV) or None,
        log_requests=True,
        timeout=args.timeout,
        backlog=args.backlog,
        api=api,
    )
    print(f"serving {args.repo} read-only at {server.url} (Ctrl-C stops)", file=sys.stderr, flush=True)
    if api is not None:
        print(f"query API: {server.url}/query and /verify (SqlSpark), node {api.did}", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def add_pull_options(p: argparse.ArgumentParser) -> None:
    """The remote options of `odf pull` (the command itself is in `cli.data`)."""
    p.add_argument("--as", dest="as_name", metavar="NAME", help="the local name of a remote dataset")
    p.add_argument("--force", action="store_true", help="remote pull: replace a local history that diverged")
    p.add_argument("--no-alias", action="store_true", help="remote pull: do not remember the URL")
    p.add_argument(
        "--signatures",
        choices=SIGNATURE_POLICIES,
        default=DEFAULT_SIGNATURE_POLICY,
        help="remote pull: refuse a head whose attestation is bad (check, the default), also one without "
        "any (require), or neither (ignore); see docs/signatures.md",
    )


def register(groups: Any, repo_arg: argparse.ArgumentParser) -> None:
    """Adds `push` and `serve` to the `odf` parser."""
    p = groups.add_parser("push", parents=[repo_arg], help="copy a dataset to a remote (s3://, file://)")
    p.add_argument("name")
    p.add_argument("--to", metavar="URL", help="the remote dataset's URL (default: the last one pushed to)")
    p.add_argument("--force", action="store_true", help="replace the remote's history if it diverged")
    p.add_argument("--no-alias", action="store_true", help="do not remember the URL")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_push)
    p = groups.add_parser(
        "serve", parents=[repo_arg, engine_options()], help="serve the repository read-only over HTTP"
    )
    p.add_argument(
        "--query",
        action="store_true",
        help="also answer kamu's GET/POST /query and POST /verify with signed query commitments "
        "(docs/query-commitments.md); the engine options choose the engine",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_SERVE_TIMEOUT,
        metavar="SECONDS",
        help=f"close a connection silent for this long (default {DEFAULT_SERVE_TIMEOUT:g})",
    )
    p.add_argument(
        "--backlog",
        type=int,
        default=DEFAULT_SERVE_BACKLOG,
        help=f"connections queued while busy (default {DEFAULT_SERVE_BACKLOG})",
    )
    p.set_defaults(func=cmd_serve)

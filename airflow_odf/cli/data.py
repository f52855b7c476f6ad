"""The data commands of `odf`: `pull` (one dataset or a whole pipeline, or a remote dataset: see
`cli.sync`), `ingest` (push), `transform` and `tail`.

The engine is the in-process local Spark (default) or `spark-submit` (`--engine spark-submit --master
URL`), also chosen with $ODF_ENGINE and $ODF_SPARK_MASTER.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from airflow_odf.cli.engine import LazyRunner, engine_options
from airflow_odf.cli.errors import CommandError, positive_int
from airflow_odf.cli.sync import add_pull_options, cmd_remote_pull, is_remote_pull
from airflow_odf.odf.checks.results import ChecksFailed
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.repo.pull_plan import (
    PlannedPull,
    PullFailedError,
    PullOutcome,
    plan_pull,
    run_pull_plan,
)
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.policy import SCHEMA_POLICIES, STRICT

if TYPE_CHECKING:  # the data modules load pyarrow: only the data commands pay for it
    from airflow_odf.odf.checks.spec import CheckSuite
    from airflow_odf.odf.engine_client.runner import EngineRunner
    from airflow_odf.odf.ingest.options import IngestOptions
    from airflow_odf.odf.ingest.trust import SourceTrust
    from airflow_odf.odf.operation import IngestResult
    from airflow_odf.odf.transform.execute import TransformOptions


def _timestamp(value: str | None, option: str) -> Timestamp | None:
    if value is None:
        return None
    try:
        return Timestamp.parse(value)
    except OdfError as e:
        raise CommandError(f"{option}: {e} (expected RFC 3339, e.g. 2024-01-31T00:00:00Z)") from None


def _options(args: argparse.Namespace, repo: Repository, **kwargs: Any) -> IngestOptions:
    from airflow_odf.odf.ingest.options import IngestOptions

    return IngestOptions(
        work_dir=repo.work_dir,
        max_records_per_slice=args.max_records_per_slice,
        bad_records="quarantine" if args.quarantine_bad_records else "fail",
        schema_policy=args.schema_policy,
        checks=_checks(args),
        quarantine=args.quarantine,
        log=lambda line: print(line, file=sys.stderr),
        **kwargs,
    )


def _checks(args: argparse.Namespace) -> CheckSuite | None:
    """The checks of `--checks FILE` and `--check NAME=STATEMENT` (None: none declared)."""
    from airflow_odf.odf.checks.spec import resolve_suite

    suite = resolve_suite(args.checks, args.check)
    return suite or None


def _transform_options(args: argparse.Namespace, repo: Repository, **kwargs: Any) -> TransformOptions:
    from airflow_odf.odf.transform.execute import TransformOptions

    return TransformOptions(
        work_dir=repo.work_dir,
        max_input_records=args.max_input_records,
        recover_diverged=args.reset_derivatives_on_diverged_input,
        schema_policy=args.schema_policy,
        checks=_checks(args),
        quarantine=args.quarantine,
        log=lambda line: print(line, file=sys.stderr),
        **kwargs,
    )


def _reported_failure(args: argparse.Namespace, error: ChecksFailed) -> ChecksFailed:
    """Prints the failed checks' results as JSON (with `--format json`) before the error is reported."""
    if args.format == "json":
        print(json.dumps(error.as_dict(), indent=2, default=str))
    return error


def checks_options() -> argparse.ArgumentParser:
    """The flags of the commands that commit new data (`pull`, `ingest`, `transform`): docs/checks.md."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("quality checks before the commit (docs/checks.md)")
    group.add_argument(
        "--check",
        action="append",
        metavar="NAME=STATEMENT",
        help="a boolean SQL expression over the new slice (view `candidate`), e.g. "
        "'no_negative=MIN(value) >= 0' (repeatable)",
    )
    group.add_argument("--checks", metavar="FILE", help="a YAML file of column and table checks")
    group.add_argument(
        "--quarantine",
        action="store_true",
        help="keep a slice that failed its checks in the scratch space (`odf inspect rejected`)",
    )
    return parser


def source_trust(args: argparse.Namespace) -> SourceTrust:
    """What the source's manifest may do: the flags of `trust_options()`, else the environment."""
    from airflow_odf.odf.ingest.trust import SourceTrust

    return SourceTrust.resolve(
        allow_shell_steps=args.allow_shell_steps,
        allow_container_sources=args.allow_container_sources,
        template_env_allow=args.allow_env,
        local_source_dirs=args.source_root,
    )


def trust_options() -> argparse.ArgumentParser:
    """The flags of the commands that run a polling source (`pull`, `schema infer`)."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("what the source's manifest may do (default: the ODF_* variables)")
    group.add_argument(
        "--allow-shell-steps", action="store_true", default=None, help="run Pipe prepare steps (any program)"
    )
    group.add_argument(
        "--allow-container-sources",
        action="store_true",
        default=None,
        help="run Container fetch steps (any image, with docker/podman)",
    )
    group.add_argument(
        "--allow-env",
        action="append",
        metavar="NAME",
        help="a variable ${{ env.NAME }} may read: NAME, PREFIX* or * (repeatable; default ODF_*)",
    )
    group.add_argument(
        "--source-root",
        action="append",
        metavar="DIR",
        help="a directory file:// and FilesGlob sources may read (repeatable; default: working directory)",
    )
    return parser


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


def _pull_options(args: argparse.Namespace) -> None:
    """Checks the combination of names and options before anything runs."""
    if args.all and args.names:
        raise CommandError("odf pull: give dataset names or --all, not both")
    if not args.all and not args.names:
        raise CommandError("odf pull: name the datasets to pull, or use --all")
    if args.max_workers < 1:
        raise CommandError(f"--max-workers: expected 1 or more, got {args.max_workers}")
    if args.set_watermark is not None and (args.all or args.recursive or len(args.names) != 1):
        raise CommandError("--set-watermark: only for a single dataset, without --recursive or --all")
    if (args.check or args.checks) and (args.all or args.recursive or len(args.names) != 1):
        raise CommandError("--check, --checks: only for a single dataset, without --recursive or --all")


def _pull_one(
    args: argparse.Namespace, repo: Repository, runner: EngineRunner, planned: PlannedPull
) -> IngestResult:
    """Pulls one planned dataset: a polling ingest for a root, a transform for a derivative."""
    from airflow_odf.odf.ingest.polling import pull_polling
    from airflow_odf.odf.operation import IngestResult
    from airflow_odf.odf.transform.execute import run_transform

    if planned.action == "transform":
        return run_transform(repo, planned.name, runner, _transform_options(args, repo))
    if planned.action == "ingest":
        options = _options(
            args,
            repo,
            fetch_uncacheable=args.fetch_uncacheable,
            set_watermark=_timestamp(args.set_watermark, "--set-watermark"),
            files_per_batch=args.files_per_batch,
            trust=source_trust(args),
        )
        return pull_polling(repo.dataset_by_id(planned.dataset_id), planned.name, runner, options)
    head = None if planned.head is None else str(planned.head)
    return IngestResult(planned.name, str(planned.dataset_id), head, head)


def _outcome_dict(outcome: PullOutcome[IngestResult]) -> dict[str, Any]:
    head = {} if outcome.result is None else outcome.result.as_dict()
    return {
        "dataset": outcome.name,
        "dataset_id": str(outcome.planned.dataset_id),
        **head,
        "depth": outcome.planned.depth,
        "status": outcome.status,
        "message": outcome.message,
    }


def _report_pull(
    args: argparse.Namespace, outcomes: list[PullOutcome[IngestResult]], *, single: bool
) -> None:
    if args.format == "json":
        plain: Any = [_outcome_dict(o) for o in outcomes]
        if single:  # as before `odf pull` took several names: the result alone
            plain = outcomes[0].result.as_dict() if outcomes[0].result is not None else None
        print(json.dumps(plain, indent=2))
        return
    if not outcomes:
        print("no datasets to pull")
    for outcome in outcomes:
        if outcome.result is not None and outcome.status == "up-to-date" and outcome.message:
            print(f"{outcome.name}: up to date ({outcome.message})")
        elif outcome.result is not None:
            _report(args, outcome.result)
        elif outcome.status == "failed":
            print(f"{outcome.name}: failed")
        else:
            print(outcome.line())


def cmd_pull(args: argparse.Namespace) -> None:
    """`odf pull NAME...`: one dataset keeps the output of old (a dict); several, --recursive or --all
    report a list in execution order, and fail (after running what they can) if any dataset failed.
    """
    repo = Repository.open(args.repo)
    if is_remote_pull(args, repo):
        cmd_remote_pull(args, repo)
        return
    _pull_options(args)
    _timestamp(args.set_watermark, "--set-watermark")
    plan = plan_pull(repo, None if args.all else args.names, recursive=args.recursive)
    single = not args.all and not args.recursive and len(plan.datasets) == 1
    if args.set_watermark is not None and plan.datasets[0].action != "ingest":
        raise CommandError(f"--set-watermark: {plan.datasets[0].name} is not a root with a polling source")
    runner = LazyRunner(args)
    outcomes = run_pull_plan(
        plan, lambda planned: _pull_one(args, repo, runner, planned), max_workers=args.max_workers
    )
    failed = [o for o in outcomes if o.status == "failed"]
    if single and failed:  # reported as before: the error itself (its exit code, its wording)
        assert failed[0].error is not None
        if isinstance(failed[0].error, ChecksFailed):
            raise _reported_failure(args, failed[0].error)
        raise failed[0].error
    _report_pull(args, outcomes, single=single)
    if not failed:
        return
    unexpected = [o.error for o in failed if o.error is not None and not isinstance(o.error, OdfError)]
    if unexpected:  # a bug stays a traceback, after one line per failed dataset
        print(PullFailedError(failed), file=sys.stderr)
        raise unexpected[0]
    raise PullFailedError(failed)


def cmd_ingest(args: argparse.Namespace) -> None:
    from airflow_odf.odf.ingest.push import push_ingest

    repo = Repository.open(args.repo)
    dataset = repo.dataset(args.name)
    try:
        result = push_ingest(
            dataset,
            args.name,
            LazyRunner(args),
            [os.path.abspath(f) for f in args.files],
            _options(args, repo),
            source_name=args.source,
            event_time=_timestamp(args.event_time, "--event-time"),
        )
    except ChecksFailed as e:
        raise _reported_failure(args, e) from None
    _report(args, result)


def cmd_transform(args: argparse.Namespace) -> None:
    from airflow_odf.odf.transform.execute import run_transform

    pins = {}
    for value in args.input_head or []:
        alias, sep, block = value.partition("=")
        if not sep or not alias or not block:
            raise CommandError(f"--input-head {value!r}: expected ALIAS=HASH")
        pins[alias] = block
    repo = Repository.open(args.repo)
    options = _transform_options(args, repo, pinned_heads=pins or None)
    try:
        result = run_transform(repo, args.name, LazyRunner(args), options)
    except ChecksFailed as e:
        raise _reported_failure(args, e) from None
    _report(args, result)


def cmd_tail(args: argparse.Namespace) -> None:
    import pyarrow as pa

    from airflow_odf.odf.chain.data_access import tail
    from airflow_odf.odf.query.output import write_rows

    dataset = Repository.open(args.repo).dataset(args.name)
    table = tail(dataset, args.n)
    write_rows(pa.table({}) if table is None else table, args.format, sys.stdout)


def register(groups: Any, repo_arg: argparse.ArgumentParser) -> None:
    """Adds `pull`, `ingest`, `transform` and `tail` to the `odf` parser."""
    engine_arg = argparse.ArgumentParser(add_help=False, parents=[engine_options()])
    engine_arg.add_argument(
        "--schema-policy",
        choices=SCHEMA_POLICIES,
        default=STRICT,
        help="new data whose schema differs: strict refuses it, additive commits allowed changes",
    )
    engine_arg.add_argument("--format", choices=("text", "json"), default="text")
    checks_arg = checks_options()
    ingest_arg = argparse.ArgumentParser(add_help=False)
    ingest_arg.add_argument("--max-records-per-slice", type=int, help="split the new data into slices")
    ingest_arg.add_argument(
        "--quarantine-bad-records", action="store_true", help="set malformed records aside instead of failing"
    )
    transform_arg = argparse.ArgumentParser(add_help=False)
    transform_arg.add_argument(
        "--max-input-records", type=int, help="derivatives: split a backlog into runs of this many records"
    )
    transform_arg.add_argument(
        "--reset-derivatives-on-diverged-input",
        action="store_true",
        help="derivatives: when an input was reset or compacted, re-process it from scratch",
    )
    p = groups.add_parser(
        "pull",
        parents=[repo_arg, engine_arg, ingest_arg, transform_arg, checks_arg, trust_options()],
        help="bring datasets up to date: ingest roots from their polling source, transform derivatives",
    )
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument(
        "-r", "--recursive", action="store_true", help="first update everything upstream, in dependency order"
    )
    p.add_argument("--all", action="store_true", help="pull every dataset of the repository")
    p.add_argument(
        "--max-workers",
        type=int,
        default=2,
        help="datasets of one dependency level pulled at once (default 2)",
    )
    p.add_argument(
        "--fetch-uncacheable", action="store_true", help="re-fetch sources without caching headers"
    )
    p.add_argument("--set-watermark", metavar="T", help="advance the watermark to this RFC 3339 time")
    p.add_argument("--files-per-batch", type=int, default=1, help="FilesGlob: files per AddData block")
    add_pull_options(p)
    p.set_defaults(func=cmd_pull)
    p = groups.add_parser(
        "ingest", parents=[repo_arg, engine_arg, ingest_arg, checks_arg], help="push files into a push source"
    )
    p.add_argument("name")
    p.add_argument("files", nargs="+")
    p.add_argument("--source", help="the push source's name (needed when there are several)")
    p.add_argument("--event-time", metavar="T", help="event time for records that carry none (RFC 3339)")
    p.set_defaults(func=cmd_ingest)
    p = groups.add_parser(
        "transform",
        parents=[repo_arg, engine_arg, transform_arg, checks_arg],
        help="bring a derivative dataset up to date",
    )
    p.add_argument("name")
    p.add_argument(
        "--input-head",
        action="append",
        metavar="ALIAS=HASH",
        help="process this input only up to that block (repeatable)",
    )
    p.set_defaults(func=cmd_transform)
    p = groups.add_parser("tail", parents=[repo_arg], help="print a dataset's last records")
    p.add_argument("name")
    p.add_argument("-n", type=positive_int, default=10, help="how many records (at least 1; default 10)")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")
    p.set_defaults(func=cmd_tail)

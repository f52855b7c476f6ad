"""The `checks=` argument of the ingest, push-ingest and transform operators (docs/checks.md): a
mapping in the checks file's form, or the path of a checks file. Read when the DAG is parsed (a bad one
is an import error naming the check) and again when the task runs."""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.odf.checks.spec import ChecksSpecError, CheckSuite, resolve_suite


def declared_checks(checks: Any) -> Any:
    """`checks` as given, once it reads as checks; ValueError naming the problem if not."""
    if checks is not None:
        try:
            resolve_suite(checks)
        except ChecksSpecError as e:
            raise ValueError(str(e)) from None
    return checks


def check_suite(checks: Any) -> CheckSuite | None:
    """The checks a task runs (None: none declared); a file that no longer reads fails the task."""
    try:
        suite = resolve_suite(checks)
    except ChecksSpecError as e:
        raise AirflowFailException(str(e)) from None
    return suite or None

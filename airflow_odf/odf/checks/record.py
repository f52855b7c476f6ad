"""The checks record of a dataset (`info/checks`): which checks passed for each commit that ran them,
keyed by the commit's new head, for the ODF view's chain (the Checks column).

Like the verification record it is derived data beside the summary, outside the chain: no block refers
to it, push and pull never copy it, and it is written only after the commit succeeded (a crash between
the two loses an entry, never adds one for a commit that did not land; so may two writers recording at
the same moment, as the record is replaced whole: the view then shows no checks for that commit). It
keeps the last `MAX_COMMITS` commits; a missing, damaged or oversized record reads as empty. It is as
trustworthy as the repository's storage: whoever can write there can write it.
"""

from __future__ import annotations

import json
from typing import Any

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.checks.results import CheckResult
from airflow_odf.odf.errors import OdfError

RECORD_KEY = "info/checks"
FORMAT_VERSION = 1
MAX_COMMITS = 500
MAX_RECORD_BYTES = 2 * 1024 * 1024
_MAX_OBSERVED_CHARS = 100


def _compact(result: CheckResult) -> dict[str, Any]:
    """A result without its failing rows (a passing commit has none) and with a short observed value."""
    observed = result.observed
    if not isinstance(observed, int | float | bool | type(None)):
        observed = str(observed)[:_MAX_OBSERVED_CHARS]
    return {"name": result.name, "check": result.check, "success": result.success, "observed": observed}


def read_checks_record(dataset: Dataset) -> dict[str, list[dict[str, Any]]]:
    """Commit head -> its checks (name, check, success, observed); empty when there is no readable record."""
    try:
        if dataset.store.size(RECORD_KEY) > MAX_RECORD_BYTES:
            return {}
        plain = json.loads(dataset.store.get(RECORD_KEY))
        if plain.get("version") != FORMAT_VERSION or not isinstance(plain.get("commits"), dict):
            return {}
        return {str(k): v for k, v in plain["commits"].items() if isinstance(v, list)}
    except (OdfError, ValueError, TypeError, AttributeError):
        return {}


def record_checks(dataset: Dataset, head: str, results: list[CheckResult]) -> None:
    """Adds the commit of `head` with its checks (the oldest entries beyond MAX_COMMITS dropped)."""
    commits = read_checks_record(dataset)
    commits.pop(head, None)
    commits[head] = [_compact(r) for r in results]
    kept = dict(list(commits.items())[-MAX_COMMITS:])
    data = json.dumps({"version": FORMAT_VERSION, "commits": kept}, ensure_ascii=False).encode()
    dataset.store.put(RECORD_KEY, data)


def summary_of(entry: list[dict[str, Any]]) -> str:
    """`7/7 passed` for a record entry (every check of a committed slice passed)."""
    passed = sum(1 for r in entry if isinstance(r, dict) and r.get("success") is True)
    return f"{passed}/{len(entry)} passed"

"""Quality checks before the head moves (write–audit–publish, docs/checks.md): what a check says
(`spec`), the engine request that evaluates them on the staged slice (`request`), what they found and
`ChecksFailed` (`results`), rejected slices kept for inspection (`quarantine`) and the per-commit
record (`record`)."""

from airflow_odf.odf.checks.results import CheckResult, ChecksFailed, ChecksNotEvaluated
from airflow_odf.odf.checks.spec import Check, ChecksSpecError, CheckSuite, resolve_suite

__all__ = [
    "Check",
    "CheckResult",
    "CheckSuite",
    "ChecksFailed",
    "ChecksNotEvaluated",
    "ChecksSpecError",
    "resolve_suite",
]

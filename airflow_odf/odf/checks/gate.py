"""The gate between the engine's answer and the commit: judge the checks' results; on a failure keep the
rejected slice when asked (`quarantine`) and raise ChecksFailed, so that nothing is committed; after a
commit, record what passed (`record`). Ingest and transform both go through it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.checks.quarantine import keep_rejected
from airflow_odf.odf.checks.record import record_checks
from airflow_odf.odf.checks.results import CheckResult, ChecksFailed, judged
from airflow_odf.odf.checks.spec import CheckSuite
from airflow_odf.odf.errors import OdfError


def gate(
    suite: CheckSuite,
    engine_results: list[dict[str, Any]] | None,
    *,
    alias: str,
    dataset_id: str,
    head: str | None,
    records: int,
    operation_id: str,
    quarantine_in: Path | None,
    fetch: Callable[[Path], list[Path]],
    input_heads: dict[str, str] | None = None,
) -> list[CheckResult]:
    """The results when every check passed; else ChecksFailed (the slice kept under `quarantine_in`,
    the repository's scratch space, when given; `fetch` puts its files in a folder; `input_heads`: a
    transform's inputs as the refused data read them)."""
    results = judged(suite, engine_results, alias)
    if all(r.success for r in results):
        return results
    kept = None
    if quarantine_in is not None:
        kept = keep_rejected(
            quarantine_in,
            operation_id,
            dataset=alias,
            dataset_id=dataset_id,
            head=head,
            records=records,
            results=results,
            fetch=fetch,
        )
    raise ChecksFailed(alias, results, kept, input_heads)


def after_commit(dataset: Dataset, head: str, results: list[CheckResult], log: Callable[[str], None]) -> None:
    """Records the commit's passed checks (`info/checks`); a failure to record is logged, not raised:
    the commit stands."""
    try:
        record_checks(dataset, head, results)
    except (OdfError, OSError) as e:
        log(f"the checks of {head} were not recorded: {e}")
    log(f"{len(results)} check(s) passed")

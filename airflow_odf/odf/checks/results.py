"""What the checks found: one result per check in the shared shape of the XCom, `--format json` and the
per-commit record, and `ChecksFailed` when any failed (then nothing was committed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_odf.odf.checks.spec import CheckSuite
from airflow_odf.odf.errors import OdfError, quoted

_MAX_VALUE_CHARS = 200  # a value of the engine's, shown in one line


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome; `observed` is the aggregate's value (`None`: no value, e.g. min of nulls),
    `failing_rows` up to 10 rows of the candidate that make it fail (when it failed and rows can be named)."""

    name: str
    kind: str
    column: str | None
    check: str
    success: bool
    observed: Any
    expected: str | None
    failing_rows: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "column": self.column,
            "check": self.check,
            "success": self.success,
            "observed": self.observed,
            "expected": self.expected,
            "failing_rows": list(self.failing_rows),
        }

    @classmethod
    def from_dict(cls, plain: dict[str, Any]) -> CheckResult:
        return cls(
            str(plain["name"]),
            str(plain["kind"]),
            plain.get("column"),
            str(plain["check"]),
            bool(plain["success"]),
            plain.get("observed"),
            plain.get("expected"),
            list(plain.get("failing_rows") or []),
        )

    def line(self) -> str:
        """One line: the check, what was observed, what passes, and how many failing rows are shown."""
        what = f"{self.check} of {self.column}" if self.column is not None else f"table check, {self.check}"
        rows = f"; {len(self.failing_rows)} failing row(s) shown" if self.failing_rows else ""
        observed = _shown(self.observed)
        return (
            f"check {quoted(self.name)} ({what}) failed: observed {observed}, expected {self.expected}{rows}"
        )


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 1] + "…"


class ChecksNotEvaluated(OdfError):
    """The engine answered without the results of the checks it was given (an engine that does not
    implement them): nothing is committed."""


def judged(suite: CheckSuite, engine_results: list[dict[str, Any]] | None, alias: str) -> list[CheckResult]:
    """The results of `suite` from the engine's `check_results`; every check must have one."""
    by_name = {r.get("name"): r for r in engine_results or [] if isinstance(r, dict)}
    missing = [c.name for c in suite.checks if c.name not in by_name]
    if engine_results is None or missing:
        raise ChecksNotEvaluated(
            f"{alias}: the engine did not evaluate the checks ({', '.join(map(quoted, missing))}): it "
            "may not implement them (engine contract: `checks`); nothing was committed"
        )
    results = []
    for check in suite.checks:
        found = by_name[check.name]
        rows = found.get("failing_rows") or []
        results.append(
            CheckResult(
                check.name,
                check.kind,
                check.column,
                check.check,
                found.get("success") is True,
                found.get("observed"),
                check.expected,
                [r for r in rows if isinstance(r, dict)][:10],
            )
        )
    return results


class ChecksFailed(OdfError):
    """Checks failed on the candidate slice: nothing was committed (the head is where it was, staged
    objects removed). `results` holds every check's result; `quarantine` where the slice was kept."""

    def __init__(
        self,
        dataset: str,
        results: list[CheckResult],
        quarantine: Path | None = None,
        input_heads: dict[str, str] | None = None,
    ) -> None:
        self.dataset = dataset
        self.results = results
        self.quarantine = quarantine
        self.input_heads = input_heads or {}  # a transform's: input DID -> block its refused data read up to
        super().__init__("\n".join(self.lines()))

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if not r.success]

    def lines(self) -> list[str]:
        """A heading, then one line per failed check."""
        kept = f"; the rejected slice is kept in {self.quarantine}" if self.quarantine else ""
        head = (
            f"{self.dataset}: {len(self.failed)} of {len(self.results)} check(s) failed; nothing was "
            f"committed{kept}"
        )
        return [head, *(f"  {r.line()}" for r in self.failed)]

    def sample_lines(self) -> list[str]:
        """The failing rows of each failed check, one row (JSON) a line."""
        lines = []
        for r in self.failed:
            if r.failing_rows:
                lines.append(f"failing rows of {quoted(r.name)}:")
                lines += [f"  {_shown(row)}" for row in r.failing_rows]
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "committed": False,
            "checks": [r.as_dict() for r in self.results],
            "quarantine": None if self.quarantine is None else str(self.quarantine),
            "input_heads": self.input_heads,
        }

"""Hypothesis profiles of the fuzz suite and its tally of outcomes.

`ci` (the default) is bounded so the suite stays fast; `survey` runs many more examples for a hardening
review (`ODF_FUZZ_EXAMPLES` per test, default 2000). With `ODF_FUZZ_REPORT=FILE`, the session writes how
many inputs each attack group tried and how each ended (accepted, or refused with one clear error); a
traceback, a hang or touched data fails the test itself.
`ODF_FUZZ_PROFILE=survey ODF_FUZZ_REPORT=/tmp/fuzz.json python -m pytest tests/fuzz`
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

_SHARED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
settings.register_profile("ci", max_examples=60, derandomize=True, **_SHARED)
settings.register_profile("survey", max_examples=int(os.environ.get("ODF_FUZZ_EXAMPLES", "2000")), **_SHARED)
settings.load_profile(os.environ.get("ODF_FUZZ_PROFILE", "ci"))


class Outcomes:
    """Counts, per attack group, the inputs tried and how each ended."""

    def __init__(self) -> None:
        self.counts: defaultdict[str, Counter[str]] = defaultdict(Counter)

    def record(self, group: str, outcome: str) -> None:
        self.counts[group][outcome] += 1


_OUTCOMES = Outcomes()


@pytest.fixture(scope="session")
def outcomes() -> Iterator[Outcomes]:
    yield _OUTCOMES
    report = os.environ.get("ODF_FUZZ_REPORT")
    if report:
        table = {group: {"tried": sum(c.values()), **c} for group, c in sorted(_OUTCOMES.counts.items())}
        with open(report, "w") as out:
            json.dump(table, out, indent=2)

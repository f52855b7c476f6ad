"""The docs quote the example DAGs as they are: every `<!-- from dags_examples/FILE, between "# [START m]"
and "# [END m]" -->` comment in docs/ is followed by a python block equal to that part of FILE."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tests.paths import REPO

_ORIGIN = re.compile(r'<!-- from dags_examples/(\S+), between "# \[START (\S+)\]" and "# \[END \2\]" -->')


def _quotes() -> list[tuple[Path, str, str, str]]:
    """(doc, example file, marker, the python block that follows the comment) for every quote."""
    quotes = []
    for doc in sorted((REPO / "docs").rglob("*.md")):
        text = doc.read_text(encoding="utf-8")
        for match in _ORIGIN.finditer(text):
            block = text[match.end() :].split("```python\n", 1)[1].split("```", 1)[0]
            quotes.append((doc, match.group(1), match.group(2), block))
    return quotes


QUOTES = _quotes()


def test_the_docs_quote_the_examples() -> None:
    assert len(QUOTES) >= 9


@pytest.mark.parametrize(
    ("doc", "example", "marker", "shown"), QUOTES, ids=[f"{q[0].name}:{q[2]}" for q in QUOTES]
)
def test_a_quote_is_the_example_as_it_is(doc: Path, example: str, marker: str, shown: str) -> None:
    code = (REPO / "dags_examples" / example).read_text(encoding="utf-8")
    snippet = code.split(f"# [START {marker}]\n", 1)[1].split(f"# [END {marker}]", 1)[0]
    assert textwrap.dedent(shown).strip() == textwrap.dedent(snippet).strip()

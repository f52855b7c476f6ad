"""Mutated real manifests: reading gives manifests or a ManifestError of one line per problem, and
`odf snapshot validate` exits 0 or 2 with one clear line per problem on stderr, never a traceback.

Mutations are structure-aware: a node of the parsed manifest is replaced by another value, by raw
hostile YAML (huge numbers, deep nesting, recursive or exploding aliases, long names and hashes, odd
times) or removed, and the tree is written back as YAML.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from airflow_odf.cli.errors import EXIT_BAD_INPUT
from airflow_odf.cli.main import main
from airflow_odf.odf.errors import ManifestError
from airflow_odf.odf.format.manifests import load_manifests
from tests.fuzz.conftest import Outcomes
from tests.fuzz.test_fuzz_blocks import time_limit
from tests.paths import CONFORMANCE_BLOCKS

ROOT = Path(__file__).resolve().parents[2]
SEEDS = sorted((ROOT / "dags_examples").rglob("*.yaml")) + sorted(CONFORMANCE_BLOCKS.glob("*.yaml"))
TREES = [yaml.safe_load(p.read_text(encoding="utf-8")) for p in SEEDS]
SECONDS_PER_MANIFEST = 30

RAW = [
    "9" * 5_000,
    "0x" + "f" * 5_000,
    "-" + "1" * 100,
    "[" * 3_000 + "]" * 3_000,
    "{a: " * 2_000 + "1" + "}" * 2_000,
    "&r [*r]",
    "&m {k: *m}",
    "*undefined",
    "{a: 1, a: 2}",
    "!!binary aGVsbG8=",
    "!!python/object:os.system ls",
    "'9999-12-31T23:59:59-23:59'",
    "'0001-01-01T00:00:00+00:01'",
    "'0000-00-00T00:00:00Z'",
    "z" + "2" * 5_000,
    "f" + "0" * 5_000,
    "did:odf:z" + "2" * 5_000,
    "a" * 300,
    "a/b",
    "'a\\nb'",
    "1e400",
    ".nan",
    "{? [a, b]: c}",
    "{" + ", ".join(f"k{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9) if i else 'x'}]" for i in range(8)) + "}",
]
PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield from _paths(child, (*prefix, key))


def _replace(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of `node` with the value at `path` replaced (removed when `value` is `_REMOVE`)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    out = dict(node) if isinstance(node, dict) else list(node)
    if value is _REMOVE and not rest:
        del out[head]
    else:
        out[head] = _replace(node[head], rest, value)
    return out


_REMOVE = object()
_MARK = "RAWxMARK"


@st.composite
def mutated_manifests(draw: st.DrawFn) -> str:
    tree = draw(st.sampled_from(TREES))
    raw = []
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(_paths(tree))))
        choice = draw(st.integers(0, 2))
        if choice == 0:
            raw.append(draw(st.sampled_from(RAW)))
            value: Any = f"{_MARK}{len(raw) - 1}"
        elif choice == 1:
            value = draw(PLAIN)
        else:
            value = _REMOVE if path else {}
        tree = _replace(tree, path, value)
    text = yaml.safe_dump(tree, sort_keys=False, width=1 << 16)
    for i, snippet in reversed(list(enumerate(raw))):
        text = text.replace(f"{_MARK}{i}", snippet)
    return text


@given(text=mutated_manifests())
def test_a_mutated_manifest_is_read_or_each_problem_is_one_line(text: str, outcomes: Outcomes) -> None:
    with time_limit(SECONDS_PER_MANIFEST):
        try:
            manifests = load_manifests(text, "m.yaml")
        except ManifestError as e:
            assert e.problems
            assert all(len(line.splitlines()) == 1 for line in e.lines()), e.lines()
            outcomes.record("manifest (library)", "refused")
        else:
            assert manifests
            outcomes.record("manifest (library)", "accepted")


@given(text=mutated_manifests())
def test_odf_snapshot_validate_of_a_mutated_manifest_is_ok_or_clear(text: str, outcomes: Outcomes) -> None:
    with tempfile.TemporaryDirectory() as tmp, time_limit(SECONDS_PER_MANIFEST):
        path = Path(tmp) / "m.yaml"
        path.write_text(text, encoding="utf-8")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["snapshot", "validate", str(path)])
    assert code in (0, EXIT_BAD_INPUT)
    assert "Traceback" not in err.getvalue()
    lines = err.getvalue().splitlines()
    if code == 0:
        assert lines == [] and out.getvalue().startswith(f"{path}: ok (")
    else:
        assert lines and all(line.startswith(f"{path}: ") for line in lines), err.getvalue()
    outcomes.record("manifest (odf snapshot validate)", "accepted" if code == 0 else f"refused (exit {code})")

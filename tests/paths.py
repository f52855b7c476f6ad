"""Where the tests find their data.

The block conformance vectors are the repository's own test data (tests/conformance/data/blocks): a
byte-identical copy of the shared folder's conformance/blocks, so that a fresh clone needs nothing beside
it; tests/conformance/test_shared_copy.py compares the two when the shared folder is there.

The reference ecosystem's real manifests live only in the shared folder (../shared beside the repository,
or $ODF_SHARED_DIR), under reference/upstream. Tests that read them carry `needs_upstream` (or, in a
fixture, call `skip_without_upstream`) and are skipped when it is absent. CI sets ODF_REQUIRE_SHARED=1:
then an absent shared folder fails the run instead (tests/conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFORMANCE_BLOCKS = REPO / "tests" / "conformance" / "data" / "blocks"

# resolved now: some tests change the working directory
SHARED = Path(os.environ.get("ODF_SHARED_DIR") or REPO.parent / "shared").resolve()
SHARED_BLOCKS = SHARED / "conformance" / "blocks"
UPSTREAM = SHARED / "reference" / "upstream"
REQUIRE_SHARED = os.environ.get("ODF_REQUIRE_SHARED", "") not in ("", "0")

HOW_TO_GET_SHARED = "put the shared folder beside the repository as ../shared, or point ODF_SHARED_DIR at it"
UPSTREAM_ABSENT = f"reference manifests not found: {UPSTREAM} is missing ({HOW_TO_GET_SHARED})"

needs_upstream = pytest.mark.skipif(not UPSTREAM.is_dir(), reason=UPSTREAM_ABSENT)


def skip_without_upstream() -> None:
    """For fixtures: skips the tests that use the fixture when the reference manifests are absent."""
    if not UPSTREAM.is_dir():
        pytest.skip(UPSTREAM_ABSENT)


def upstream_manifests() -> list[Path]:
    """Every real DatasetSnapshot manifest shipped with the reference material."""
    return sorted([*UPSTREAM.glob("kamu-cli/examples/**/*.yaml"), *UPSTREAM.glob("kamu-contrib/**/*.yaml")])


# The real manifests the SQL policy refuses (docs/security.md): file -> (dataset, the start of the reason).
# All four are written for another engine (Flink, DataFusion) in SQL that Spark, which runs them here,
# does not have; the last is also valid Spark SQL (a column named `to`) that the parser does not model.
_TOKENS_MINTED = (
    "net.rocketpool.reth.tokens-minted",
    "preprocess step 1 of 1: function to_timestamp_seconds at line 4, column 5 is refused: it is not a "
    "Spark built-in function; its engine is datafusion",
)
SQL_REFUSED_UPSTREAM = {
    "kamu-cli/examples/overdue_shipments/com.acme.shipments.overdue.yaml": (
        "com.acme.shipments.overdue",
        "transform step 2 of 3 (alias 'order_shipments_agg'): function TUMBLE_START at line 2, column 3 is "
        "refused: it is not a Spark built-in function; its engine is flink",
    ),
    "kamu-cli/examples/reth-vs-snp500/net.rocketpool.reth.tokens-minted.yaml": _TOKENS_MINTED,
    "kamu-contrib/net.rocketpool/reth.tokens-minted.yaml": _TOKENS_MINTED,
    "kamu-contrib/net.rocketpool/reth.mint-burn.yaml": (
        "net.rocketpool.reth.mint-burn",
        "transform step 1 of 1: the statement at line 24, column 9 is refused: it cannot be parsed as Spark "
        "SQL (Expected table name but got 'as'); its engine is datafusion",
    ),
}
SQL_REFUSED_NAMES = dict(SQL_REFUSED_UPSTREAM.values())


def missing_shared() -> list[Path]:
    """The parts of the shared folder the tests read that are not there."""
    return [p for p in (SHARED_BLOCKS, UPSTREAM) if not p.is_dir()]

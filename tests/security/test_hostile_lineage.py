"""Hostile SQL on the lineage path: column lineage reads a transform's SQL through the SQL policy
(`parse_query`), so every construct of issue 34 — alone, or as a later step of a transform — gives no
column lineage (never an error, nothing run, nothing touched), also when it sits in a chain's SetTransform
that was committed past the policy and an OpenLineage event is built from it."""

from __future__ import annotations

import pytest

from airflow_odf.lineage import LineageDataset, LineageField, transform_column_lineage
from airflow_odf.odf.format import model
from airflow_odf.odf.transform.column_lineage import column_lineage
from tests.security.test_hostile_sql import (
    CONSTRUCTS,
    CTE_SHADOWING,
    ROOT,
    Canary,
    Construct,
    canary,  # noqa: F401  (the fixture, shared)
)

COLUMNS = ["offset", "op", "system_time", "event_time", "symbol", "price"]
HOSTILE = [*CONSTRUCTS, CTE_SHADOWING]


@pytest.mark.parametrize("construct", HOSTILE, ids=lambda c: c.id)
def test_no_column_lineage_of_a_hostile_statement(
    construct: Construct,
    canary: Canary,  # noqa: F811  (the fixture imported above)
) -> None:
    sql = construct.over(ROOT, canary)
    assert column_lineage([(sql, None)], {ROOT: COLUMNS}) is None
    benign = (f"SELECT event_time, symbol FROM {ROOT}", "first")
    assert column_lineage([benign, (construct.over("first", canary), None)], {ROOT: COLUMNS}) is None
    canary.assert_untouched()


@pytest.mark.parametrize("construct", HOSTILE, ids=lambda c: c.id)
def test_no_column_lineage_facet_from_a_chain_committed_past_the_policy(
    construct: Construct,
    canary: Canary,  # noqa: F811  (the fixture imported above)
) -> None:
    """What `run_lineage` gives an OpenLineage event for a derivative whose chain holds hostile SQL."""
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref="did:odf:fed01", alias=ROOT)],
        transform=model.TransformSql(engine="spark", query=construct.over(ROOT, canary)),
    )
    fields = tuple(LineageField(c, "string") for c in COLUMNS)
    source = LineageDataset("fed01", ROOT, fields)
    output = LineageDataset("fed02", "hostile", (*fields[:4], LineageField("v", "string")))
    assert transform_column_lineage(transform, (source,), output) is None
    canary.assert_untouched()

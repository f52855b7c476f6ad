"""docs/schemas.md stays true: its evolution examples get the verdicts it states, its YAML proposal reads
and is allowed. (The type table is checked by test_type_table.py, the session by tests/integration.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model as m
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.repo.schema_migration import check_proposed
from airflow_odf.odf.schema.ddl import parse_ddl_schema
from airflow_odf.odf.schema.text import read_proposed_schema
from tests.paths import REPO

DOC = REPO / "docs" / "schemas.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_EXAMPLE = re.compile(r"^(?P<ddl>.+?)\s{2,}(?P<verdict>allowed|denied):\s+(?P<column>\S+) (?P<rule>[\w-]+)$")
MS = m.TimeUnit.MILLISECOND


def _blocks(language: str) -> list[str]:
    return [body for lang, body in _BLOCK.findall(DOC.read_text()) if lang == language]


def _examples() -> list[tuple[str, bool, str, str]]:
    lines = [line for body in _blocks("text") for line in body.splitlines()]
    matches = [_EXAMPLE.match(line) for line in lines]
    return [(x["ddl"], x["verdict"] == "allowed", x["column"], x["rule"]) for x in matches if x]


@pytest.fixture
def cities(tmp_path: Path) -> Dataset:
    """The documented dataset: system columns, then `city STRING, population BIGINT`."""
    repo = Repository.init(tmp_path / "repo")
    repo.add(m.DatasetSnapshot(name="cities", kind=m.DatasetKind.ROOT, metadata=[]))
    dataset = repo.dataset("cities")
    system = [
        m.DataField(name="offset", type=m.DataTypeInt64()),
        m.DataField(name="op", type=m.DataTypeInt32()),
        m.DataField(name="system_time", type=m.DataTypeTimestamp(unit=MS, timezone="UTC")),
        m.DataField(name="event_time", type=m.DataTypeTimestamp(unit=MS, timezone="UTC")),
    ]
    data = parse_ddl_schema("city STRING, population BIGINT").fields
    dataset.commit(
        [m.SetDataSchema(schema=m.DataSchema(fields=[*system, *data]))], system_time=Timestamp.now()
    )
    return dataset


def test_the_documented_examples_are_there() -> None:
    assert len(_examples()) == 7


@pytest.mark.parametrize(("ddl", "allowed", "column", "rule"), _examples())
def test_each_documented_example_gets_its_verdict(
    cities: Dataset, ddl: str, allowed: bool, column: str, rule: str
) -> None:
    _, changes = check_proposed(cities, parse_ddl_schema(ddl))
    assert [(c.column, c.rule, c.allowed) for c in changes] == [(column, rule, allowed)]


def test_the_documented_yaml_proposal_reads_and_is_allowed(cities: Dataset, tmp_path: Path) -> None:
    [body] = [b for b in _blocks("yaml") if b.startswith("# described.yaml")]
    path = tmp_path / "described.yaml"
    path.write_text(body)
    _, changes = check_proposed(cities, read_proposed_schema(path))
    assert [(c.column, c.rule, c.allowed) for c in changes] == [
        ("city", "attributes-changed", True),
        ("*", "attributes-changed", True),
    ]

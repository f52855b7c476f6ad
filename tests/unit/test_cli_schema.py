"""`odf schema show|diff|apply|migrate` on a real repository (`infer` runs Spark: tests/engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.format import model as m
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.ddl import DESCRIPTION
from airflow_odf.odf.schema.text import read_proposed_schema
from tests.unit.test_schema_migration import CONVERTED, ROWS, T0, _legacy_dataset

EXIT_BAD_INPUT, EXIT_DENIED = 2, 4


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    _legacy_dataset(Repository.init(root), tmp_path)
    return root


def odf(repo: Path, *args: str) -> int:
    command, *rest = args
    return main(["schema", command, "--repo", str(repo), *rest])


def test_show_a_legacy_schema_in_every_format(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert odf(repo, "show", "legacy") == 0
    out, err = capsys.readouterr()
    assert out.startswith(
        "fields:\n- name: offset\n  type:\n    kind: Option\n    inner:\n      kind: Int64\n"
    )
    assert "legacy rawArrowSchema (RFC-010), shown in ODF form; `odf schema migrate legacy`" in err
    shown = Path(repo.parent / "shown.yaml")
    shown.write_text(out)
    assert read_proposed_schema(shown) == CONVERTED  # what show prints, diff and apply read

    # the short form `odf schema NAME` is `odf schema show NAME`
    assert main(["schema", "legacy", "--repo", str(repo), "--format", "ddl"]) == 0
    short = capsys.readouterr().out
    assert odf(repo, "show", "legacy", "--format", "ddl") == 0
    assert capsys.readouterr().out == short
    assert short.splitlines() == [
        "offset BIGINT,",
        "op INT,",
        "system_time TIMESTAMP,",
        "event_time TIMESTAMP,",
        "city STRING,",
        "population BIGINT",
    ]
    assert odf(repo, "show", "legacy", "--format", "arrow") == 0
    out = capsys.readouterr().out
    assert "city: large_string\n" in out  # a legacy schema: the Arrow schema as recorded
    assert odf(repo, "show", "legacy", "--format", "spark") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == ["root", " |-- offset: long (nullable = true)"]
    assert " |-- system_time: timestamp (nullable = true)" in out


def test_migrate_then_again(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = Repository.open(repo).dataset("legacy")
    assert odf(repo, "migrate", "legacy") == 0
    assert capsys.readouterr().out.startswith(
        "legacy: the legacy rawArrowSchema was migrated to ODF form (block "
    )
    head = dataset.head()
    assert dataset.block(head).event == m.SetDataSchema(schema=CONVERTED)
    assert odf(repo, "migrate", "legacy") == 0
    assert capsys.readouterr().out == "legacy: the schema is already in ODF form\n"
    assert dataset.head() == head
    assert odf(repo, "show", "legacy", "--format", "arrow") == 0
    out, err = capsys.readouterr()
    assert "city: string\n" in out and err == ""  # ODF form now: the default layouts


def test_diff_prints_the_structured_diff_and_fails_on_a_denial(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = Repository.open(repo).dataset("legacy")
    head = dataset.head()
    allowed = tmp_path / "allowed.ddl"  # data columns only: the system columns are kept
    allowed.write_text("city STRING COMMENT 'City name', population BIGINT, country STRING")
    assert odf(repo, "diff", "legacy", "--proposed", str(allowed)) == 0
    assert capsys.readouterr().out.splitlines() == [
        "COLUMN   OLD             NEW             RULE                   ALLOWED",
        "city     Option<String>  Option<String>  attributes-changed     yes",
        "country  -               Option<String>  optional-column-added  yes",
    ]
    assert dataset.head() == head

    denied = tmp_path / "denied.ddl"
    denied.write_text("city STRING, population INT")
    assert odf(repo, "diff", "legacy", "--proposed", str(denied), "--format", "json") == EXIT_DENIED
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report == {
        "dataset": "legacy",
        "allowed": False,
        "changes": [
            {
                "column": "population",
                "old": "Option<Int64>",
                "new": "Option<Int32>",
                "rule": "type-changed",
                "allowed": False,
            }
        ],
    }
    assert err == "legacy: the proposed schema breaks the evolution rules (type-changed)\n"
    assert dataset.head() == head  # diff never commits


def test_apply_commits_what_the_rules_allow(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = Repository.open(repo).dataset("legacy")
    assert odf(repo, "migrate", "legacy") == 0
    capsys.readouterr()
    described = tmp_path / "described.ddl"
    described.write_text("city STRING COMMENT 'City name', population BIGINT, country STRING")
    assert odf(repo, "apply", "legacy", "--proposed", str(described)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["COLUMN", "OLD", "NEW", "RULE", "ALLOWED"]
    assert lines[1].split() == ["city", "Option<String>", "Option<String>", "attributes-changed", "yes"]
    assert lines[2].split() == ["country", "-", "Option<String>", "optional-column-added", "yes"]
    assert lines[3].startswith("legacy: new schema committed (block ")
    schema = dataset.state().schema.schema
    assert [f.name for f in schema.fields] == [*(f.name for f in CONVERTED.fields), "country"]
    assert schema.fields[4].extra == {DESCRIPTION: "City name"}

    head = dataset.head()
    removed = tmp_path / "removed.ddl"
    removed.write_text("city STRING")
    assert odf(repo, "apply", "legacy", "--proposed", str(removed)) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("rejected: legacy: the proposed schema was not committed: ")
    assert "population: Option<Int64> -> - (column-removed, denied)" in err
    assert "country: Option<String> -> - (column-removed, denied)" in err
    assert dataset.head() == head


def test_bad_input_is_one_line_naming_what_is_wrong(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Repository.open(repo).add(
        m.DatasetSnapshot(name="empty", kind=m.DatasetKind.ROOT, metadata=[]), system_time=T0
    )
    cases = [
        (("show", "empty"), "empty has no SetDataSchema yet"),
        (("show", "nope"), "no dataset named 'nope'"),
        (
            ("diff", "legacy", "--proposed", str(tmp_path / "none.yaml")),
            "none.yaml: cannot read the schema file",
        ),
        (("migrate", "empty"), "empty has no SetDataSchema yet"),
    ]
    for args, phrase in cases:
        assert odf(repo, *args) == EXIT_BAD_INPUT
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and phrase in err, err

    odd = Repository.open(repo).dataset("empty")
    odd.commit([m.SetDataSchema(schema=m.DataSchema(fields=[m.DataField(name="t", type=m.DataTypeTime())]))])
    assert odf(repo, "show", "empty", "--format", "spark") == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("empty: column 't' has Arrow type time32[ms], which Spark cannot represent")
    assert odf(repo, "show", "empty", "--format", "ddl") == EXIT_BAD_INPUT
    assert "columns.t: Time has no DDL type" in capsys.readouterr().err


def test_rows_are_untouched_by_schema_commands(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert odf(repo, "migrate", "legacy") == 0
    capsys.readouterr()
    assert main(["tail", "--repo", str(repo), "legacy", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["offset"], r["city"], r["population"]) for r in rows] == [
        (r["offset"], r["city"], r["population"]) for r in ROWS
    ]

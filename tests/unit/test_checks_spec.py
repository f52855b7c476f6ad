"""Quality checks without Spark: the checks file's vocabulary and its one-line errors, the conditions the
engine gets (tolerance applied), the statements of the request (one aggregation pass per relation, a
failing-rows query where rows can be named), the result the engine must give for every check, the
per-commit record, and the CLI's flags refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.checks.record import MAX_COMMITS, read_checks_record, record_checks, summary_of
from airflow_odf.odf.checks.request import checks_request, engine_conditions, is_aggregate
from airflow_odf.odf.checks.results import CheckResult, ChecksNotEvaluated, judged
from airflow_odf.odf.checks.spec import ChecksSpecError, read_checks_file, resolve_suite, statement_check
from airflow_odf.odf.repo.repository import Repository

FILE = """\
version: 1
columns:
  trade_id:
    null_check: {equal_to: 0}
    unique_check: {equal_to: 0, scope: dataset}
  price:
    min: {greater_than: 0}
    max: {leq_to: 1000, tolerance: 0.1}
  symbol:
    distinct_check: {equal_to: 100, tolerance: 0.05}
tables:
  positive_quantity:
    check_statement: quantity > 0
  enough_rows: COUNT(*) >= 100
  no_future:
    query: SELECT * FROM candidate WHERE event_time > current_timestamp()
"""


def test_the_file_reads_into_named_checks(tmp_path: Path) -> None:
    path = tmp_path / "checks.yaml"
    path.write_text(FILE)
    suite = read_checks_file(path)
    assert [(c.name, c.kind, c.check, c.scope) for c in suite.checks] == [
        ("trade_id.null_check", "column", "null_check", "candidate"),
        ("trade_id.unique_check", "column", "unique_check", "dataset"),
        ("price.min", "column", "min", "candidate"),
        ("price.max", "column", "max", "candidate"),
        ("symbol.distinct_check", "column", "distinct_check", "candidate"),
        ("positive_quantity", "table", "sql", "candidate"),
        ("enough_rows", "table", "sql", "candidate"),
        ("no_future", "table", "query", "candidate"),
    ]
    assert suite.reads_dataset
    assert [c.expected for c in suite.checks] == [
        "equal_to 0",
        "equal_to 0",
        "greater_than 0",
        "leq_to 1000 (tolerance 0.1)",
        "equal_to 100 (tolerance 0.05)",
        "true",
        "true",
        "no rows",
    ]
    assert [engine_conditions(c) for c in suite.checks] == [
        [["eq", 0]],
        [["eq", 0]],
        [["gt", 0]],
        [["le", 1100.0]],
        [["ge", 95.0], ["le", 105.0]],
        [["eq", 1]],
        [["eq", 1]],
        [],
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "columns:\n  x:\n    nul_check: {equal_to: 0}\n",
            "check 'x.nul_check': unknown column check 'nul_check'",
        ),
        ("columns:\n  x:\n    min: {equal_to: 0, geq_to: 1}\n", "equal_to cannot be combined"),
        ("columns:\n  x:\n    min: {greater_than: 0, geq_to: 1}\n", "one lower and one upper bound at most"),
        ("columns:\n  x:\n    min: {}\n", "check 'x.min': no condition"),
        ("columns:\n  x:\n    min: {geq_to: zero}\n", "check 'x.min': geq_to: expected a number"),
        ("columns:\n  x:\n    min: {geq_to: .nan}\n", "expected a number"),
        ("columns:\n  x:\n    min: {geq_to: 1, tolerance: -1}\n", "tolerance must be 0 or more"),
        ("columns:\n  x:\n    min: {geq_to: 1, scope: everything}\n", "scope 'everything': expected one of"),
        ("tables:\n  t: {check_statement: a, query: b}\n", "check 't': give exactly one of"),
        ("tables:\n  t: {statement: a}\n", "check 't': unknown key 'statement'"),
        ("tables:\n  t: {check_statement: '  '}\n", "check 't': expected SQL text"),
        ("checks: {}\n", "unknown key 'checks'; expected version, columns, tables"),
        ("version: 2\n", "version 2 is not supported"),
        ("columns: [a]\n", "columns and tables are mappings"),
        (
            "columns:\n  x: {min: {geq_to: 1}}\n  y: {min: {geq_to: 1}}\ntables: {x.min: COUNT(*) > 0}\n",
            "declared twice",
        ),
        ("columns:\n  x: {min: {geq_to: 1\n", "invalid YAML"),
        ("a: 1\n---\nb: 2\n", "one YAML document expected"),
    ],
)
def test_a_checks_file_that_does_not_read_is_one_line_naming_it(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "checks.yaml"
    path.write_text(text)
    with pytest.raises(ChecksSpecError) as caught:
        read_checks_file(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_check_statement_from_the_command_line() -> None:
    check = statement_check("no_negative=MIN(value) >= 0")
    assert (check.name, check.kind, check.check, check.statement) == (
        "no_negative",
        "table",
        "sql",
        "MIN(value) >= 0",
    )
    for bad in ("no_negative", "=x > 0", "x= "):
        with pytest.raises(ChecksSpecError, match="expected NAME=STATEMENT"):
            statement_check(bad)
    suite = resolve_suite({"tables": {"a": "COUNT(*) > 0"}}, ["b=x > 0"])
    assert [c.name for c in suite.checks] == ["a", "b"]
    with pytest.raises(ChecksSpecError, match="check 'a' is declared twice"):
        resolve_suite({"tables": {"a": "COUNT(*) > 0"}}, ["a=x > 0"])


def test_aggregate_or_row_by_row() -> None:
    assert is_aggregate("COUNT(*) > 0") and is_aggregate("MIN(value) >= 0") and is_aggregate("sum(x) = 1")
    assert not is_aggregate("value >= 0") and not is_aggregate("coalesce(a, b) IS NOT NULL")
    assert not is_aggregate("x IN (SELECT MAX(y) FROM candidate)")  # the aggregate is the subquery's
    assert not is_aggregate("SUM(x) OVER () > 0")


def test_the_request_evaluates_each_relation_in_one_pass(tmp_path: Path) -> None:
    path = tmp_path / "checks.yaml"
    path.write_text(FILE)
    plain = checks_request(read_checks_file(path), ["/repo/data/a", "/repo/data/b"])
    assert plain["dataset"] and plain["dataset_paths"] == ["/repo/data/a", "/repo/data/b"]
    candidate, symbol, dataset = plain["passes"]
    assert candidate["relation"] == "candidate" and dataset["relation"] == "dataset"
    assert candidate["query"] == (
        "SELECT\n"
        "  COUNT(*) - COUNT(`trade_id`) AS `c0`,\n"
        "  MIN(`price`) AS `c1`,\n"
        "  MAX(`price`) AS `c2`,\n"
        "  COALESCE(MIN(CASE WHEN (\nquantity > 0\n) THEN 1 ELSE 0 END), 1) AS `c3`,\n"
        "  CASE WHEN (\nCOUNT(*) >= 100\n) THEN 1 ELSE 0 END AS `c4`\n"
        "FROM candidate"
    )
    assert "distinct" not in candidate
    assert [c["failing_rows"] for c in candidate["checks"]] == [
        "SELECT * FROM candidate WHERE `trade_id` IS NULL",
        "SELECT * FROM candidate WHERE `price` <= 0",
        "SELECT * FROM candidate WHERE `price` > 1100.0",
        "SELECT * FROM candidate WHERE NOT COALESCE((\nquantity > 0\n), FALSE)",
        None,
    ]
    # each column's distinct counts in a pass of their own, which the engine may count without the query
    assert symbol["distinct"] == "symbol" and symbol["relation"] == "candidate"
    assert symbol["query"] == "SELECT\n  COUNT(DISTINCT `symbol`) AS `c0`\nFROM candidate"
    assert [(c["name"], c["check"], c["failing_rows"]) for c in symbol["checks"]] == [
        ("symbol.distinct_check", "distinct_check", None)
    ]
    assert dataset["distinct"] == "trade_id"
    assert (
        dataset["query"] == "SELECT\n  COUNT(`trade_id`) - COUNT(DISTINCT `trade_id`) AS `c0`\nFROM dataset"
    )
    assert dataset["checks"][0]["failing_rows"] == (
        "SELECT * FROM candidate WHERE `trade_id` IN "
        "(SELECT `trade_id` FROM dataset GROUP BY `trade_id` HAVING COUNT(*) > 1)"
    )
    assert plain["queries"] == [
        {
            "name": "no_future",
            "relation": "candidate",
            "query": "SELECT * FROM candidate WHERE event_time > current_timestamp()",
        }
    ]
    # every column with a distinct count gets a pass of its own (no row expanded per column)
    two = checks_request(
        resolve_suite(
            {
                "columns": {
                    "a": {"unique_check": {"equal_to": 0}},
                    "b": {"distinct_check": {"geq_to": 1}, "min": {"geq_to": 0}},
                }
            }
        )
    )
    assert [(p.get("distinct"), [c["name"] for c in p["checks"]]) for p in two["passes"]] == [
        (None, ["b.min"]),
        ("a", ["a.unique_check"]),
        ("b", ["b.distinct_check"]),
    ]
    # without a check of the whole dataset, its slices are not sent
    assert checks_request(resolve_suite(None, ["a=x > 0"]), ["/repo/data/a"])["dataset_paths"] == []


def test_every_check_needs_the_engines_result() -> None:
    suite = resolve_suite(None, ["a=x > 0", "b=COUNT(*) > 0"])
    with pytest.raises(
        ChecksNotEvaluated, match=r"the engine did not evaluate the checks .'a', 'b'.: it may not"
    ):
        judged(suite, None, "ds")
    with pytest.raises(ChecksNotEvaluated, match=r"\('b'\)"):
        judged(suite, [{"name": "a", "success": True, "observed": 1}], "ds")
    results = judged(
        suite,
        [
            {"name": "b", "success": True, "observed": 1},
            {"name": "a", "success": False, "observed": 0, "failing_rows": [{"x": i} for i in range(30)]},
        ],
        "ds",
    )
    assert [(r.name, r.success, len(r.failing_rows)) for r in results] == [("a", False, 10), ("b", True, 0)]


def test_the_record_keeps_the_last_commits(tmp_path: Path) -> None:
    from airflow_odf.odf.chain.dataset import Dataset
    from airflow_odf.odf.storage.local import LocalObjectStore

    dataset = Dataset(LocalObjectStore(tmp_path / "ds"))
    assert read_checks_record(dataset) == {}
    result = CheckResult("a", "table", None, "sql", True, 1, "true")
    for i in range(MAX_COMMITS + 3):
        record_checks(dataset, f"head{i}", [result])
    record = read_checks_record(dataset)
    assert len(record) == MAX_COMMITS and "head0" not in record and f"head{MAX_COMMITS + 2}" in record
    assert record["head3"] == [{"name": "a", "check": "sql", "success": True, "observed": 1}]
    assert summary_of(record["head3"]) == "1/1 passed"
    (tmp_path / "ds" / "info" / "checks").write_text("{not json")
    assert read_checks_record(dataset) == {}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    Repository.init(root)
    manifest = {
        "kind": "DatasetSnapshot",
        "version": 1,
        "content": {
            "name": "readings",
            "kind": "Root",
            "metadata": [
                {
                    "kind": "AddPushSource",
                    "sourceName": "default",
                    "read": {"kind": "Csv", "header": True, "ddlSchema": ["kwh DOUBLE"]},
                    "merge": {"kind": "Append"},
                }
            ],
        },
    }
    (tmp_path / "readings.yaml").write_text(json.dumps(manifest))
    assert main(["add", "--repo", str(root), str(tmp_path / "readings.yaml")]) == 0
    return root


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--check", "no_negative"], "--check 'no_negative': expected NAME=STATEMENT"),
        (["--checks", "missing.yaml"], "missing.yaml: cannot read the checks file"),
        (
            ["--check", "x=reflect('java.lang.System', 'getenv', 'HOME') = ''"],
            "check 'x': function reflect at line 1",
        ),
    ],
)
def test_the_cli_refuses_checks_that_do_not_read_before_anything_runs(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    data = tmp_path / "in.csv"
    data.write_text("kwh\n1.0\n")
    capsys.readouterr()
    assert main(["ingest", "--repo", str(repo), "readings", str(data), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert Repository.open(repo).dataset("readings").state().num_records == 0


def test_pull_takes_checks_for_one_dataset_only(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["pull", "--repo", str(repo), "--all", "--check", "x=COUNT(*) > 0"]) == 2
    assert "--check, --checks: only for a single dataset" in capsys.readouterr().err


def test_inspect_rejected_with_nothing_kept(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["inspect", "rejected", "--repo", str(repo)]) == 0
    assert capsys.readouterr().out == "no rejected slices\n"
    assert main(["inspect", "rejected", "--repo", str(repo), "readings", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []

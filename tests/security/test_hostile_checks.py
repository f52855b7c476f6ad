"""Hostile SQL in quality checks (docs/checks.md) is refused, in one line naming the check, before
anything runs: every construct of issue 34 as a check's query, the representative ones as a
`--check` statement and through the CLI, statements that try to break out of the aggregation the core
wraps them in, a column name that tries the same, and requests written by hand straight to the engine
(refused before it reads or writes anything)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from airflow_odf.cli.main import main
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.checks.request import CheckSqlRefused, checks_request
from airflow_odf.odf.checks.spec import resolve_suite
from airflow_odf.odf.engine_client.contract import IngestRequest, InputFile
from tests.security.test_hostile_sql import (
    BY_ID,
    CANARY_VALUE,
    CONSTRUCTS,
    CSV,
    DDL,
    Canary,
    Construct,
    canary,  # noqa: F401  (the module's canary fixture)
    one_line,
    spark_jobs,
)


@pytest.mark.parametrize("construct", CONSTRUCTS, ids=lambda c: c.id)
def test_a_hostile_check_query_is_refused_naming_the_check(construct: Construct, canary: Canary) -> None:  # noqa: F811
    query = construct.over("candidate", canary)
    suite = resolve_suite({"tables": {"hostile": {"query": query}}})
    with pytest.raises(CheckSqlRefused) as caught:
        checks_request(suite)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("check 'hostile': " + construct.expected(canary)), message


STATEMENTS = [
    # (statement, the refusal's start after "check 'x': ")
    ("reflect('java.lang.System', 'getenv', 'HOME') IS NOT NULL", "function reflect at line 1, column 1"),
    ("java_method('java.lang.System', 'exit', 0) = 0", "function java_method at line 1, column 1"),
    ("(SELECT COUNT(*) FROM text.`/etc/passwd`) > 0", "relation text.`/etc/passwd` at line 1, column 23"),
    ("'${env:HOME}' = ''", "'${' at line 1, column 2"),
    ("1 = 1 FROM candidate; SET spark.sql.runSQLOnFiles=true; SELECT 1", "the text is refused: it holds"),
    (
        "COUNT(*) > 0 FROM candidate UNION ALL SELECT * FROM csv.`/etc/passwd` --",
        "the statement",
    ),
    ("x) THEN 1 ELSE 0 END, input_file_name() AS f FROM candidate --", "function input_file_name at line 1"),
    ("(SELECT COUNT(*) FROM trades) > 0", "relation trades at line 1, column 23 is refused: it is none"),
]


@pytest.mark.parametrize(("statement", "refusal"), STATEMENTS, ids=[f"s{i}" for i in range(len(STATEMENTS))])
def test_a_hostile_check_statement_is_refused(statement: str, refusal: str) -> None:
    suite = resolve_suite(None, [f"x={statement}"])
    with pytest.raises(CheckSqlRefused) as caught:
        checks_request(suite)
    assert str(caught.value).startswith(f"check 'x': {refusal}"), str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_history_is_readable_only_with_scope_dataset() -> None:
    query = "SELECT * FROM candidate c JOIN dataset d ON c.id = d.id"
    with pytest.raises(CheckSqlRefused, match="relation dataset at line 1, column 32 is refused"):
        checks_request(resolve_suite({"tables": {"h": {"query": query}}}))
    plain = checks_request(resolve_suite({"tables": {"h": {"query": query, "scope": "dataset"}}}))
    assert plain["dataset"] and plain["queries"] == [{"name": "h", "relation": "dataset", "query": query}]


def test_a_column_name_stays_a_column(tmp_path: Path) -> None:
    """A column name is quoted: whatever it holds, the statement reads that one column."""
    column = "id`) AS c0 FROM candidate; SET spark.sql.runSQLOnFiles=true; SELECT (`x"
    plain = checks_request(resolve_suite({"columns": {column: {"min": {"geq_to": 0}}}}))
    [one_pass] = plain["passes"]
    assert (
        one_pass["query"]
        == "SELECT\n  MIN(`id``) AS c0 FROM candidate; SET spark.sql.runSQLOnFiles=true; SELECT (``x`) "
        "AS `c0`\nFROM candidate"
    )


@pytest.fixture
def repo(tmp_path: Path, spark: SparkSession) -> Path:
    root = tmp_path / "repo"
    assert main(["init", "--repo", str(root)]) == 0
    manifest = {
        "kind": "DatasetSnapshot",
        "version": 1,
        "content": {
            "name": "trades",
            "kind": "Root",
            "metadata": [
                {
                    "kind": "AddPushSource",
                    "sourceName": "default",
                    "read": {"kind": "Csv", "header": True, "ddlSchema": DDL},
                    "merge": {"kind": "Append"},
                }
            ],
        },
    }
    (tmp_path / "trades.yaml").write_text(json.dumps(manifest))
    assert main(["add", "--repo", str(root), str(tmp_path / "trades.yaml")]) == 0
    return root


def _head(repo: Path) -> str:
    [head] = (repo / "datasets").glob("*/refs/head")
    return head.read_text()


@pytest.mark.parametrize(
    "construct", [BY_ID["system-exit"], BY_ID["reflect-chmod"], BY_ID["in-cte"]], ids=lambda c: c.id
)
def test_the_cli_refuses_before_anything_runs(
    construct: Construct,
    repo: Path,
    tmp_path: Path,
    spark: SparkSession,
    canary: Canary,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = tmp_path / "in.csv"
    data.write_text(CSV)
    checks = tmp_path / "checks.yaml"
    checks.write_text(json.dumps({"tables": {"hostile": {"query": construct.over("candidate", canary)}}}))
    head, jobs = _head(repo), spark_jobs(spark)
    capsys.readouterr()
    code = main(["ingest", "--repo", str(repo), "trades", str(data), "--checks", str(checks)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert one_line(err).startswith("check 'hostile': " + construct.expected(canary)), err
    assert _head(repo) == head and spark_jobs(spark) == jobs  # nothing ran, nothing committed
    operations = repo / "cache" / "operations"
    assert not operations.exists() or sorted(operations.iterdir()) == []
    canary.assert_untouched()


def test_the_engine_refuses_hand_written_checks_before_reading(
    tmp_path: Path,
    spark: SparkSession,
    runner: LocalSparkRunner,
    canary: Canary,  # noqa: F811
) -> None:
    data = tmp_path / "in.csv"
    data.write_text(CSV)
    hostile = BY_ID["connect-token"].over("candidate", canary)
    request = IngestRequest(
        operation_id=uuid.uuid4().hex,
        dataset_id="did:odf:fed0119d20360650afd3d412c6b11529778b784c697559c0107d37ee5da61465726c4",
        dataset_alias="trades",
        system_time="2024-01-02T00:00:00Z",
        next_offset=0,
        inputs=[InputFile(str(data), "2024-01-01T00:00:00Z")],
        read={"kind": "Csv", "header": True},
        merge={"kind": "Append"},
        out_dir=str(tmp_path / "out"),
        checks={
            "max_failing_rows": 10,
            "dataset": False,
            "dataset_paths": [],
            "passes": [
                {"relation": "candidate", "query": hostile, "checks": [{"name": "x", "conditions": []}]}
            ],
            "queries": [],
        },
    )
    jobs = spark_jobs(spark)
    response = json.loads(runner.run(request.to_json(), tmp_path))
    assert response["error"]["kind"] == "sql-policy", response
    assert one_line(response["error"]["message"]).startswith(
        "checks: " + BY_ID["connect-token"].expected(canary)
    )
    assert CANARY_VALUE not in json.dumps(response)
    assert spark_jobs(spark) == jobs and not (tmp_path / "out").exists()  # nothing read, nothing written
    canary.assert_untouched()

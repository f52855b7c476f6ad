"""The SQL policy without Spark: what it accepts, what it refuses (construct, line, column, reason), and
the manifests, engine requests and replays it guards (tests/security has the same through Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import read_manifests
from airflow_odf.odf.format.sql_policy import SqlPolicyError, event_sql_refusal, snapshot_sql_problems
from airflow_odf.odf.operation import sql_steps
from airflow_odf.utils.sql_policy import SqlRefused, StepRefused, check_query, check_steps
from tests.paths import REPO

GIVEN = ["input", "com.example.orders"]


@pytest.mark.parametrize(
    ("sql", "reads"),
    [
        ("SELECT * FROM input", ["input"]),
        ("select a from INPUT where b > 1", ["INPUT"]),
        ("WITH a AS (SELECT * FROM input) SELECT * FROM a", ["input"]),
        ("TABLE input", ["input"]),
        ("VALUES (1, 2)", []),
        ("FROM input SELECT a", ["input"]),
        ("(SELECT 1) UNION ALL SELECT a FROM input", ["input"]),
        ("SELECT * FROM `com.example.orders` o JOIN input USING (k)", ["com.example.orders", "input"]),
        ("SELECT * FROM input LATERAL VIEW explode(xs) t AS x", ["input"]),
        ("SELECT * FROM range(10)", []),
        ("SELECT transform(xs, x -> x + 1), aggregate(xs, 0, (a, b) -> a + b) FROM input", ["input"]),
        ("SELECT window.start, count(*) FROM input GROUP BY window(t, '1 day'), k", ["input"]),
        ("SELECT /*+ BROADCAST(o) */ * FROM input i JOIN `com.example.orders` o ON i.k = o.k", None),
        ("SELECT * FROM input;", ["input"]),
    ],
)
def test_queries_over_what_they_were_given_are_accepted(sql: str, reads: list[str] | None) -> None:
    found = [read.name for read in check_query(sql, GIVEN)]
    assert reads is None or found == reads


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT reflect('java.lang.System', 'getenv', 'SECRET')",
            "function reflect at line 1, column 8 is refused: it calls any Java method",
        ),
        ("SELECT a,\n  `REFLECT`('x', 'y') FROM input", "function reflect at line 2, column 3 is refused"),
        ("SELECT system.builtin.java_method('a', 'b')", "function java_method at line 1, column 23"),
        ("SELECT /* c */ try_reflect ( 'a' ) FROM input", "function try_reflect at line 1, column 16"),
        ("SELECT * FROM csv.`/etc/passwd`", "relation csv.`/etc/passwd` at line 1, column 15 is refused"),
        (
            "SELECT * FROM input WHERE EXISTS (SELECT 1 FROM text.`/x`)",
            "relation text.`/x` at line 1, column",
        ),
        ("SELECT * FROM default.t", "relation default.t at line 1, column 15 is refused: it reads a path"),
        (
            "SELECT * FROM other",
            "relation other at line 1, column 15 is refused: it is none of the relations",
        ),
        ("WITH x AS (SELECT * FROM other) SELECT * FROM x", "relation other at line 1, column 26"),
        ("INSERT OVERWRITE DIRECTORY '/d' USING csv SELECT 1", "it cannot be parsed as Spark SQL"),
        ("WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a", "statement INSERT at line 1, column 1"),
        ("SET spark.sql.runSQLOnFiles=true", "statement SET at line 1, column 1 is refused: only a query"),
        ("ADD FILE /etc/passwd", "statement COMMAND at line 1, column 1"),
        ("CACHE TABLE input", "statement CACHE"),
        ("CREATE TABLE t USING csv LOCATION '/tmp' AS SELECT 1", "statement CREATE"),
        ("EXECUTE IMMEDIATE 'SELECT 1'", "statement COMMAND"),
        ("SELECT 1; SELECT 2", "the text is refused: it holds 2 statements"),
        ("", "the text is refused: it holds no statement"),
        ("SELECT '${env:HOME}'", "'${' at line 1, column 9 is refused: Spark substitutes variables"),
        ("SELECT TRANSFORM(a) USING 'cat' FROM input", "TRANSFORM ... USING at line 1, column 18"),
        ("SELECT * FROM read_files('/x')", "table function read_files at line 1, column 15"),
        ("SELECT * FROM IDENTIFIER('input')", "IDENTIFIER(...) at line 1, column 15"),
        ("SELECT my_udf(a) FROM input", "function my_udf at line 1, column 8 is refused: it is not a Spark"),
        ("SELECT input_file_name() FROM input", "function input_file_name at line 1, column 8"),
        ("SELECT current_user()", "function current_user at line 1, column 8"),
        ("SELECT xpath(a, '/x') FROM input", "function xpath at line 1, column 8"),
        ("SELECT * FROM input LATERAL VIEW python_worker_logs() t", "function python_worker_logs"),
    ],
)
def test_what_reaches_outside_the_data_is_refused_by_construct_and_position(sql: str, message: str) -> None:
    with pytest.raises(SqlRefused) as refused:
        check_query(sql, GIVEN)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_odf_sql_takes_any_single_name_and_gets_the_relations_read() -> None:
    reads = check_query("WITH t AS (SELECT * FROM `A.b`) SELECT * FROM t JOIN c ON t.k = c.k", None)
    assert [(r.name, r.line, r.column) for r in reads] == [("A.b", 1, 26), ("c", 1, 54)]
    with pytest.raises(SqlRefused, match=r"relation a\.b at line 1, column 15"):
        check_query("SELECT * FROM a.b", None)


def test_steps_read_their_inputs_and_earlier_aliases_only() -> None:
    check_steps([("SELECT * FROM input", "a"), ("SELECT * FROM a", None)], ["input"])
    with pytest.raises(StepRefused) as refused:
        check_steps([("SELECT * FROM input", "a"), ("SELECT * FROM b", "c"), ("SELECT 1", None)], ["input"])
    assert str(refused.value) == (
        "step 2 of 3 (alias 'c'): relation b at line 1, column 15 is refused: it is none of the relations "
        "given (a, input)"
    )


def _transform(*queries: tuple[str, str | None], engine: str = "spark") -> model.SetTransform:
    steps = [model.SqlQueryStep(query=q, alias=a) for q, a in queries]
    return model.SetTransform(
        inputs=[model.TransformInput(dataset_ref="com.example.orders", alias="orders")],
        transform=model.TransformSql(engine=engine, queries=steps),
    )


def test_events_name_what_and_step_and_the_engine_written_for() -> None:
    event = _transform(("SELECT * FROM orders", "a"), ("SELECT reflect('x', 'y') FROM a", None))
    assert event_sql_refusal(event) == (
        "transform step 2 of 2: function reflect at line 1, column 8 is refused: it calls any Java method "
        "(the environment, files, System.exit)"
    )
    flink = _transform(("SELECT TUMBLE_START(t, INTERVAL '1' DAY) FROM orders", None), engine="flink")
    refusal = event_sql_refusal(flink)
    assert refusal is not None and refusal.endswith(
        "; its engine is flink, and this provider runs SQL on Spark"
    )
    # the input is read by its alias, not by the dataset's name
    assert event_sql_refusal(_transform(("SELECT * FROM `com.example.orders`", None))) is not None


def test_every_engine_request_the_core_builds_is_checked() -> None:
    event = _transform(("SELECT * FROM csv.`/etc/passwd`", None))
    with pytest.raises(SqlPolicyError, match=r"^leak: transform step 1 of 1: relation csv\.`/etc/passwd`"):
        sql_steps(event.transform, ["orders"], "leak", "transform")
    steps = sql_steps(_transform(("SELECT * FROM orders", None)).transform, ["orders"], "ok", "transform")
    assert [(s.query, s.alias) for s in steps] == [("SELECT * FROM orders", None)]


def test_every_manifest_of_this_repository_passes() -> None:
    paths = sorted(p for p in (REPO / "dags_examples").rglob("*.yaml"))
    snapshots = [m.content for p in paths for m in read_manifests(p) if m.kind == "DatasetSnapshot"]
    with_sql = [s for s in snapshots if any(event_sql_refusal(e) is None and _has_sql(e) for e in s.metadata)]
    assert len(with_sql) >= 5
    assert [p for s in snapshots for p in snapshot_sql_problems(s)] == []


def _has_sql(event: object) -> bool:
    sql = getattr(event, "transform", None) or getattr(event, "preprocess", None)
    return isinstance(sql, model.TransformSql)


def test_a_huge_or_deeply_nested_statement_is_refused_in_bounded_time(tmp_path: Path) -> None:
    with pytest.raises(SqlRefused, match="longer than 1048576 characters"):
        check_query("SELECT " + "1 + " * 300_000 + "1", GIVEN)
    nested = "SELECT " + "(" * 5000 + "1" + ")" * 5000
    with pytest.raises(SqlRefused, match="is refused"):
        check_query(nested, GIVEN)

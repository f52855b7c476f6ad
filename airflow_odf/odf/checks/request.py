"""The checks as the engine evaluates them (the `checks` field of an ingest or transform request).

The coordinator writes every statement the engine runs, so that the SQL policy judges exactly that text
here, before anything runs, and the engine judges it again before `spark.sql`:

- one aggregation pass per relation (`candidate`; `dataset` when a check reads the history): every column
  check and every boolean table check is one expression of a single `SELECT ... FROM relation`, so the
  slice is read once for all of them — except the distinct counts: a pass per column with one, marked
  `distinct` so that the engine may count exactly without Spark's aggregation (`_pass_groups`);
- one query per table check that returns failing rows.

Each check carries the conditions its observed value must meet (tolerance applied) and, where one is
meaningful, the query of its failing rows, which the engine runs (up to `max_failing_rows`) only for a
check that failed. Documented in docs/engine-contract.md.
"""

from __future__ import annotations

import functools
from typing import Any

from airflow_odf.odf.checks.spec import CANDIDATE, DATASET, TABLE_QUERY, Check, CheckSuite, Condition
from airflow_odf.odf.errors import OdfError, quoted

MAX_FAILING_ROWS = 10
_DISTINCT_CHECKS = ("distinct_check", "unique_check")
_OPS = {"equal_to": "eq", "greater_than": "gt", "geq_to": "ge", "less_than": "lt", "leq_to": "le"}


class CheckSqlRefused(OdfError):
    """A check's SQL the policy refuses: one line naming the check."""


def quote(column: str) -> str:
    """A column name as Spark SQL reads it, whatever it holds."""
    return "`" + column.replace("`", "``") + "`"


def engine_conditions(check: Check) -> list[list[Any]]:
    """`[op, bound]` pairs (`eq`, `gt`, `ge`, `lt`, `le`) the observed value must all meet; a tolerance
    `t` widens each bound by `t` times its size (`equal_to: v` becomes `ge v-|v|t` and `le v+|v|t`)."""
    if check.kind == "table":
        return [] if check.check == TABLE_QUERY else [["eq", 1]]
    out: list[list[Any]] = []
    t = check.tolerance
    for c in check.conditions:
        if t is None:
            out.append([_OPS[c.op], c.value])
        elif c.op == "equal_to":
            out += [["ge", _widened(c, -t)], ["le", _widened(c, t)]]
        else:
            out.append([_OPS[c.op], _widened(c, t if c.op in ("less_than", "leq_to") else -t)])
    return out


def _widened(c: Condition, by: float) -> float:
    return c.value + abs(c.value) * by


def _relation(check: Check) -> str:
    return DATASET if check.scope == DATASET else CANDIDATE


@functools.lru_cache(maxsize=256)
def is_aggregate(statement: str) -> bool:
    """Whether a boolean statement aggregates (`COUNT(*) > 0`) rather than holds for each row (`x > 0`)."""
    import sqlglot  # half a second to import: only where checks are declared
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(f"SELECT\n{statement}\nFROM {CANDIDATE}", read="spark")
    except sqlglot.errors.SqlglotError:
        return False  # the policy refuses it, with the reason
    return any(
        isinstance(node, exp.AggFunc) and node.find_ancestor(exp.Subquery, exp.Window) is None
        for node in tree.expressions[0].walk()
    )


def _expression(check: Check) -> str:
    """The aggregate that gives the check's observed value."""
    if check.kind == "table":
        boolean = f"CASE WHEN (\n{check.statement}\n) THEN 1 ELSE 0 END"
        # each row must satisfy it (a relation without rows does): the least of the rows' verdicts
        return boolean if is_aggregate(check.statement or "") else f"COALESCE(MIN({boolean}), 1)"
    col = quote(check.column or "")
    return {
        "null_check": f"COUNT(*) - COUNT({col})",
        "distinct_check": f"COUNT(DISTINCT {col})",
        "unique_check": f"COUNT({col}) - COUNT(DISTINCT {col})",
        "min": f"MIN({col})",
        "max": f"MAX({col})",
    }[check.check]


def _failing_rows(check: Check, conditions: list[list[Any]]) -> str | None:
    """The candidate's rows that make the check fail, when such rows can be named."""
    rows = f"SELECT * FROM {CANDIDATE} WHERE "
    if check.kind == "table":
        if check.check == TABLE_QUERY:
            return check.statement
        if is_aggregate(check.statement or ""):
            return None
        return rows + f"NOT COALESCE((\n{check.statement}\n), FALSE)"
    col = quote(check.column or "")
    if check.check == "null_check":
        return rows + f"{col} IS NULL"
    if check.check == "unique_check":
        return rows + f"{col} IN (SELECT {col} FROM {_relation(check)} GROUP BY {col} HAVING COUNT(*) > 1)"
    if check.check in ("min", "max"):
        # min: the rows under its lower bounds; max: the rows over its upper bounds
        wanted = {"min": {"eq": "<", "ge": "<", "gt": "<="}, "max": {"eq": ">", "le": ">", "lt": ">="}}
        tests = [
            f"{col} {wanted[check.check][op]} {bound!r}"
            for op, bound in conditions
            if op in wanted[check.check]
        ]
        return rows + " OR ".join(tests) if tests else None
    return None


def _checked(check: Check, sql: str, relations: list[str], *, shift: int = 0) -> None:
    """Raises CheckSqlRefused naming the check when the policy refuses `sql` (`shift`: lines the
    wrapping adds before the user's text, so the position is the one in the check)."""
    from airflow_odf.utils.sql_policy import SqlRefused, check_query

    try:
        check_query(sql, relations)
    except SqlRefused as e:
        where = "" if e.line is None else f" at line {max(1, e.line - shift)}, column {e.column}"
        raise CheckSqlRefused(
            f"check {quoted(check.name)}: {e.construct}{where} is refused: {e.reason}"
        ) from None


def _relations(check: Check) -> list[str]:
    return [CANDIDATE, DATASET] if check.scope == DATASET else [CANDIDATE]


def _pass_groups(members: list[Check]) -> list[tuple[str | None, list[Check]]]:
    """The checks of one relation in as few passes as Spark evaluates well, each with the column whose
    distinct count it is (or None): every check without a distinct count in one pass, and the
    distinct-count checks (`distinct_check`, `unique_check`) of each column in a pass of their own —
    which an engine may answer without the query, by an exact count of its own (engine/exact_distinct.py),
    and which Spark would otherwise evaluate for several columns in one query by expanding every row
    once per column."""
    distinct = list(dict.fromkeys(c.column for c in members if c.check in _DISTINCT_CHECKS))
    plain = [c for c in members if c.check not in _DISTINCT_CHECKS]
    groups = [
        (col, [c for c in members if c.check in _DISTINCT_CHECKS and c.column == col]) for col in distinct
    ]
    return [(None, plain)] * bool(plain) + groups


def _pass(relation: str, members: list[Check], distinct: str | None = None) -> dict[str, Any]:
    """One aggregation over `relation`: a column per check, with its conditions and failing rows;
    `distinct`: the column whose distinct count every check of the pass reads."""
    items, entries = [], []
    for i, check in enumerate(members):
        conditions = engine_conditions(check)
        items.append(f"  {_expression(check)} AS `c{i}`")
        entries.append(
            {
                "name": check.name,
                "column": check.column,
                "check": check.check,
                "conditions": conditions,
                "failing_rows": _failing_rows(check, conditions),
            }
        )
    query = "SELECT\n" + ",\n".join(items) + f"\nFROM {relation}"
    one: dict[str, Any] = {"relation": relation, "query": query, "checks": entries}
    if distinct is not None:
        one["distinct"] = distinct
    return one


def check_suite_sql(suite: CheckSuite) -> None:
    """Refuses (CheckSqlRefused) the first check whose SQL the policy refuses, before anything runs."""
    for check in suite.checks:
        if check.kind != "table":
            continue
        if check.check == TABLE_QUERY:
            _checked(check, check.statement or "", _relations(check))
        else:
            _checked(check, f"SELECT\n{check.statement}\nFROM {_relation(check)}", _relations(check), shift=1)


def checks_request(suite: CheckSuite, dataset_paths: list[str] | None = None) -> dict[str, Any]:
    """The request's `checks` field for `suite`; `dataset_paths`: the slices committed so far (only read
    when a check has `scope: dataset`). Every statement is checked by the SQL policy here."""
    check_suite_sql(suite)
    passes: list[dict[str, Any]] = []
    for relation in (CANDIDATE, DATASET):
        members = [c for c in suite.checks if _relation(c) == relation and c.check != TABLE_QUERY]
        passes += [_pass(relation, group, column) for column, group in _pass_groups(members)]
    queries = [
        {"name": c.name, "relation": _relation(c), "query": c.statement}
        for c in suite.checks
        if c.check == TABLE_QUERY
    ]
    plain: dict[str, Any] = {
        "max_failing_rows": MAX_FAILING_ROWS,
        "dataset": suite.reads_dataset,  # the engine makes the view `dataset`: these slices and the candidate
        "dataset_paths": list(dataset_paths or []) if suite.reads_dataset else [],
        "passes": passes,
        "queries": queries,
    }
    from airflow_odf.utils.sql_policy import SqlRefused, check_query

    for statement, relations in engine_statements(plain):
        try:
            check_query(statement, relations)
        except SqlRefused as e:
            raise CheckSqlRefused(f"checks: {e}") from None
    return plain


def engine_statements(plain: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Every statement of a `checks` field with the relations it may read."""
    both = [CANDIDATE, DATASET] if plain.get("dataset") else [CANDIDATE]
    statements = [(p["query"], both) for p in plain.get("passes", [])]
    statements += [
        (c["failing_rows"], both)
        for p in plain.get("passes", [])
        for c in p["checks"]
        if c.get("failing_rows")
    ]
    statements += [(q["query"], both) for q in plain.get("queries", [])]
    return statements

"""What a quality check says (docs/checks.md): the vocabulary of Airflow's common-sql check operators
where it fits, over the candidate slice an ingest or transform is about to commit.

- Column checks (`SQLColumnCheckOperator`'s `column_mapping`): `null_check`, `distinct_check`,
  `unique_check`, `min`, `max`, each with conditions `equal_to`, `greater_than`, `geq_to`, `less_than`,
  `leq_to` and an optional `tolerance` (a fraction: `equal_to: 100, tolerance: 0.1` accepts 90..110).
- Table checks (`SQLTableCheckOperator`'s `checks`): a `check_statement`, a boolean SQL expression that
  every row must satisfy (`price >= 0`) or an aggregate one (`COUNT(*) > 0`, `MIN(value) >= 0`); or a
  `query` that returns the failing rows (the check passes when it returns none).

Each check reads the candidate (the view `candidate`) unless it says `scope: dataset`: then it reads the
view `dataset`, every record committed so far plus the candidate (e.g. uniqueness across history).

Read from a `--checks` YAML file, an operator's `checks=` (the same mapping, or the file's path) or
`--check NAME=STATEMENT`. Every problem is one line naming the check; nothing runs until all are fine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from airflow_odf.odf.errors import OdfError, quoted

COLUMN_CHECKS = ("null_check", "distinct_check", "unique_check", "min", "max")
CONDITIONS = ("equal_to", "greater_than", "geq_to", "less_than", "leq_to")
SCOPES = ("candidate", "dataset")
CANDIDATE = "candidate"
DATASET = "dataset"
TABLE_SQL = "sql"  # the `check` of a table check with a check_statement
TABLE_QUERY = "query"  # ... with a query returning failing rows
MAX_CHECKS = 200
MAX_CHECKS_FILE_BYTES = 1024 * 1024
_FILE_KEYS = ("version", "columns", "tables")
FILE_VERSION = 1


class ChecksSpecError(OdfError):
    """Checks that cannot be run as written: one line naming the check (or the file) and the problem."""


@dataclass(frozen=True)
class Condition:
    """One condition on an observed value: `op` is one of CONDITIONS."""

    op: str
    value: float | int


@dataclass(frozen=True)
class Check:
    """One check. `kind` is `column` (then `column` and `check` say which) or `table` (`check` is `sql`
    with `statement`, or `query` with `statement` the query)."""

    name: str
    kind: str
    check: str
    column: str | None = None
    conditions: tuple[Condition, ...] = ()
    tolerance: float | None = None
    statement: str | None = None
    scope: str = CANDIDATE

    @property
    def expected(self) -> str:
        """What passes, as the results say it (`geq_to 0`, `equal_to 0 (tolerance 0.1)`, `true`)."""
        if self.kind == "table":
            return "no rows" if self.check == TABLE_QUERY else "true"
        text = ", ".join(f"{c.op} {c.value}" for c in self.conditions)
        return text + (f" (tolerance {self.tolerance})" if self.tolerance is not None else "")

    def to_plain(self) -> dict[str, Any]:
        """The check as the checks file writes it (a mapping of its own), for records and messages."""
        if self.kind == "table":
            key = "query" if self.check == TABLE_QUERY else "check_statement"
            plain: dict[str, Any] = {key: self.statement}
        else:
            plain = {c.op: c.value for c in self.conditions}
            if self.tolerance is not None:
                plain["tolerance"] = self.tolerance
        if self.scope != CANDIDATE:
            plain["scope"] = self.scope
        return plain


@dataclass(frozen=True)
class CheckSuite:
    """The checks of one dataset, in the order they were declared (column checks first)."""

    checks: tuple[Check, ...]

    def __bool__(self) -> bool:
        return bool(self.checks)

    @property
    def reads_dataset(self) -> bool:
        return any(c.scope == DATASET for c in self.checks)

    def by_name(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def plus(self, other: CheckSuite) -> CheckSuite:
        """Both suites' checks; a name given twice is refused."""
        return _suite([*self.checks, *other.checks], "checks")


def _number(value: Any, where: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ChecksSpecError(f"{where}: expected a number, got {quoted(repr(value))}")
    return value


def _scope(plain: Mapping[str, Any], where: str) -> str:
    scope = plain.get("scope", CANDIDATE)
    if scope not in SCOPES:
        raise ChecksSpecError(f"{where}: scope {quoted(str(scope))}: expected one of {', '.join(SCOPES)}")
    return str(scope)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ChecksSpecError(f"{where}: expected SQL text")
    return value


def column_check(column: str, check: str, plain: Any, name: str | None = None) -> Check:
    """One column check from its mapping of conditions (common-sql's form)."""
    name = name or f"{column}.{check}"
    where = f"check {quoted(name)}"
    if check not in COLUMN_CHECKS:
        raise ChecksSpecError(
            f"{where}: unknown column check {quoted(check)}; expected one of {', '.join(COLUMN_CHECKS)}"
        )
    if not isinstance(plain, Mapping):
        raise ChecksSpecError(f"{where}: expected a mapping of conditions (e.g. equal_to: 0)")
    unknown = sorted(set(plain) - {*CONDITIONS, "tolerance", "scope"})
    if unknown:
        raise ChecksSpecError(
            f"{where}: unknown key {quoted(str(unknown[0]))}; "
            f"expected {', '.join(CONDITIONS)}, tolerance, scope"
        )
    conditions = tuple(
        Condition(op, _number(plain[op], f"{where}: {op}")) for op in CONDITIONS if op in plain
    )
    if not conditions:
        raise ChecksSpecError(f"{where}: no condition; give one of {', '.join(CONDITIONS)}")
    ops = {c.op for c in conditions}
    if "equal_to" in ops and len(ops) > 1:
        raise ChecksSpecError(f"{where}: equal_to cannot be combined with other conditions")
    if {"greater_than", "geq_to"} <= ops or {"less_than", "leq_to"} <= ops:
        raise ChecksSpecError(f"{where}: give one lower and one upper bound at most")
    tolerance = None
    if "tolerance" in plain:
        tolerance = float(_number(plain["tolerance"], f"{where}: tolerance"))
        if tolerance < 0:
            raise ChecksSpecError(f"{where}: tolerance must be 0 or more (a fraction, e.g. 0.1)")
    return Check(name, "column", check, column, conditions, tolerance, scope=_scope(plain, where))


def table_check(name: str, plain: Any) -> Check:
    """One table check: `{check_statement: ...}` or `{query: ...}`, and an optional scope."""
    where = f"check {quoted(name)}"
    if isinstance(plain, str):
        plain = {"check_statement": plain}
    if not isinstance(plain, Mapping):
        raise ChecksSpecError(f"{where}: expected check_statement or query")
    unknown = sorted(set(plain) - {"check_statement", "query", "scope"})
    if unknown:
        raise ChecksSpecError(
            f"{where}: unknown key {quoted(str(unknown[0]))}; expected check_statement, query, scope"
        )
    if ("check_statement" in plain) == ("query" in plain):
        raise ChecksSpecError(f"{where}: give exactly one of check_statement and query")
    if "query" in plain:
        return Check(
            name, "table", TABLE_QUERY, statement=_text(plain["query"], where), scope=_scope(plain, where)
        )
    statement = _text(plain["check_statement"], where)
    return Check(name, "table", TABLE_SQL, statement=statement, scope=_scope(plain, where))


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or not value.isprintable():
        raise ChecksSpecError(f"{what}: expected a printable name, got {quoted(repr(value))}")
    return value


def _suite(checks: list[Check], source: str) -> CheckSuite:
    if len(checks) > MAX_CHECKS:
        raise ChecksSpecError(f"{source}: {len(checks)} checks; at most {MAX_CHECKS}")
    seen: set[str] = set()
    for check in checks:
        if check.name in seen:
            raise ChecksSpecError(f"{source}: check {quoted(check.name)} is declared twice")
        seen.add(check.name)
    return CheckSuite(tuple(checks))


def suite_from_plain(plain: Any, source: str = "checks") -> CheckSuite:
    """The checks of a mapping `{columns: {col: {check: {conditions}}}, tables: {name: {...}}}`."""
    if plain is None:
        return CheckSuite(())
    if not isinstance(plain, Mapping):
        raise ChecksSpecError(f"{source}: expected a mapping with columns and/or tables")
    unknown = sorted(set(plain) - set(_FILE_KEYS))
    if unknown:
        raise ChecksSpecError(
            f"{source}: unknown key {quoted(str(unknown[0]))}; expected {', '.join(_FILE_KEYS)}"
        )
    if plain.get("version", FILE_VERSION) != FILE_VERSION:
        raise ChecksSpecError(
            f"{source}: version {plain.get('version')!r} is not supported (expected {FILE_VERSION})"
        )
    checks: list[Check] = []
    columns = plain.get("columns") or {}
    tables = plain.get("tables") or {}
    if not isinstance(columns, Mapping) or not isinstance(tables, Mapping):
        raise ChecksSpecError(f"{source}: columns and tables are mappings (column -> checks, name -> check)")
    try:
        checks += _checks_of(columns, tables)
    except ChecksSpecError as e:
        raise ChecksSpecError(f"{source}: {e}") from None
    return _suite(checks, source)


def _checks_of(columns: Mapping[Any, Any], tables: Mapping[Any, Any]) -> list[Check]:
    checks: list[Check] = []
    for column, mapping in columns.items():
        column = _name(column, "columns")
        if not isinstance(mapping, Mapping) or not mapping:
            raise ChecksSpecError(f"column {quoted(column)}: expected a mapping of checks (e.g. null_check)")
        for check, conditions in mapping.items():
            checks.append(column_check(column, _name(check, f"column {quoted(column)}"), conditions))
    for name, check in tables.items():
        checks.append(table_check(_name(name, "tables"), check))
    return checks


def read_checks_file(path: str | Path) -> CheckSuite:
    """The checks of a YAML file (docs/checks.md has the schema)."""
    from airflow_odf.odf.format.manifests import _load_yaml  # the manifests' capped SafeLoader

    path = Path(path)
    try:
        if path.stat().st_size > MAX_CHECKS_FILE_BYTES:
            raise ChecksSpecError(f"{path}: larger than {MAX_CHECKS_FILE_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ChecksSpecError(f"{path}: cannot read the checks file: {e}") from None
    try:
        docs = [d for d in _load_yaml(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ChecksSpecError(f"{path}: {where}invalid YAML: {getattr(e, 'problem', None) or e}") from None
    if len(docs) > 1:
        raise ChecksSpecError(f"{path}: one YAML document expected, found {len(docs)}")
    return suite_from_plain(docs[0] if docs else None, str(path))


def statement_check(text: str) -> Check:
    """`NAME=STATEMENT` (`--check`): a table check whose statement is a boolean SQL expression."""
    name, sep, statement = text.partition("=")
    name = name.strip()
    if not sep or not name or not statement.strip():
        raise ChecksSpecError(
            f"--check {quoted(text)}: expected NAME=STATEMENT, e.g. no_negative=MIN(value) >= 0"
        )
    return table_check(_name(name, "--check"), {"check_statement": statement.strip()})


def resolve_suite(
    checks: Any, statements: list[str] | None = None, *, base_dir: Path | None = None
) -> CheckSuite:
    """The checks of an operator's or command's arguments: `checks` is None, a path of a checks file, a
    mapping in the file's form, or a CheckSuite; `statements` are `NAME=STATEMENT` texts."""
    if checks is None:
        suite = CheckSuite(())
    elif isinstance(checks, CheckSuite):
        suite = checks
    elif isinstance(checks, str | Path):
        path = Path(checks)
        suite = read_checks_file(path if path.is_absolute() or base_dir is None else base_dir / path)
    else:
        suite = suite_from_plain(checks)
    if statements:
        suite = suite.plus(_suite([statement_check(s) for s in statements], "--check"))
    return suite

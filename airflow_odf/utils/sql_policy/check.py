"""The SQL policy: a statement runs only if it is one query that reads only what it was given.

Spark runs whatever `spark.sql()` is handed with the worker's rights: DDL and DML, `SET`, `ADD FILE`,
relations over any path (``csv.`/etc/passwd` ``), functions that call Java (`reflect`), script
transformations, and `${env:...}` substitution. SQL from manifests, peers and templated run configuration
is not trusted, so each statement is parsed (sqlglot, Spark dialect) and accepted only when

- it is exactly one query (SELECT, WITH, VALUES, TABLE, set operations);
- every relation it reads is one it was given (or a CTE of its own), by a single name;
- every function it calls is a Spark built-in outside the deny-list of `functions.py`, and every
  table-valued function one that only generates rows.

What the parser cannot model is refused with the reason, never guessed. Both the core (before any engine
request, with the dataset and step named) and the engine (immediately before `spark.sql`) call this, so a
request that skipped the core is refused the same way.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from airflow_odf.utils.sql_policy.functions import REFUSED_FUNCTIONS, TABLE_FUNCTIONS
from airflow_odf.utils.sql_policy.spark_builtins import BUILTIN_FUNCTIONS

DIALECT = "spark"
# Far above any real step (a few kB); a longer text is refused before it is parsed.
MAX_STATEMENT_CHARS = 1024 * 1024

_QUERY_ROOTS = (exp.Query, exp.Values)
_BY_CLAUSES = {
    name: getattr(TokenType, name)
    for name in ("GROUP_BY", "ORDER_BY", "SORT_BY", "CLUSTER_BY", "DISTRIBUTE_BY", "PARTITION_BY")
}
_TOKEN_DUMP = re.compile(
    r"<Token token_type: [\w.]+, text: (.*?), line: \d+, col: \d+, start: \d+, end: \d+, comments: \[.*?\]>"
)
_STATEMENTS = (
    exp.DDL,
    exp.DML,
    exp.Command,
    exp.Set,
    exp.Use,
    exp.Cache,
    exp.Uncache,
    exp.Refresh,
    exp.LoadData,
    exp.Declare,
    exp.Describe,
    exp.Show,
    exp.Drop,
    exp.Alter,
    exp.Analyze,
    exp.Pragma,
    exp.Transaction,
    exp.Commit,
    exp.Rollback,
    exp.Grant,
    exp.Revoke,
    exp.Kill,
    exp.Execute,
    exp.TruncateTable,
    exp.Export,
    exp.Into,
)
_STRING_TOKENS = frozenset(
    {
        TokenType.STRING,
        TokenType.NATIONAL_STRING,
        TokenType.RAW_STRING,
        TokenType.BIT_STRING,
        TokenType.HEX_STRING,
        TokenType.BYTE_STRING,
    }
)


class SqlRefused(ValueError):
    """A statement the policy does not run: which construct, where (1-based line and column), and why."""

    def __init__(self, construct: str, reason: str, line: int | None = None, column: int | None = None):
        self.construct = construct
        self.reason = reason
        self.line = line
        self.column = column
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(f"{construct}{where} is refused: {reason}")


class StepRefused(ValueError):
    """A refused step of a multi-step transform or preprocess, named by its index and alias."""

    def __init__(self, index: int, count: int, alias: str | None, refusal: SqlRefused):
        self.index = index
        self.alias = alias
        self.refusal = refusal
        name = f"step {index} of {count}" + (f" (alias '{alias}')" if alias else "")
        super().__init__(f"{name}: {refusal}")


@dataclass(frozen=True)
class TableRead:
    """A relation a query reads by name, as spelled in the text (Spark matches view names as spelled)."""

    name: str
    line: int
    column: int


def check_query(sql: str, relations: Collection[str] | None) -> tuple[TableRead, ...]:
    """Checks one statement against the policy; returns the relations it reads (its own CTEs left out).

    `relations` are the names it may read (case-insensitive); None allows any single name, for a caller
    that resolves names itself (`odf sql`). Raises SqlRefused.
    """
    allowed = None if relations is None else frozenset(name.lower() for name in relations)
    return _checked(sql, allowed)


def parse_query(sql: str, relations: Collection[str] | None) -> exp.Expression:
    """The parsed statement of a query the policy accepts (`check_query`; raises SqlRefused otherwise),
    as the policy read it (`TABLE name` as `SELECT * FROM name`): a fresh tree, the caller's to change.

    For readers of the query's structure (column lineage), which must see what Spark will run."""
    check_query(sql, relations)
    tree, _ = _parse(sql, _tokens(sql))
    return tree


def check_steps(steps: Sequence[tuple[str, str | None]], inputs: Collection[str]) -> None:
    """Checks SQL steps run in order: each may read `inputs` and the aliases of the steps before it.

    Raises StepRefused naming the first refused step.
    """
    given = [*inputs]
    for index, (query, alias) in enumerate(steps, start=1):
        try:
            check_query(query, given)
        except SqlRefused as e:
            raise StepRefused(index, len(steps), alias, e) from None
        if alias:
            given.append(alias)


@functools.lru_cache(maxsize=512)
def _checked(sql: str, allowed: frozenset[str] | None) -> tuple[TableRead, ...]:
    if len(sql) > MAX_STATEMENT_CHARS:
        raise SqlRefused("the statement", f"it is longer than {MAX_STATEMENT_CHARS} characters")
    substitution = sql.find("${")
    if substitution >= 0:
        line, column = _position(sql, substitution)
        raise SqlRefused("'${'", "Spark substitutes variables (${env:...}) into the text", line, column)
    tokens = _tokens(sql)
    _refuse_called_names(sql, tokens)
    tree, shift = _parse(sql, tokens)
    first = tokens[0].start if tokens else None
    reads = _Walk(sql, shift, first, allowed).reads(tree)
    return tuple(sorted(reads, key=lambda read: (read.line, read.column)))


def _position(sql: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    line = sql.count("\n", 0, offset) + 1
    return line, offset - (sql.rfind("\n", 0, offset) + 1) + 1


def _tokens(sql: str) -> list[Token]:
    try:
        return sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    except TokenError as e:
        raise SqlRefused("the statement", f"it cannot be read as SQL ({_first_line(e)})") from None


def _refuse_called_names(sql: str, tokens: list[Token]) -> None:
    """A refused function's name followed by '(' anywhere outside a string: whatever the parser makes of
    the call (quoted, qualified, in a construct it does not model), it is refused here first."""
    for token, after in itertools.pairwise(tokens):
        name = token.text.lower()
        called = after.token_type is TokenType.L_PAREN and token.token_type not in _STRING_TOKENS
        if called and name in REFUSED_FUNCTIONS:
            line, column = _position(sql, token.start)
            raise SqlRefused(f"function {name}", REFUSED_FUNCTIONS[name], line, column)


def _parse(sql: str, tokens: list[Token]) -> tuple[exp.Expression, int]:
    """The one statement of `sql`, and how far its offsets are shifted from the text's.

    Two Spark forms sqlglot does not model are given to it in forms it does: `TABLE name` (a query) is
    read as `SELECT * FROM name`, and `window(` (the function; a WINDOW clause is `WINDOW name AS`) as a
    function name rather than the clause keyword, which sqlglot takes it for after GROUP BY."""
    text, shift = sql, 0
    if tokens and tokens[0].token_type is TokenType.TABLE:
        prefix = "SELECT * FROM "
        text, shift = prefix + sql[tokens[0].end + 1 :], len(prefix) - (tokens[0].end + 1)
        tokens = _tokens(text)
    tokens = _clause_keywords_joined(tokens)
    for token, after in itertools.pairwise(tokens):
        if token.token_type is TokenType.WINDOW and after.token_type is TokenType.L_PAREN:
            token.token_type = TokenType.VAR
    dialect = sqlglot.Dialect.get_or_raise(DIALECT)
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)  # its "falling back to a Command" warning: refused below anyway
    try:
        statements = [s for s in dialect.parser().parse(tokens, text) if s is not None]
    except ParseError as e:
        detail = e.errors[0] if e.errors else {}
        line, column = detail.get("line"), detail.get("col")
        description = _shown_tokens(detail.get("description") or _first_line(e))
        reason = f"it cannot be parsed as Spark SQL ({description})"
        raise SqlRefused("the statement", reason, line, column) from None
    except RecursionError:
        raise SqlRefused("the statement", "it is nested too deeply to be checked") from None
    finally:
        logger.setLevel(level)
    if len(statements) != 1:
        found = f"{len(statements)} statements" if statements else "no statement"
        raise SqlRefused("the text", f"it holds {found}; a step is exactly one query")
    return statements[0], shift


def _clause_keywords_joined(tokens: list[Token]) -> list[Token]:
    """`GROUP /* note */ BY` as the one keyword sqlglot makes of `GROUP BY` (a comment between the two
    words leaves them two names, which it cannot parse; Spark reads the clause)."""
    joined: list[Token] = []
    for token in tokens:
        before = joined[-1] if joined else None
        kind = f"{before.text.upper()}_BY" if before is not None else ""
        if (
            before is not None
            and token.text.upper() == "BY"
            and token.token_type is TokenType.VAR
            and before.token_type not in _STRING_TOKENS
            and before.token_type is not TokenType.IDENTIFIER
            and kind in _BY_CLAUSES
        ):
            joined[-1] = Token(
                _BY_CLAUSES[kind],
                f"{before.text} BY",
                line=before.line,
                col=before.col,
                start=before.start,
                end=token.end,
                comments=[*before.comments, *token.comments],
            )
        else:
            joined.append(token)
    return joined


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def _shown_tokens(text: str) -> str:
    """A parser message with its token dumps shown as the token's text."""
    return _TOKEN_DUMP.sub(lambda m: repr(m.group(1)), text)


class _Walk:
    """One pass over a parsed statement: refuses what the policy does not run, collects what it reads."""

    def __init__(self, sql: str, shift: int, first: int | None, allowed: frozenset[str] | None) -> None:
        self.sql = sql
        self.shift = shift
        self.first = first
        self.allowed = allowed

    def reads(self, tree: exp.Expression) -> Iterator[TableRead]:
        if not isinstance(tree, _QUERY_ROOTS) or isinstance(tree, _STATEMENTS):
            raise self.refused(tree, f"statement {_kind(tree)}", "only a query runs here")
        # a hint (/*+ BROADCAST(t) */) names aliases to plan with and reads nothing
        for node in tree.walk(prune=lambda n: isinstance(n, exp.Hint)):
            if isinstance(node, _STATEMENTS):
                raise self.refused(node, f"statement {_kind(node)}", "only a query runs here")
            if isinstance(node, exp.QueryTransform):
                raise self.refused(node, "TRANSFORM ... USING", "a script transformation runs a program")
            if isinstance(node, exp.Table):
                read = self.table(node)
                if read is not None:
                    yield read
            elif isinstance(node, exp.Func):
                self.function(node)

    def function(self, node: exp.Func) -> None:
        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
            if name == "identifier":
                raise self.refused(node, "IDENTIFIER(...)", "it names a relation or function at run time")
            if name not in BUILTIN_FUNCTIONS:
                raise self.refused(node, f"function {node.name}", "it is not a Spark built-in function")
        else:
            name = _refused_classes().get(type(node))
        if name in REFUSED_FUNCTIONS:
            raise self.refused(node, f"function {name}", REFUSED_FUNCTIONS[name])

    def table(self, node: exp.Table) -> TableRead | None:
        source = node.this
        if isinstance(source, exp.Func):
            name = source.name.lower() if isinstance(source, exp.Anonymous) else source.sql_name().lower()
            if name == "identifier":
                raise self.refused(source, "IDENTIFIER(...)", "it names a relation at run time")
            if name not in TABLE_FUNCTIONS:
                reason = "it is not a table function that only generates rows"
                raise self.refused(source, f"table function {name}", reason)
            return None
        if not isinstance(source, exp.Identifier):
            raise self.refused(node, f"relation {node.sql(DIALECT)}", "the policy cannot tell what it reads")
        if node.args.get("db") or node.args.get("catalog"):
            reason = "it reads a path or a catalog table; a dotted dataset name is written in `backticks`"
            raise self.refused(node, f"relation {_spelled(node)}", reason)
        name = source.name
        if self.allowed is not None and name.lower() not in self.allowed | _ctes_around(node):
            given = ", ".join(sorted(self.allowed)) or "none"
            raise self.refused(node, f"relation {name}", f"it is none of the relations given ({given})")
        if name.lower() in _ctes_around(node):
            return None
        line, column = self.where(node)
        return TableRead(name, line or 1, column or 1)

    def where(self, node: exp.Expression) -> tuple[int | None, int | None]:
        """Where a node starts in the original text: the first token offset the parser kept in it, else
        (a statement keyword keeps none) where the statement starts."""
        starts = [n.meta["start"] for n in node.walk() if n.meta.get("start") is not None]
        start = min(starts) - self.shift if starts else None
        if start is None or start < 0 or node.parent is None:
            start = self.first
        return _position(self.sql, start) if start is not None else (None, None)

    def refused(self, node: exp.Expression, construct: str, reason: str) -> SqlRefused:
        line, column = self.where(node)
        return SqlRefused(construct, reason, line, column)


def _kind(node: exp.Expression) -> str:
    return node.key.upper()


def _spelled(node: exp.Table) -> str:
    return ".".join(part.sql(DIALECT) for part in node.parts)


def _ctes_around(node: exp.Expression) -> frozenset[str]:
    """The names of the CTEs in scope at `node` (lower case), as Spark resolves them: a query's body sees
    all of its CTEs; a CTE's own body sees only the CTEs before it (and itself, in a WITH RECURSIVE). A
    relation named like a CTE out of scope is a relation of the session, not the CTE."""
    names: set[str] = set()
    child, parent = node, node.parent
    while parent is not None:
        if isinstance(parent, exp.With) and isinstance(child, exp.CTE):
            index = parent.expressions.index(child)
            seen = parent.expressions[: index + 1 if parent.args.get("recursive") else index]
            names.update(cte.alias.lower() for cte in seen)
        else:
            with_ = parent.args.get("with_") or parent.args.get("with")
            if isinstance(with_, exp.With) and with_ is not child:
                names.update(cte.alias.lower() for cte in with_.expressions)
        child, parent = parent, parent.parent
    return frozenset(names)


@functools.cache
def _refused_classes() -> dict[type, str]:
    """The expression classes sqlglot gives refused functions it models itself (e.g. CURRENT_USER), found
    once, when first needed."""
    classes: dict[type, str] = {}
    for name in REFUSED_FUNCTIONS:
        node = sqlglot.parse_one(f"SELECT {name}()", read=DIALECT).expressions[0]
        if not isinstance(node, exp.Anonymous):
            classes[type(node)] = name
    return classes

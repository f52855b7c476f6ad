"""Column lineage of a SQL transform: which input columns each output column is made from.

Pure: the transform's steps (query, alias) and its inputs' columns in, a mapping out. Each step is read
through the SQL policy (`parse_query`) — the tree Spark will run — and resolved with sqlglot's scopes,
so `*`, aliases, CTEs, sub-queries, joins, unions and the chain of steps (a step reads the aliases of the
steps before it as relations) are followed down to the inputs' own columns.

Each output column gets its *direct* origins with how the value was made, the strongest along the way:
`IDENTITY` (the input value as is, e.g. `symbol` or `t.symbol AS s`), `TRANSFORMATION` (computed from
it: `price * quantity`, `CAST(...)`, `window(...)`), `AGGREGATION` (under an aggregate: `SUM(quantity)`,
also as a window function). The columns that decide which rows there are, not their values, are the
dataset's *indirect* origins: `FILTER` (WHERE, HAVING, QUALIFY), `JOIN` (ON, USING), `GROUP_BY`, `SORT`
(ORDER BY, SORT BY, ...) and `WINDOW` (a window's PARTITION BY / ORDER BY).

What cannot be resolved gives no lineage (None), never an error: a query the policy refuses, or one
sqlglot cannot qualify (an unknown column). System columns: the inputs' `offset`, `op`, `system_time`
and `event_time` are columns like any other (a query that passes `op` or `event_time` on says so); the
output's `offset` and `system_time` are written by the engine and have no origins.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # sqlglot is imported when lineage is asked for (half a second)
    from sqlglot import exp
    from sqlglot.optimizer.scope import Scope

IDENTITY, TRANSFORMATION, AGGREGATION = "IDENTITY", "TRANSFORMATION", "AGGREGATION"
FILTER, JOIN, GROUP_BY, SORT, WINDOW = "FILTER", "JOIN", "GROUP_BY", "SORT", "WINDOW"
_STRENGTH = {IDENTITY: 0, TRANSFORMATION: 1, AGGREGATION: 2}
# Spark names the struct column of a GROUP BY window(...) after the function: `window.start`
_GROUPING_STRUCTS = ("window", "session_window")

# (input relation, input column in lower case) -> how
_Origins = dict[tuple[str, str], str]


@dataclass(frozen=True, order=True)
class ColumnOrigin:
    """One input column an output column (or the dataset's rows) depends on, and how."""

    input: str  # the relation the transform reads it from: the input's alias (or reference)
    column: str  # as spelled in the input's schema
    kind: str  # direct: IDENTITY / TRANSFORMATION / AGGREGATION; indirect: FILTER / JOIN / ...


@dataclass(frozen=True)
class ColumnLineage:
    columns: Mapping[str, tuple[ColumnOrigin, ...]]  # output column -> its direct origins (sorted)
    dataset: tuple[ColumnOrigin, ...] = ()  # the indirect origins (sorted)


@dataclass
class _Relation:
    """What a step may read by name: an input (each column its own origin) or an earlier step."""

    columns: dict[str, _Origins]  # column (lower case) -> origins, in the relation's column order
    indirect: frozenset[ColumnOrigin] = frozenset()


def column_lineage(
    steps: Sequence[tuple[str, str | None]],
    inputs: Mapping[str, Sequence[str]],
    output_columns: Sequence[str] | None = None,
) -> ColumnLineage | None:
    """The lineage of a transform's output: `steps` run in order (the last is the output), each reading
    `inputs` (relation name -> its columns) and the aliases of the steps before it.

    `output_columns` (the output dataset's schema) spells the result's keys and limits them to the columns
    the output has; without it, keys are the query's output names in lower case. None when a step is
    refused by the SQL policy or cannot be resolved."""
    from sqlglot.errors import SqlglotError

    from airflow_odf.utils.sql_policy import SqlRefused

    relations: dict[str, _Relation] = {
        name.lower(): _Relation({c.lower(): {(name, c.lower()): IDENTITY} for c in columns})
        for name, columns in inputs.items()
    }
    spelling = {(name, c.lower()): c for name, columns in inputs.items() for c in columns}
    if not steps:
        return None
    try:
        for query, alias in steps:
            result = _resolve_step(query, relations)
            relations[(alias or "").lower()] = result  # the last step's is the output (alias or not)
    except (SqlRefused, SqlglotError, RecursionError):
        return None
    return _spelled(result, spelling, output_columns)


def _resolve_step(query: str, relations: Mapping[str, _Relation]) -> _Relation:
    from sqlglot.optimizer.qualify import qualify
    from sqlglot.optimizer.scope import build_scope

    from airflow_odf.utils.sql_policy import parse_query
    from airflow_odf.utils.sql_policy.check import DIALECT

    given = [name for name in relations if name]
    tree = _grouping_structs_expanded(parse_query(query, given))
    schema = {name: dict.fromkeys(r.columns, "string") for name, r in relations.items() if name}
    qualified = qualify(tree, schema=schema, dialect=DIALECT, validate_qualify_columns=True)
    root = build_scope(qualified)
    if root is None:
        return _Relation({})
    return _Resolver(relations, root).relation(root)


def _grouping_structs_expanded(tree: exp.Expression) -> exp.Expression:
    """`window.start` after `GROUP BY window(ts, '1 day')` is a field of that call's result: written as the
    call itself (a transformation of `ts`), since no relation or column is named `window`."""
    from sqlglot import exp

    for select in tree.find_all(exp.Select):
        group = select.args.get("group")
        calls = {}
        for node in group.find_all(exp.Anonymous) if group else ():
            if node.name.lower() in _GROUPING_STRUCTS:
                calls[node.name.lower()] = node
        if not calls:
            continue
        for column in list(select.find_all(exp.Column)):
            call = calls.get(column.table.lower())
            if call is not None and _owner(column) is select:
                column.replace(call.copy())
    return tree


def _owner(node: exp.Expression) -> exp.Expression | None:
    """The SELECT (or set operation) a node belongs to."""
    from sqlglot import exp

    parent = node.parent
    while parent is not None and not isinstance(parent, exp.Select | exp.SetOperation):
        parent = parent.parent
    return parent


class _Resolver:
    """Resolves the scopes of one qualified step, each once."""

    def __init__(self, relations: Mapping[str, _Relation], root: Scope) -> None:
        self.relations = relations
        self.scopes = {id(s.expression): s for s in root.traverse()}
        self.done: dict[int, _Relation] = {}

    def relation(self, scope: Scope) -> _Relation:
        key = id(scope.expression)
        if key not in self.done:
            self.done[key] = self._union(scope) if scope.set_operation_scopes else self._select(scope)
        return self.done[key]

    def _union(self, scope: Scope) -> _Relation:
        """A set operation: each output column comes from the columns at its position in every branch."""
        branches = [self.relation(s) for s in scope.set_operation_scopes]
        columns: dict[str, _Origins] = {}
        names = list(branches[0].columns)
        for position, name in enumerate(names):
            origins: _Origins = {}
            for branch in branches:
                values = list(branch.columns.values())
                if position < len(values):
                    _merge(origins, values[position])
            columns[name] = origins
        indirect = frozenset().union(*(b.indirect for b in branches))
        return _Relation(columns, indirect | self._clauses(scope, scope.expression))

    def _select(self, scope: Scope) -> _Relation:
        from sqlglot import exp

        select = scope.expression
        columns: dict[str, _Origins] = {}
        if isinstance(select, exp.Select):
            for projection in select.expressions:
                origins: _Origins = {}
                value = projection.unalias()
                for column in projection.find_all(exp.Column):
                    if _owner(column) is not select or _in_window_spec(column, projection):
                        continue  # a sub-query's own (below), or rows' order or partition (`_clauses`)
                    kind = (
                        AGGREGATION
                        if _aggregated(column, projection)
                        else IDENTITY
                        if value is column
                        else TRANSFORMATION
                    )
                    for origin, inner in self.column(scope, column).items():
                        _merge(origins, {origin: _stronger(kind, inner)})
                for query in projection.find_all(exp.Subquery):  # a scalar sub-query: its value's origins
                    inner_scope = self.scopes.get(id(query.this))
                    if _owner(query) is select and inner_scope is not None:
                        for found in self.relation(inner_scope).columns.values():
                            _merge(origins, {o: _stronger(TRANSFORMATION, k) for o, k in found.items()})
                columns[projection.alias_or_name.lower()] = origins
        indirect: set[ColumnOrigin] = set(self._clauses(scope, select))
        for child in itertools.chain(scope.cte_scopes, scope.derived_table_scopes, scope.subquery_scopes):
            indirect |= self.relation(child).indirect
        for source in scope.sources.values():
            indirect |= self._read(source).indirect
        return _Relation(columns, frozenset(indirect))

    def _clauses(self, scope: Scope, node: exp.Expression) -> frozenset[ColumnOrigin]:
        """The indirect origins of a SELECT's (or set operation's) own clauses."""
        from sqlglot import exp

        found: set[ColumnOrigin] = set()

        def add(part: exp.Expression | None, kind: str) -> None:
            for column in part.find_all(exp.Column) if part is not None else ():
                found.update(ColumnOrigin(i, c, kind) for (i, c) in self.column(scope, column))

        for key, kind in (("where", FILTER), ("having", FILTER), ("qualify", FILTER), ("group", GROUP_BY)):
            add(node.args.get(key), kind)
        for key in ("order", "sort", "cluster", "distribute"):
            add(node.args.get(key), SORT)
        for join in node.args.get("joins") or ():
            add(join.args.get("on"), JOIN)
            for name in join.args.get("using") or ():
                for source in scope.selected_sources:
                    origins = self._read(scope.sources.get(source)).columns.get(name.name.lower(), {})
                    found.update(ColumnOrigin(i, c, JOIN) for (i, c) in origins)
        for window in node.find_all(exp.Window):
            if _owner(window) is node:
                for part in [*(window.args.get("partition_by") or ()), window.args.get("order")]:
                    add(part, WINDOW)
        return frozenset(found)

    def column(self, scope: Scope, column: exp.Column) -> _Origins:
        """The input columns a (qualified) column reference reads, and how they were made; it is resolved
        in the scope of the query it is written in (a sub-query's own, else `scope`)."""
        table = column.table.lower()
        current: Scope | None = self.scopes.get(id(_owner(column)), scope)
        while current is not None and table not in current.sources:
            current = current.parent  # a correlated reference reads the outer query's source
        if current is None:
            return {}  # e.g. a lambda's parameter
        return dict(self._read(current.sources[table]).columns.get(column.name.lower(), {}))

    def _read(self, source: object) -> _Relation:
        """The relation behind a source of a scope: a relation given by name, or a scope of the query."""
        from sqlglot import exp
        from sqlglot.optimizer.scope import Scope

        if isinstance(source, Scope):
            return self.relation(source)
        if isinstance(source, exp.Table):
            return self.relations.get(source.name.lower(), _Relation({}))
        return _Relation({})  # a table function (range, explode ...) reads no input


def _in_window_spec(column: exp.Expression, stop: exp.Expression) -> bool:
    """Whether a column sits in a window's PARTITION BY or ORDER BY (below `stop`)."""
    from sqlglot import exp

    child, parent = column, column.parent
    while parent is not None and child is not stop:
        if isinstance(parent, exp.Window) and child is not parent.this:
            return True
        child, parent = parent, parent.parent
    return False


def _aggregated(column: exp.Expression, stop: exp.Expression) -> bool:
    from sqlglot import exp

    node = column.parent
    while node is not None and node is not stop.parent:
        if isinstance(node, exp.AggFunc):
            return True
        node = node.parent
    return False


def _stronger(a: str, b: str) -> str:
    return a if _STRENGTH[a] >= _STRENGTH[b] else b


def _merge(into: _Origins, more: _Origins) -> None:
    for origin, kind in more.items():
        into[origin] = _stronger(kind, into.get(origin, IDENTITY))


def _spelled(
    output: _Relation, spelling: Mapping[tuple[str, str], str], output_columns: Sequence[str] | None
) -> ColumnLineage:
    """The result with input columns spelled as their schemas spell them, keys as the output's."""

    def origins(found: _Origins) -> tuple[ColumnOrigin, ...]:
        return tuple(sorted(ColumnOrigin(i, spelling.get((i, c), c), k) for (i, c), k in found.items()))

    if output_columns is None:
        columns = {name: origins(found) for name, found in output.columns.items()}
    else:
        columns = {
            name: origins(output.columns[name.lower()])
            for name in output_columns
            if name.lower() in output.columns
        }
    dataset = tuple(
        sorted(
            ColumnOrigin(o.input, spelling.get((o.input, o.column), o.column), o.kind)
            for o in output.indirect
        )
    )
    return ColumnLineage(columns, dataset)

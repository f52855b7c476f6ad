"""Which slice files make each table of a query: a dataset's slices from its summary, as of a block.

The tables are the relations the SQL policy finds in the statement (`airflow_odf/utils/sql_policy`): the
same parse that refuses what is not a query over datasets. A dataset's slices come from the slice index
of its state (the summary): no chain walk for a query of the current data. As of a block, the chain is
walked back from the head only as far as that block (`data_as_of`), and the table has the schema the
dataset had at that block. Nothing is written: a stale summary is read, folded in memory and left as
it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from airflow_odf.odf.chain.data_access import BlockNotInChainError, data_as_of
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.engine_client.contract import schema_to_text
from airflow_odf.odf.engine_client.query_contract import QueryTable
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.operation import local_object
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.data_schema import data_schema_to_arrow
from airflow_odf.odf.schema.evolution import odf_schema


class QueryError(OdfError):
    """A query or export that cannot run as asked (bad as-of block, unknown table, not a query, ...)."""


def dataset_names(repo: Repository) -> list[str]:
    """The names of the repository's readable datasets, sorted (damaged aliases left out)."""
    return [entry.name for entry in repo.scan() if entry.dataset_id is not None]


def names_in(sql: str, names: list[str]) -> dict[str, list[str]]:
    """Dataset name -> its spellings among the relations the query reads (any case: Spark matches a view
    as spelled, so each spelling becomes a view), once the SQL policy accepts the statement; QueryError
    for a refused statement or a relation that is no dataset of `names`."""
    from airflow_odf.utils.sql_policy import SqlRefused, check_query  # sqlglot: only when a query runs

    try:
        reads = check_query(sql, None)
    except SqlRefused as e:
        raise QueryError(f"the query: {e}") from None
    by_lower = {name.lower(): name for name in names}
    found: dict[str, set[str]] = {}
    for read in reads:
        name = by_lower.get(read.name.lower())
        if name is None:
            raise QueryError(
                f"relation {read.name} at line {read.line}, column {read.column} is no dataset here; the "
                f"datasets: {', '.join(names) or 'none'} (quote names with dots in backticks: SELECT * FROM "
                "`com.example.trades`)"
            )
        found.setdefault(name, set()).add(read.name)
    return {name: sorted(spellings) for name, spellings in found.items()}


def parse_block(name: str, text: str) -> Multihash:
    try:
        return Multihash.parse(text.strip())
    except OdfError as e:
        raise QueryError(f"as of {name}={text}: not a block hash ({e})") from None


def query_table(
    repo: Repository, name: str, op_dir: Path, as_of: str | None = None, spellings: tuple[str, ...] = ()
) -> list[QueryTable]:
    """The views of dataset `name` (one per spelling, its own name by default) over its slice files
    the engine can read, as of block `as_of` if given."""
    dataset = repo.dataset(name)
    state = dataset.state(record=False)
    try:
        pinned = pin(dataset, state, None if as_of is None else parse_block(name, as_of))
    except BlockNotInChainError as e:
        raise QueryError(f"as of {name}={as_of}: {e}") from None
    return pinned.views(op_dir, spellings or (name,))


@dataclass(frozen=True)
class PinnedData:
    """A dataset as of one block (`block`, None for a dataset without one): the slices and the schema
    it had then."""

    dataset: Dataset
    block: Multihash | None
    slices: list[str]
    schema: model.SetDataSchema | None

    def views(self, op_dir: Path, names: tuple[str, ...]) -> list[QueryTable]:
        """One view per name over the pinned slices, as files the engine can read."""
        schema = (
            None if self.schema is None else schema_to_text(data_schema_to_arrow(odf_schema(self.schema)))
        )
        paths = [local_object(self.dataset, f"data/{h}", op_dir) for h in self.slices]
        return [QueryTable(name=name, schema=schema, data_paths=paths) for name in names]


def pin(dataset: Dataset, state: ChainState, block: Multihash | None) -> PinnedData:
    """The dataset as of `block`, or as of its head (the summary's slices, no walk) when None;
    BlockNotInChainError when the block is not in its chain."""
    if block is None or block == state.head:
        return PinnedData(dataset, state.head, state.data_slices.texts(), state.schema)
    slices, schema = data_as_of(dataset, state, block)
    return PinnedData(dataset, block, slices, schema)


def query_tables(
    repo: Repository, sql: str, op_dir: Path, as_of: Mapping[str, str] | None = None
) -> list[QueryTable]:
    """The tables a query names, each as of its block in `as_of` (name -> block hash, any case) if
    listed there."""
    known = dataset_names(repo)
    by_lower = {n.lower(): n for n in known}
    pins: dict[str, str] = {}
    for name, block in (as_of or {}).items():
        if name.lower() not in by_lower:
            repo.resolve(name)  # DatasetNotFoundError naming it (or a damaged dataset's reason)
        pins[by_lower[name.lower()]] = block
    named = names_in(sql, known)
    return [
        table
        for name in sorted(set(named) | set(pins))
        for table in query_table(repo, name, op_dir, pins.get(name), tuple(named.get(name, ())))
    ]

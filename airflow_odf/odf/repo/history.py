"""How a dataset's schema and a derivative's query changed over time, block by block, newest first.

`odf inspect schema|query` and the Airflow view show these; each entry carries the block that recorded
the change (its hash, sequence number and system time). Walks back from a given block; `max_blocks`
bounds the walk where an answer must come quickly whatever the history (the view).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.repo.repository import Repository, RepositoryError
from airflow_odf.odf.schema.evolution import SchemaChange, diff_schemas, odf_schema


@dataclass(frozen=True)
class Recorded:
    """Where an event was recorded."""

    block_hash: Multihash
    block: model.MetadataBlock

    @property
    def sequence_number(self) -> int:
        return self.block.sequence_number

    @property
    def system_time(self) -> str:
        return str(self.block.system_time)


class _Scan:
    """The blocks with an event of one type from `start` back, stopping after `max_blocks` blocks."""

    def __init__(self, dataset: Dataset, start: Multihash, event: type, max_blocks: int | None) -> None:
        self.dataset, self.start, self.event, self.max_blocks = dataset, start, event, max_blocks
        self.complete = True

    def __iter__(self) -> Iterator[Recorded]:
        for scanned, (block_hash, block) in enumerate(self.dataset.iter_blocks(self.start)):
            if scanned == self.max_blocks:
                self.complete = False
                return
            if isinstance(block.event, self.event):
                yield Recorded(block_hash, block)


# ----- schema -----


@dataclass(frozen=True)
class SchemaVersion:
    recorded: Recorded
    schema: model.DataSchema  # in ODF form (a legacy raw Arrow schema converted)
    legacy: bool
    changes: list[SchemaChange] | None  # from the version before; None: the first (or none seen before)


@dataclass(frozen=True)
class SchemaHistory:
    versions: list[SchemaVersion]  # newest first
    complete: bool  # False: the walk stopped after `max_blocks` blocks


def schema_history(
    dataset: Dataset, start: Multihash, *, max_blocks: int | None = None, max_versions: int | None = None
) -> SchemaHistory:
    """Every SetDataSchema from `start` back (the newest `max_versions`), each with its evolution from
    the one before by the core's evolution rules."""
    scan = _Scan(dataset, start, model.SetDataSchema, max_blocks)
    found: list[Recorded] = []
    for recorded in scan:
        found.append(recorded)
        if max_versions is not None and len(found) > max_versions:  # one more: the changes of the last
            break
    schemas = [odf_schema(r.block.event) for r in found]
    versions = []
    for i, recorded in enumerate(found[:max_versions]):
        changes = None
        if i + 1 < len(found):
            older = found[i + 1].block.event
            changes = diff_schemas(schemas[i + 1], schemas[i], ignore_optionality=older.schema is None)
        versions.append(SchemaVersion(recorded, schemas[i], recorded.block.event.schema is None, changes))
    return SchemaHistory(versions, scan.complete)


# ----- query -----


@dataclass(frozen=True)
class QueryInput:
    alias: str  # the name the query reads it by
    dataset_id: str
    name: str | None  # its name in this repository now; None: not here


@dataclass(frozen=True)
class QueryVersion:
    recorded: Recorded
    transform: (
        model.TransformSql
    )  # its `queries` in order (the chain holds no bare `query`): the last gives the output
    inputs: list[QueryInput]


class NoQueryError(RepositoryError):
    """A root dataset has no transformation query."""


def query_history(repo: Repository, name: str) -> list[QueryVersion]:
    """Every SetTransform of a derivative, newest first, its inputs named as in the repository now."""
    dataset = repo.dataset(name)
    kind = dataset.state().kind
    if kind is not model.DatasetKind.DERIVATIVE:
        raise NoQueryError(
            f"{name} is a root dataset: its data comes from its sources, not from a query "
            f"(`odf log {name}` shows its events)"
        )
    names = {str(e.dataset_id): e.name for e in repo.scan() if e.dataset_id is not None}
    out = []
    for recorded in _Scan(dataset, dataset.existing_head(), model.SetTransform, None):
        event: model.SetTransform = recorded.block.event
        inputs = []
        for i in event.inputs:
            did = str(DatasetId.parse(i.dataset_ref)) if i.dataset_ref.startswith("did:") else i.dataset_ref
            inputs.append(QueryInput(i.alias or i.dataset_ref, did, names.get(did)))
        out.append(QueryVersion(recorded, event.transform, inputs))
    return out

"""A repository's datasets at a glance: kind, head, records, last update, last verification, inputs and
where a pulled dataset came from. What `odf inspect lineage` and the Airflow view list and draw.

Everything here reads; a dataset that cannot be read is listed with its error, never hiding the others.
What a repository holds is untrusted text: callers escape it for their output.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.chain.verification import read_record
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.repo.remotes import PULL, RemotesError, remotes
from airflow_odf.odf.repo.repository import ListedDataset, Repository
from airflow_odf.odf.storage.redact import redact_url


@dataclass(frozen=True)
class Verification:
    """Which head was last verified, when and how; `signer`: who signed that head (a DID, or
    `unsigned`; None when the record predates signed heads)."""

    head: str
    time: str
    how: str
    signer: str | None = None


def last_verification(dataset: Dataset) -> Verification | None:
    """The dataset's verification record as a person reads it; None when there is none (or it is
    unreadable: the core then ignores it too)."""
    record = read_record(dataset)
    entry = record.integrity
    if entry is None:
        return None
    how = "full" if entry.full else "incremental"
    if record.replay is not None and record.replay.head == entry.head:
        engine = record.replay.engine
        how += ", transforms replayed" + (f" on {engine}" if engine else "")
    return Verification(head=str(entry.head), time=str(entry.verified_at), how=how, signer=entry.signer)


def pulled_from(dataset: Dataset) -> str | None:
    """The URL the dataset was last pulled from (credentials hidden); None when it was never pulled or
    its record of remotes is unreadable (that breaks `odf pull NAME`, which says so, not the listing)."""
    try:
        urls = remotes(dataset)[PULL]
    except RemotesError:
        return None
    return redact_url(urls[-1]) if urls else None


@dataclass(frozen=True)
class DatasetOverview:
    """One dataset of the repository; a dataset that cannot be read has `error` and no state."""

    name: str
    dataset_id: str | None
    kind: str | None = None
    head: str | None = None
    blocks: int | None = None
    records: int | None = None
    last_update: str | None = None
    verification: Verification | None = None
    inputs: tuple[tuple[str, str], ...] = ()  # (dataset id, alias) of a derivative's inputs
    origin: str | None = None  # the URL it was pulled from
    error: str | None = None


def dataset_overview(dataset: Dataset, name: str) -> tuple[DatasetOverview, ChainState]:
    """A dataset's overview and its state; OdfError when it cannot be read."""
    dataset.existing_head()
    state = dataset.state()
    inputs = state.transform.inputs if state.transform is not None else []
    overview = DatasetOverview(
        name=name,
        dataset_id=None if state.dataset_id is None else str(state.dataset_id),
        kind=state.kind.name.capitalize() if state.kind is not None else None,
        head=str(state.head),
        blocks=state.num_blocks,
        records=state.num_records,
        last_update=None if state.system_time is None else str(state.system_time),
        verification=last_verification(dataset),
        inputs=tuple((str(DatasetId.parse(i.dataset_ref)), i.alias or i.dataset_ref) for i in inputs),
        origin=pulled_from(dataset),
    )
    return overview, state


def _listed(repo: Repository, entry: ListedDataset) -> DatasetOverview:
    try:
        return dataset_overview(repo.dataset_of(entry), entry.name)[0]
    except OdfError as e:
        did = None if entry.dataset_id is None else str(entry.dataset_id)
        return DatasetOverview(entry.name, did, error=str(e))


def repository_overview(repo: Repository) -> list[DatasetOverview]:
    """Every dataset, sorted by name; a broken one is listed with its error, never hiding the others."""
    return [_listed(repo, entry) for entry in repo.scan()]

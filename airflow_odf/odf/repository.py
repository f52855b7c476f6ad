"""A repository: a directory of datasets with name <-> identity lookup, and applying snapshots to it.

Layout: `<root>/.odf-repository` (marker), `<root>/datasets/<did:odf multibase>/` (each a dataset
layout), `<root>/aliases/<lower-case name>` (the DID of the dataset of that name). Names follow the
spec's grammar and are case-insensitive, so nothing a user types can escape the repository.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_odf.odf import model
from airflow_odf.odf.dataset import CommitResult, Dataset
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.multiformats import DatasetId
from airflow_odf.odf.names import is_dataset_name
from airflow_odf.odf.storage import ConflictError, LocalObjectStore
from airflow_odf.odf.timestamps import Timestamp

MARKER = ".odf-repository"
ALIAS_KEY = "info/alias"


class RepositoryError(OdfError):
    """The repository is missing, or a name or reference is invalid or unknown."""


class DatasetNotFoundError(RepositoryError):
    pass


@dataclass(frozen=True)
class AddResult:
    name: str
    dataset_id: DatasetId
    created: bool
    commit: CommitResult


def normalize_sql(sql: model.TransformSql) -> model.TransformSql:
    """`query` becomes `queries: [{query}]`, as the reference stores transforms."""
    if sql.query is None:
        return sql
    return dataclasses.replace(sql, query=None, queries=[model.SqlQueryStep(query=sql.query)])


class Repository:
    """Datasets under one local directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.store = LocalObjectStore(self.root)

    @classmethod
    def init(cls, root: str | Path) -> Repository:
        repo = cls(root)
        repo.root.mkdir(parents=True, exist_ok=True)
        (repo.root / MARKER).write_text("1")
        return repo

    @classmethod
    def open(cls, root: str | Path) -> Repository:
        repo = cls(root)
        if not (repo.root / MARKER).is_file():
            raise RepositoryError(f"{repo.root} is not an ODF repository (run `odf init` there first)")
        return repo

    # ----- names and identities -----

    @staticmethod
    def check_name(name: str) -> str:
        if not isinstance(name, str) or not is_dataset_name(name):
            raise RepositoryError(
                f"{name!r} is not a valid dataset name "
                "(letters, digits and inner '-', parts separated by '.')"
            )
        return name

    def _alias_key(self, name: str) -> str:
        return f"aliases/{self.check_name(name).lower()}"

    def dataset_by_id(self, dataset_id: DatasetId) -> Dataset:
        return Dataset(LocalObjectStore(self.root / "datasets" / str(dataset_id).removeprefix("did:odf:")))

    def resolve(self, ref: str) -> DatasetId:
        """A dataset's identity from its name (any case) or `did:odf:` reference."""
        if ref.startswith("did:"):
            try:
                did = DatasetId.parse(ref)
            except OdfError as e:
                raise RepositoryError(f"{ref!r}: {e}") from None
            if self.dataset_by_id(did).head() is None:
                raise DatasetNotFoundError(f"no dataset {ref} in {self.root}")
            return did
        raw = self.store.get_or_none(self._alias_key(ref))
        if raw is None:
            raise DatasetNotFoundError(f"no dataset named {ref!r} in {self.root}")
        return DatasetId.parse(raw.decode())

    def dataset(self, ref: str) -> Dataset:
        return self.dataset_by_id(self.resolve(ref))

    def name_of(self, dataset: Dataset) -> str:
        raw = dataset.store.get_or_none(ALIAS_KEY)
        return raw.decode() if raw else "?"

    def list(self) -> list[tuple[str, DatasetId]]:
        out = []
        for key in self.store.list("aliases"):
            did = DatasetId.parse(self.store.get(key).decode())
            out.append((self.name_of(self.dataset_by_id(did)), did))
        return sorted(out, key=lambda item: item[0].lower())

    # ----- applying snapshots -----

    def normalize_event(self, event: Any) -> Any:
        """A manifest event in the form the chain records (transform inputs as DIDs, queries normalized)."""
        if isinstance(event, model.SetTransform):
            inputs = []
            for i in event.inputs:
                try:
                    did = self.resolve(i.dataset_ref)
                except DatasetNotFoundError:
                    raise RepositoryError(
                        f"transform input {i.dataset_ref!r} is not in the repository (add it first)"
                    ) from None
                inputs.append(model.TransformInput(dataset_ref=str(did), alias=i.alias or i.dataset_ref))
            return model.SetTransform(inputs=inputs, transform=normalize_sql(event.transform))
        if isinstance(event, (model.SetPollingSource, model.AddPushSource)) and event.preprocess is not None:
            return dataclasses.replace(event, preprocess=normalize_sql(event.preprocess))
        return event

    def add(self, snapshot: model.DatasetSnapshot, *, system_time: Timestamp | None = None) -> AddResult:
        """Creates the dataset, or appends only the events that differ from its current state."""
        name = self.check_name(snapshot.name)
        events = [self.normalize_event(e) for e in snapshot.metadata]
        system_time = system_time or Timestamp.now()
        try:
            did = self.resolve(name)
        except DatasetNotFoundError:
            return self._create(name, snapshot.kind, events, system_time)
        dataset = self.dataset_by_id(did)
        state = dataset.state()
        if state.kind is not snapshot.kind:
            raise RepositoryError(
                f"{name} is a {state.kind.name.capitalize() if state.kind is not None else '?'} dataset; "
                f"the manifest says {snapshot.kind.name.capitalize()}"
            )
        changed = []
        for event in events:
            if isinstance(event, model.AddPushSource):
                current = state.push_sources.get(event.source_name)
            else:
                current = state.latest_event(type(event))
            if current != event:
                changed.append(event)
        commit = dataset.commit(changed, system_time=system_time, expected_head=state.head)
        return AddResult(name, did, False, commit)

    def _create(
        self, name: str, kind: model.DatasetKind, events: list[Any], system_time: Timestamp
    ) -> AddResult:
        did, _secret = DatasetId.generate()
        dataset = self.dataset_by_id(did)
        seed = model.Seed(dataset_id=did, dataset_kind=kind)
        commit = dataset.commit([seed, *events], system_time=system_time, expected_head=None)
        try:  # the name is taken last: a failed creation leaves only an unnamed dataset for `gc`
            self.register_name(name, did)
        except ConflictError:
            raise ConflictError(f"a dataset named {name!r} was created concurrently") from None
        return AddResult(name, did, True, commit)

    def register_name(self, name: str, dataset_id: DatasetId) -> None:
        """Names an existing dataset folder; ConflictError when the name is taken meanwhile."""
        self.dataset_by_id(dataset_id).store.put(ALIAS_KEY, name.encode())
        self.store.compare_and_swap(self._alias_key(name), None, str(dataset_id).encode())

    # ----- housekeeping -----

    def unnamed_datasets(self, min_age_seconds: float) -> list[Path]:
        """Dataset folders no name points to (left by failed creations), older than `min_age_seconds`."""
        named = {str(did).removeprefix("did:odf:") for _, did in self.list()}
        datasets = self.root / "datasets"
        if not datasets.is_dir():
            return []
        now = time.time()
        return [
            p
            for p in datasets.iterdir()
            if p.name not in named and now - p.stat().st_mtime >= min_age_seconds
        ]

    def remove_dataset_dir(self, path: Path) -> None:
        if path.parent != self.root / "datasets" or os.path.islink(path):
            raise RepositoryError(f"refusing to remove {path}: not a dataset folder of this repository")
        shutil.rmtree(path)

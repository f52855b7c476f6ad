"""A repository: datasets with name <-> identity lookup, and applying snapshots to it.

Layout, the same on a local disk and under an S3 prefix: `<root>/.odf-repository` (marker),
`<root>/datasets/<did:odf multibase>/` (each a dataset layout), `<root>/aliases/<lower-case name>`
(the DID of the dataset of that name). Names follow the
spec's grammar and are case-insensitive, so nothing a user types can escape the repository.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from airflow_odf.odf.chain.dataset import CommitResult, Dataset
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.format.names import is_dataset_name
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.storage.local import LocalObjectStore
from airflow_odf.odf.storage.store import ConflictError, ObjectStore
from airflow_odf.odf.storage.url import open_store

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


def _is_store_url(root: str | Path) -> bool:
    return isinstance(root, str) and "://" in root and not root.startswith("file://")


def _local(root: str | Path) -> Path:
    if isinstance(root, str) and root.startswith("file://"):
        return Path(unquote(urlsplit(root).path))
    return Path(root)


class Repository:
    """Datasets under one root: a local directory, or a prefix in an object store (e.g. S3).

    A repository in an object store needs a local `work_dir` for the engine: inputs are staged there
    (unless the engine reads the store itself) and outputs are written there before the commit moves
    them into the store.
    """

    def __init__(
        self, root: str | Path, *, store: ObjectStore | None = None, work_dir: Path | None = None
    ) -> None:
        self.root = Path(root)
        self.location = str(root)
        self.store = store if store is not None else LocalObjectStore(self.root)
        self._work_dir = work_dir

    @property
    def is_local(self) -> bool:
        return isinstance(self.store, LocalObjectStore)

    @property
    def work_dir(self) -> Path:
        """Scratch space: inside a local repository (same file system: slices move, not copy)."""
        if self._work_dir is not None:
            return self._work_dir
        if self.is_local:
            return self.root / "cache"
        digest = hashlib.sha256(self.location.encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / "airflow-odf-work" / digest

    @classmethod
    def init(cls, root: str | Path) -> Repository:
        """Creates (or re-marks) a repository: a local directory, or a URL such as `s3://bucket/odf`
        (credentials from the environment)."""
        if _is_store_url(root):
            return cls.in_store(open_store(str(root)), str(root), create=True)
        repo = cls(_local(root))
        repo.root.mkdir(parents=True, exist_ok=True)
        (repo.root / MARKER).write_text("1")
        return repo

    @classmethod
    def open(cls, root: str | Path) -> Repository:
        if _is_store_url(root):
            return cls.in_store(open_store(str(root)), str(root))
        repo = cls(_local(root))
        if not (repo.root / MARKER).is_file():
            raise RepositoryError(f"{repo.root} is not an ODF repository (run `odf init` there first)")
        return repo

    @classmethod
    def in_store(
        cls, store: ObjectStore, location: str, *, create: bool = False, work_dir: Path | None = None
    ) -> Repository:
        """A repository in an object store (`location` is its URL, for messages); `create` marks a new
        one, otherwise the marker must be there."""
        if create and not store.exists(MARKER):
            store.put(MARKER, b"1")
        elif not store.exists(MARKER):
            raise RepositoryError(f"{location} is not an ODF repository (create it first)")
        return cls(location, store=store, work_dir=work_dir)

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
        return Dataset(self.store.child(f"datasets/{str(dataset_id).removeprefix('did:odf:')}"))

    def resolve(self, ref: str) -> DatasetId:
        """A dataset's identity from its name (any case) or `did:odf:` reference."""
        if ref.startswith("did:"):
            try:
                did = DatasetId.parse(ref)
            except OdfError as e:
                raise RepositoryError(f"{ref!r}: {e}") from None
            if self.dataset_by_id(did).head() is None:
                raise DatasetNotFoundError(f"no dataset {ref} in {self.location}")
            return did
        raw = self.store.get_or_none(self._alias_key(ref))
        if raw is None:
            raise DatasetNotFoundError(f"no dataset named {ref!r} in {self.location}")
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
        if not self.is_local:
            raise RepositoryError(f"{self.location}: garbage collection runs on local repositories only")
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

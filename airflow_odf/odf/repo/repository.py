"""A repository: datasets with name <-> identity lookup, and applying snapshots to it.

Layout, the same on a local disk and under an S3 prefix: `<root>/.odf-repository` (marker),
`<root>/datasets/<did:odf multibase>/` (each a dataset layout), `<root>/aliases/<lower-case name>`
(the DID of the dataset of that name). Names follow the
spec's grammar and are case-insensitive, so nothing a user types can escape the repository.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from airflow_odf.odf.chain.dataset import HEAD_REF, CommitResult, CorruptDatasetError, Dataset
from airflow_odf.odf.chain.head_signature import HeadSigner
from airflow_odf.odf.chain.in_flight import holder_record, read_record, record_age
from airflow_odf.odf.chain.reconcile import Reconciliation, reconciling
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.format.names import is_dataset_name
from airflow_odf.odf.format.sql_policy import require_sql_allowed
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.identity.keys import KeyStore, default_keys_dir
from airflow_odf.odf.storage.local import LocalObjectStore
from airflow_odf.odf.storage.store import ConflictError, ObjectNotFoundError, ObjectStore
from airflow_odf.odf.storage.url import open_store

MARKER = ".odf-repository"
ALIAS_KEY = "info/alias"
#: Held while a rename or delete changes a dataset's names (see `Repository._names_locked`).
NAME_LOCK_KEY = "info/name-lock"
#: A rename or delete takes a few requests; a lock older than this is of one that died.
NAME_LOCK_LEASE_SECONDS = 60.0


class RepositoryError(OdfError):
    """The repository is missing, or a name or reference is invalid or unknown."""


class DatasetNotFoundError(RepositoryError):
    pass


@dataclass(frozen=True)
class ListedDataset:
    """One name of the repository: the dataset it names, or (`error`) why its alias file is unusable.

    `name` is safe to print: the name as written in the dataset's `info/alias` when that is a valid name
    for this alias, else the alias file's own name, escaped when it is not a valid name either.
    """

    name: str
    dataset_id: DatasetId | None
    error: str | None = None


@dataclass(frozen=True)
class AddResult:
    name: str
    dataset_id: DatasetId
    created: bool
    commit: CommitResult


WORK_DIR_ENV = "ODF_WORK_DIR"
"""Where repositories keep their scratch space (a folder per repository), e.g. a volume the engine's Spark
Connect server sees at the same path."""


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


def _shown(text: str) -> str:
    """Text from the disk as it may be printed: escaped when it holds control characters."""
    return text if text.isprintable() else repr(text)


class Repository:
    """Datasets under one root: a local directory, or a prefix in an object store (e.g. S3).

    A repository in an object store needs a local `work_dir` for the engine: inputs are staged there
    (unless the engine reads the store itself) and outputs are written there before the commit moves
    them into the store.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        store: ObjectStore | None = None,
        work_dir: Path | None = None,
        keys: KeyStore | None = None,
    ) -> None:
        self.root = Path(root)
        self.location = str(root)
        self.store = store if store is not None else LocalObjectStore(self.root)
        self._work_dir = work_dir
        self._keys = keys

    @property
    def keys(self) -> KeyStore:
        """The private keys of the datasets created here (and of this node): the store given, else
        `$ODF_KEYS_DIR`, else `.odf-keys/` in a local repository, else the user's configuration folder
        (`airflow_odf.odf.identity.keys`). Never inside what push, pull or serve transfer."""
        if self._keys is None:
            self._keys = KeyStore(default_keys_dir(self.root if self.is_local else None))
        return self._keys

    @property
    def is_local(self) -> bool:
        return isinstance(self.store, LocalObjectStore)

    @property
    def work_dir(self) -> Path:
        """Scratch space, where the engine reads staged inputs and writes its output (so the engine's
        Spark must see it at the same path): the one given, else a folder of this repository under
        $ODF_WORK_DIR, else inside a local repository (same file system: slices move, not copy), else
        under the system's temporary directory."""
        if self._work_dir is not None:
            return self._work_dir
        digest = hashlib.sha256(self.location.encode()).hexdigest()[:16]
        if os.environ.get(WORK_DIR_ENV):
            return Path(os.environ[WORK_DIR_ENV]) / digest
        if self.is_local:
            return self.root / "cache"
        return Path(tempfile.gettempdir()) / "airflow-odf-work" / digest

    @classmethod
    def init(
        cls, root: str | Path, *, work_dir: Path | None = None, keys: KeyStore | None = None
    ) -> Repository:
        """Creates (or re-marks) a repository: a local directory, or a URL such as `s3://bucket/odf`
        (credentials from the environment)."""
        if _is_store_url(root):
            return cls.in_store(open_store(str(root)), str(root), create=True, work_dir=work_dir, keys=keys)
        repo = cls(_local(root), work_dir=work_dir, keys=keys)
        repo.root.mkdir(parents=True, exist_ok=True)
        (repo.root / MARKER).write_text("1")
        return repo

    @classmethod
    def open(
        cls, root: str | Path, *, work_dir: Path | None = None, keys: KeyStore | None = None
    ) -> Repository:
        if _is_store_url(root):
            return cls.in_store(open_store(str(root)), str(root), work_dir=work_dir, keys=keys)
        repo = cls(_local(root), work_dir=work_dir, keys=keys)
        if not (repo.root / MARKER).is_file():
            raise RepositoryError(f"{repo.root} is not an ODF repository (run `odf init` there first)")
        return repo

    @classmethod
    def in_store(
        cls,
        store: ObjectStore,
        location: str,
        *,
        create: bool = False,
        work_dir: Path | None = None,
        keys: KeyStore | None = None,
    ) -> Repository:
        """A repository in an object store (`location` is its URL, for messages); `create` marks a new
        one, otherwise the marker must be there."""
        if create and not store.exists(MARKER):
            store.put(MARKER, b"1")
        elif not store.exists(MARKER):
            raise RepositoryError(f"{location} is not an ODF repository (create it first)")
        return cls(location, store=store, work_dir=work_dir, keys=keys)

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
        """The dataset's folder; it signs the heads it commits when the key store holds its key (read
        on its first commit, once)."""
        signer = HeadSigner(dataset_id, lambda did: self.keys.secret(did))
        return Dataset(self.store.child(_folder(dataset_id)), signer)

    def resolve(self, ref: str, *, damaged: bool = False) -> DatasetId:
        """A dataset's identity from its name (any case) or `did:odf:` reference.

        A named dataset always has a head (a name is given after the first commit), so a missing
        `refs/head` is damage: CorruptDatasetError naming the dataset, rather than an empty dataset that
        a pull would call up to date and a tail would show without rows (an unreadable one fails where it
        is read). `damaged=True` returns it all the same, for the commands that examine damage (`odf
        verify`, `odf serve`)."""
        if ref.startswith("did:"):
            try:
                did = DatasetId.parse(ref)
            except OdfError as e:
                raise RepositoryError(f"{ref!r}: {e}") from None
            if self.dataset_by_id(did).head() is None:
                raise DatasetNotFoundError(f"no dataset {ref} in {self.location}")
            return did
        key = self._alias_key(ref)
        did = self._owner(key)
        if did is None:
            raise DatasetNotFoundError(f"no dataset named {ref!r} in {self.location}")
        if not damaged and not self.store.exists(f"{_folder(did)}/{HEAD_REF}"):
            try:  # what is wrong with it: missing, a directory, a link out, ...
                self.dataset_by_id(did).existing_head()
            except OdfError as e:
                raise CorruptDatasetError(f"{ref}: {e}") from None
        return did

    def _read_alias(self, key: str) -> DatasetId:
        """The DID an alias file holds; RepositoryError naming the file when it holds anything else
        (ObjectNotFoundError when it is gone: a rename or delete removed it since it was listed)."""
        try:
            return DatasetId.parse(self.store.get(key).decode())
        except ObjectNotFoundError:
            raise
        except (OdfError, UnicodeDecodeError) as e:
            reason = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else str(e)
            raise RepositoryError(
                f"{_shown(key)} in {self.location} does not hold a did:odf: {reason}"
            ) from None

    def dataset(self, ref: str, *, damaged: bool = False) -> Dataset:
        """The dataset a name (or DID) refers to; `damaged` as for `resolve`."""
        return self.dataset_by_id(self.resolve(ref, damaged=damaged))

    def name_of(self, dataset: Dataset) -> str:
        """The name a dataset records in `info/alias`, or "?" when that is missing or not a valid name
        (an alias file is untrusted: it is never returned unless it is a name, so it is safe to print)."""
        try:
            name = (dataset.store.get_or_none(ALIAS_KEY) or b"").decode()
        except (OdfError, UnicodeDecodeError):
            return "?"
        return name if is_dataset_name(name) else "?"

    def scan(self) -> list[ListedDataset]:
        """Every name of the repository, sorted, each with its dataset or the reason its alias file is
        unusable: one damaged alias never hides the others."""
        out = []
        for key in self.store.list("aliases"):
            file_name = key.removeprefix("aliases/")
            shown = file_name if is_dataset_name(file_name) else repr(file_name)  # never raw control chars
            try:
                did = self._read_alias(key)
                recorded = self.name_of(self.dataset_by_id(did))
            except ObjectNotFoundError:  # renamed or deleted since it was listed
                continue
            except OdfError as e:  # e.g. the folder of the datasets is a link out of the repository
                out.append(ListedDataset(shown, None, str(e)))
                continue
            out.append(ListedDataset(recorded if recorded.lower() == file_name else shown, did))
        return sorted(out, key=lambda entry: entry.name.lower())

    def list(self) -> list[tuple[str, DatasetId]]:
        """`(name, did)` of every dataset, sorted by name; RepositoryError on a damaged alias file (use
        `scan` to list around it)."""
        out = []
        for entry in self.scan():
            if entry.dataset_id is None:
                raise RepositoryError(f"{entry.name}: {entry.error}")
            out.append((entry.name, entry.dataset_id))
        return out

    def dataset_of(self, entry: ListedDataset) -> Dataset:
        """The dataset a listed name leads to; RepositoryError (with its reason) when it leads nowhere."""
        if entry.dataset_id is None:
            raise RepositoryError(str(entry.error))
        return self.dataset_by_id(entry.dataset_id)

    def names_of(self, dataset_id: DatasetId) -> list[str]:
        """The names that lead to a dataset (one, unless alias files were edited by hand)."""
        return [e.name for e in self.scan() if e.dataset_id == dataset_id]

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

    def add_reconciling(
        self,
        snapshot: model.DatasetSnapshot,
        record: Reconciliation,
        *,
        check: Callable[[model.DatasetSnapshot], model.DatasetSnapshot] = lambda snapshot: snapshot,
        log: Callable[[str], None] | None = None,
    ) -> AddResult:
        """`add(check(snapshot))`; again, against what the other writer left, when another writer (an
        overlapping run) created or changed the dataset first — usually nothing is left to add."""

        def head() -> Any:
            try:
                return self.dataset(snapshot.name).head()
            except DatasetNotFoundError:
                return None

        extra = {} if log is None else {"log": log}
        return reconciling(
            lambda: self.add(check(snapshot)), what=snapshot.name, head=head, record=record, **extra
        )

    def add(self, snapshot: model.DatasetSnapshot, *, system_time: Timestamp | None = None) -> AddResult:
        """Creates the dataset, or appends only the events that differ from its current state."""
        name = self.check_name(snapshot.name)
        for event in snapshot.metadata:
            require_sql_allowed(event, name)
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
        did, secret = DatasetId.generate()

        def kept(_: DatasetId) -> bytes:
            self.keys.save(secret)
            return secret

        # the key is stored when the first head is signed: after the blocks are made and validated (a
        # refused snapshot leaves no key), before anything is stored (a crash leaves at worst an unused
        # key, never an unowned dataset)
        dataset = Dataset(self.store.child(_folder(did)), HeadSigner(did, kept))
        seed = model.Seed(dataset_id=did, dataset_kind=kind)
        commit = dataset.commit([seed, *events], system_time=system_time, expected_head=None)
        try:  # the name is taken last: a failed creation leaves only an unnamed dataset for `gc`
            self.register_name(name, did)
        except ConflictError:
            raise ConflictError(f"a dataset named {name!r} was created concurrently") from None
        return AddResult(name, did, True, commit)

    def register_name(self, name: str, dataset_id: DatasetId) -> None:
        """Names an existing dataset folder that has no name yet (nothing to do when it already has this
        one). A dataset has one name: RepositoryError when it has another; ConflictError when the name
        was taken by another dataset meanwhile."""
        names = [n.lower() for n in self.names_of(dataset_id)]
        if names:
            if name.lower() in names:
                return
            raise RepositoryError(
                f"{dataset_id} is already in {self.location} as {names[0]!r}; a dataset has one name"
            )
        self.dataset_by_id(dataset_id).store.put(ALIAS_KEY, name.encode())
        key = self._alias_key(name)
        try:
            self.store.compare_and_swap(key, None, str(dataset_id).encode())
        except ConflictError:
            if self._owner(key) == dataset_id:
                return  # named so by a concurrent pull of the same dataset
            raise

    # ----- deleting and renaming -----

    def readers(self, skip: Collection[DatasetId] = ()) -> dict[DatasetId, list[DatasetId]]:
        """Which datasets of the repository read each dataset (by their current SetTransform).

        RepositoryError naming a dataset that cannot be read (then what reads what is unknown), unless it
        is one of `skip` (e.g. the broken datasets being deleted)."""
        out: dict[DatasetId, list[DatasetId]] = {}
        for entry in self.scan():
            if entry.dataset_id in skip:
                continue
            try:
                dataset = self.dataset_of(entry)
                dataset.existing_head()  # a missing head is damage, not an empty dataset
                transform = dataset.state().transform
                inputs = [DatasetId.parse(i.dataset_ref) for i in transform.inputs] if transform else []
            except OdfError as e:
                raise RepositoryError(
                    f"{entry.name} cannot be read, so whether it reads the dataset is unknown: {e}"
                ) from None
            for did in inputs:
                out.setdefault(did, []).append(entry.dataset_id)  # dataset_of: not None
        return out

    def delete(self, refs: Sequence[str], *, recursive: bool = False) -> list[tuple[str, DatasetId]]:
        """Deletes datasets (by name or DID); with `recursive` also every derivative of the repository
        that reads them, directly or not. Returns `(name, did)` of each, in the order deleted.

        Refused (RepositoryError listing them by name) while derivatives outside the set read one of
        them. Derivatives go before their inputs, so no derivative is ever left reading a deleted
        dataset. Every dataset's names are locked first (`_names_locked`: ConflictError, nothing deleted,
        while a rename or delete of one of them runs, or when a name given was renamed meanwhile). Of
        each, the name goes first (compare-and-swap: a name taken meanwhile by another dataset stays),
        then the name the folder records: the folder is then garbage for `odf gc`. A crash in between
        leaves a nameless folder `gc` keeps as a dataset; `odf delete DID` ends it."""
        targets = [self.resolve(ref, damaged=True) for ref in refs]
        readers = self.readers(skip=targets)
        chosen = set(targets)
        if recursive:
            pending = list(targets)
            while pending:
                for reader in readers.get(pending.pop(), []):
                    if reader not in chosen:
                        chosen.add(reader)
                        pending.append(reader)
        for did in targets:
            outside = [r for r in readers.get(did, []) if r not in chosen]
            if outside:
                names = ", ".join(sorted(self._shown_name(r) for r in outside))
                raise RepositoryError(
                    f"{self._shown_name(did)} is read by derivatives: {names} "
                    "(delete them first, or all of them with -r)"
                )
        deleted = []
        remaining = set(chosen)
        with self._names_locked(chosen, "delete"):
            for ref, did in zip(refs, targets, strict=True):  # a rename or delete that ran first wins
                if not ref.startswith("did:") and self._owner(self._alias_key(ref)) != did:
                    raise ConflictError(f"{ref!r} was renamed or deleted meanwhile; nothing was deleted")
            while remaining:  # derivatives before their inputs
                ready = [d for d in remaining if not any(r in remaining for r in readers.get(d, []))]
                for did in sorted(ready or remaining, key=str):
                    deleted.append((self._shown_name(did), did))
                    self._unname(did)
                    remaining.discard(did)
        return deleted

    def _shown_name(self, dataset_id: DatasetId) -> str:
        names = self.names_of(dataset_id)
        return names[0] if names else str(dataset_id)

    def _unname(self, dataset_id: DatasetId) -> None:
        """Takes every name of a dataset away, then the name its folder records (see `delete`)."""
        for name in self.names_of(dataset_id):
            key = self._alias_key(name)
            raw = self.store.get_or_none(key)
            if raw is not None and self._read_alias(key) == dataset_id:
                self.store.compare_and_swap(key, raw, None)
        self.dataset_by_id(dataset_id).store.delete(ALIAS_KEY)

    def rename(self, old: str, new: str) -> DatasetId:
        """Gives a dataset a new name; nothing else changes (derivatives read their inputs by DID).

        Under the dataset's name lock (ConflictError, nothing changed, while another rename or delete
        of it runs, or when `old` was renamed or deleted meanwhile), the new name is taken by
        compare-and-swap (RepositoryError when another dataset has it), recorded in the dataset's
        folder, then the old one is dropped: of two renames, or a rename and a delete, of one dataset
        one wins whole and the other changes nothing. A crash in between leaves both names; running
        the rename again completes it (once the dead rename's lock has expired)."""
        if old.startswith("did:"):
            raise RepositoryError(f"{old!r}: give the name of the dataset to rename")
        did = self.resolve(old, damaged=True)
        old_key, new_key = self._alias_key(old), self._alias_key(new)
        with self._names_locked([did], f"rename {old} to {new}"):
            raw = self.store.get_or_none(old_key)
            if raw is None or self._owner(old_key) != did:
                raise ConflictError(f"{old!r} was renamed or deleted meanwhile; nothing was renamed")
            if new_key != old_key:
                try:
                    self.store.compare_and_swap(new_key, None, raw)
                except ConflictError:
                    if self._owner(new_key) != did:  # else left by an interrupted rename: completed now
                        raise RepositoryError(f"the name {new!r} is taken in {self.location}") from None
            self.dataset_by_id(did).store.put(ALIAS_KEY, new.encode())
            if new_key != old_key:
                self.store.compare_and_swap(old_key, raw, None)
        return did

    def _owner(self, key: str) -> DatasetId | None:
        """The dataset an alias file names now; None when there is no such file."""
        try:
            return self._read_alias(key)
        except ObjectNotFoundError:
            return None

    @contextlib.contextmanager
    def _names_locked(self, dataset_ids: Collection[DatasetId], operation: str) -> Iterator[None]:
        """Holds the name locks of datasets (`info/name-lock` in each folder, taken by compare-and-swap)
        while their names change, so that one rename or delete of a dataset runs at a time: a name is
        two files (the new one taken, the old one dropped), which no single compare-and-swap covers.
        ConflictError naming the holder when another operation has one; nothing is held then. A lock
        older than `NAME_LOCK_LEASE_SECONDS` is of an operation that died: it is taken over."""
        held: list[tuple[ObjectStore, bytes]] = []
        try:
            for did in sorted(set(dataset_ids), key=str):
                held.append(self._lock_names(did, operation))
            yield
        finally:
            for store, raw in reversed(held):
                # taken over after a stall (the new holder's now), or the folder of a deleted dataset
                # being removed by `odf gc`
                with contextlib.suppress(ConflictError, FileNotFoundError):
                    store.compare_and_swap(NAME_LOCK_KEY, raw, None)

    def _lock_names(self, dataset_id: DatasetId, operation: str) -> tuple[ObjectStore, bytes]:
        store = self.dataset_by_id(dataset_id).store
        raw = holder_record(operation=operation, token=uuid.uuid4().hex)
        current = store.get_or_none(NAME_LOCK_KEY)
        if current is not None and record_age(current, time.time()) < NAME_LOCK_LEASE_SECONDS:
            holder = read_record(current) or {}
            raise ConflictError(
                f"{self._shown_name(dataset_id)} is being changed by another operation "
                f"({_shown(str(holder.get('operation')))}, pid {holder.get('pid')} on "
                f"{_shown(str(holder.get('host')))}); nothing was changed, try again"
            )
        try:
            store.compare_and_swap(NAME_LOCK_KEY, current, raw)
        except ConflictError:
            raise ConflictError(
                f"{self._shown_name(dataset_id)} is being changed by another operation; "
                "nothing was changed, try again"
            ) from None
        except FileNotFoundError:  # `odf gc` is removing the folder of a deleted dataset
            raise ConflictError(f"{dataset_id} was deleted meanwhile; nothing was changed") from None
        return store, raw

    # ----- housekeeping -----

    def unnamed_datasets(self, min_age_seconds: float) -> list[Path]:
        """Dataset folders left by failed creations, older than `min_age_seconds`: no name points to
        them, and their `info/alias` records no name or one another dataset holds (they lost a race
        for it). A folder that only lost its alias file is kept: it is a dataset, not garbage.

        RepositoryError when an alias file is damaged (then what is named cannot be known)."""
        if not self.is_local:
            raise RepositoryError(f"{self.location}: garbage collection runs on local repositories only")
        owners = {name.lower(): str(did).removeprefix("did:odf:") for name, did in self.list()}
        datasets = self.root / "datasets"
        if not datasets.is_dir() or datasets.is_symlink():
            return []
        now = time.time()
        out = []
        for p in datasets.iterdir():
            if p.name in owners.values() or p.is_symlink() or not p.is_dir():
                continue
            try:
                recorded = self.name_of(Dataset(self.store.child(f"datasets/{p.name}")))
            except OdfError:  # not even a valid folder name: nothing a dataset could live in
                recorded = "?"
            abandoned = recorded == "?" or owners.get(recorded.lower()) not in (None, p.name)
            if abandoned and now - p.stat().st_mtime >= min_age_seconds:
                out.append(p)
        return out

    def remove_dataset_dir(self, path: Path) -> None:
        if path.parent != self.root / "datasets" or os.path.islink(path):
            raise RepositoryError(f"refusing to remove {path}: not a dataset folder of this repository")
        try:
            shutil.rmtree(path)
        except OSError as e:  # a late rename or delete that lost to the delete touched it: next time
            if e.errno not in (errno.ENOENT, errno.ENOTEMPTY):
                raise


def _folder(dataset_id: DatasetId) -> str:
    """Where a dataset lives in the repository: `datasets/<DID without did:odf:>`."""
    return f"datasets/{str(dataset_id).removeprefix('did:odf:')}"

"""Push and pull between a local repository and remote datasets, with remembered remotes.

A remote dataset is addressed by the URL of its layout root (`s3://bucket/repo/trades`,
`http://host:port/trades`, `file:///srv/odf/trades`). Each local dataset remembers where it was pulled
from and pushed to in `info/remotes`, so a plain `odf pull NAME` / `odf push NAME` repeats the last
sync. Both carry the attestation of the head they transfer; a pull judges it by a signature policy
(`require`, `check`, `ignore`: docs/signatures.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.identity.attestation import DEFAULT_SIGNATURE_POLICY, SignaturePolicy
from airflow_odf.odf.repo.remotes import PULL, PUSH, remember_remote, remotes
from airflow_odf.odf.repo.repository import DatasetNotFoundError, Repository, RepositoryError
from airflow_odf.odf.sharing.sync import (
    DEFAULT_PARALLEL_TRANSFERS,
    SyncError,
    SyncResult,
    full_chain,
    sync,
    transfer,
)
from airflow_odf.odf.storage.store import ConflictError
from airflow_odf.odf.storage.url import StoreCredentials, open_store


@dataclass(frozen=True)
class SharingResult:
    """A sync seen from the local repository: which dataset, which remote, and what moved."""

    direction: str
    dataset: str
    dataset_id: DatasetId
    remote_url: str
    result: SyncResult

    def as_dict(self) -> dict[str, object]:
        """The XCom / `--format json` form, as ingest and transform report."""
        r = self.result
        return {
            "dataset": self.dataset,
            "dataset_id": str(self.dataset_id),
            "remote_url": self.remote_url,
            "direction": self.direction,
            "comparison": r.comparison.value,
            "prev_head": None if r.old_head is None else str(r.old_head),
            "new_head": None if r.new_head is None else str(r.new_head),
            "new_blocks": [str(h) for h in r.new_blocks],
            "objects_transferred": r.objects_transferred,
            "objects_skipped": r.objects_skipped,
            "bytes_transferred": r.bytes_transferred,
            "up_to_date": r.up_to_date,
            "signature": None if r.signature is None else r.signature.as_dict(),
        }


def last_remote(dataset: Dataset, direction: str, name: str) -> str:
    urls = remotes(dataset)[direction]
    if not urls:
        where = "--to URL" if direction == PUSH else "a URL (odf pull URL --as NAME)"
        raise SyncError(f"{name} has no remembered {direction} remote: give {where}")
    return urls[-1]


def push_dataset(
    repo: Repository,
    name: str,
    url: str | None = None,
    *,
    credentials: StoreCredentials | None = None,
    force: bool = False,
    remember: bool = True,
    max_parallel: int = DEFAULT_PARALLEL_TRANSFERS,
    log: Callable[[str], None] = lambda _line: None,
) -> SharingResult:
    """Copies a local dataset to `url` (default: where it was last pushed to)."""
    did = repo.resolve(name)
    local = repo.dataset_by_id(did)
    url = url or last_remote(local, PUSH, name)
    remote = Dataset(open_store(url, credentials=credentials))
    result = sync(
        local, remote, force=force, max_parallel=max_parallel, work_dir=repo.work_dir, log=log, dataset_id=did
    )
    if remember:
        remember_remote(local, PUSH, url)
    return SharingResult(PUSH, name, did, url, result)


def pull_dataset(
    repo: Repository,
    url: str | None = None,
    *,
    name: str | None = None,
    credentials: StoreCredentials | None = None,
    force: bool = False,
    remember: bool = True,
    max_parallel: int = DEFAULT_PARALLEL_TRANSFERS,
    log: Callable[[str], None] = lambda _line: None,
    signatures: SignaturePolicy = DEFAULT_SIGNATURE_POLICY,
) -> SharingResult:
    """Copies the remote dataset at `url` into the repository as `name` (default: the URL's last part).

    `signatures`: what a head without a good attestation does to the pull (`sync.transfer`); a refused
    head leaves the repository as it was (SignatureRefusedError).

    Without `url`, `name` must be a dataset pulled before: it is updated from its remembered remote.
    A new local dataset is created under the remote's own identity (its Seed), then named. A dataset
    has one name: a remote dataset already here under another name is refused (RepositoryError naming
    it) before anything is transferred.
    """
    if url is None:
        if name is None:
            raise SyncError("pull: give the remote dataset's URL or the name of a dataset pulled before")
        url = last_remote(repo.dataset(name), PULL, name)
    name = repo.check_name(name or default_name(url))
    remote = Dataset(open_store(url, credentials=credentials))
    try:
        did = repo.resolve(name)
    except DatasetNotFoundError:
        did = None
    if did is not None:
        local = repo.dataset_by_id(did)
        result = sync(
            remote,
            local,
            force=force,
            max_parallel=max_parallel,
            work_dir=repo.work_dir,
            log=log,
            signatures=signatures,
            dataset_id=did,
        )
    else:
        diff = full_chain(remote)
        seed = diff.blocks[0][2].event
        if not isinstance(seed, model.Seed):
            raise SyncError(f"{url}: the chain does not start with a Seed")
        did = seed.dataset_id
        existing = repo.names_of(did)
        if existing:
            raise RepositoryError(
                f"{url} is {did}, already in this repository as {existing[0]!r}: "
                f"pull it under that name (odf pull {existing[0]}); nothing was changed"
            )
        local = repo.dataset_by_id(did)
        if local.head() is not None:  # known here under another name: update it, then add this name
            result = sync(
                remote, local, force=force, max_parallel=max_parallel, log=log, signatures=signatures
            )
        else:
            result = transfer(remote, local, diff, max_parallel=max_parallel, log=log, signatures=signatures)
        _name(repo, name, did)
    if remember:
        remember_remote(local, PULL, url)
    return SharingResult(PULL, name, did, url, result)


def _name(repo: Repository, name: str, did: DatasetId) -> None:
    try:
        repo.register_name(name, did)
    except ConflictError:
        raise RepositoryError(f"a dataset named {name!r} was created concurrently; pulled as {did}") from None


def default_name(url: str) -> str:
    """`s3://bucket/repo/com.example.trades/` -> `com.example.trades`."""
    return url.rstrip("/").rsplit("/", 1)[-1]

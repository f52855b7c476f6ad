"""Copying a dataset between stores (push and pull) by the Simple Transfer Protocol, verified on arrival.

The source is untrusted: every block is re-hashed against its name, decoded and validated against
the chain rules (before any object is copied), and every data file and checkpoint is hashed and sized
against the block that declares it before the destination accepts it. The destination changes in the
spec's order for stores without transactions: data and checkpoints first (in parallel, skipping what is
already there, so an interrupted transfer resumes without re-sending), then the blocks verbatim, then
`refs/head` by compare-and-swap against the head seen at the start. Until that last step nothing refers
to what was copied; of two racing writers only one moves the head.

The attestation of the head transferred (`attestations/<head>`, and no other) is judged against the
dataset's DID before anything is written, refused as the signature policy says, and when good stored
verbatim after the blocks and before the ref (`chain/head_signature.py`).
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from airflow_odf.odf.chain.dataset import CorruptDatasetError, Dataset, block_key
from airflow_odf.odf.chain.head_signature import HeadSignature, judge_head
from airflow_odf.odf.chain.in_flight import declaring
from airflow_odf.odf.chain.rules import ChainState, apply_block
from airflow_odf.odf.errors import BlockDecodeError, ChainRuleError, OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import decode_block
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.identity.attestation import DEFAULT_SIGNATURE_POLICY, SignaturePolicy, attestation_key
from airflow_odf.odf.storage.store import ConflictError, ObjectNotFoundError, ObjectTooLargeError

_CHUNK = 1 << 20
DEFAULT_PARALLEL_TRANSFERS = 8


class SyncError(OdfError):
    """A transfer that cannot or must not happen; the destination's head did not move."""


class DatasetsDivergedError(SyncError):
    """Both sides have blocks the other lacks: copying would drop history unless forced."""


class DestinationAheadError(SyncError):
    """The destination already has every block of the source and more."""


class TamperedObjectError(SyncError):
    """A block, data file or checkpoint from the source does not match its hash or declared size."""


class SignatureRefusedError(SyncError):
    """The head's attestation is bad, or missing where signatures are required; nothing was written."""


class Comparison(enum.Enum):
    """How the source's chain relates to the destination's."""

    EQUAL = "equal"
    AHEAD = "ahead"  # the source has new blocks on top of the destination's head (or it is empty)
    BEHIND = "behind"  # the destination has new blocks on top of the source's head
    DIVERGED = "diverged"


@dataclass(frozen=True)
class ChainDiff:
    """The outcome of comparing two chains; `blocks` are the source blocks to copy, oldest first."""

    comparison: Comparison
    source_head: Multihash | None
    destination_head: Multihash | None
    blocks: list[tuple[Multihash, bytes, model.MetadataBlock]] = field(default_factory=list)


@dataclass(frozen=True)
class SyncResult:
    """What a push or pull did. `objects_skipped` were already at the destination; `signature`: the
    transferred head's attestation as judged (None when nothing was transferred)."""

    comparison: Comparison
    old_head: Multihash | None
    new_head: Multihash | None
    new_blocks: list[Multihash]
    objects_transferred: int
    objects_skipped: int
    bytes_transferred: int
    signature: HeadSignature | None = None

    @property
    def up_to_date(self) -> bool:
        return not self.new_blocks and self.old_head == self.new_head


def _received_block(source: Dataset, h: Multihash) -> tuple[bytes, model.MetadataBlock]:
    try:
        raw = source.block_bytes(h, verify=True)
    except CorruptDatasetError as e:
        raise TamperedObjectError(f"source {source.store!r}: {e}") from None
    try:
        return raw, decode_block(raw)
    except BlockDecodeError as e:
        raise TamperedObjectError(f"source {source.store!r}: block {h} cannot be decoded: {e}") from None


def _walk(dataset: Dataset, head: Multihash | None) -> Iterator[tuple[Multihash, bytes, model.MetadataBlock]]:
    h = head
    while h is not None:
        raw, block = _received_block(dataset, h)
        yield h, raw, block
        h = block.prev_block_hash


def compare_chains(source: Dataset, destination: Dataset) -> ChainDiff:
    """Walks the source back only as far as the destination's head (by sequence number)."""
    src_head, dst_head = source.head(), destination.head()
    if src_head == dst_head:
        return ChainDiff(Comparison.EQUAL, src_head, dst_head)
    if dst_head is None:
        return ChainDiff(Comparison.AHEAD, src_head, dst_head, list(reversed(list(_walk(source, src_head)))))
    dst_seq = destination.block(dst_head).sequence_number
    if src_head is None:
        return ChainDiff(Comparison.BEHIND, src_head, dst_head)
    newer: list[tuple[Multihash, bytes, model.MetadataBlock]] = []
    src_seq = -1
    for h, raw, block in _walk(source, src_head):
        src_seq = max(src_seq, block.sequence_number)  # the first block walked: the source's head
        if block.sequence_number < dst_seq:
            break
        if block.sequence_number == dst_seq:
            if h == dst_head:
                return ChainDiff(Comparison.AHEAD, src_head, dst_head, list(reversed(newer)))
            break
        newer.append((h, raw, block))
    if src_seq < dst_seq:  # a shorter source chain: is its head in the destination's?
        for h, block in destination.iter_blocks(dst_head):
            if block.sequence_number == src_seq:
                if h == src_head:
                    return ChainDiff(Comparison.BEHIND, src_head, dst_head)
                break
    return ChainDiff(Comparison.DIVERGED, src_head, dst_head)


@dataclass(frozen=True)
class _Object:
    key: str
    physical_hash: Multihash
    size: int
    block: Multihash


def objects_of(blocks: list[tuple[Multihash, bytes, model.MetadataBlock]]) -> list[_Object]:
    """The data files and checkpoints the given blocks declare, each once."""
    seen: dict[str, _Object] = {}
    for h, _raw, block in blocks:
        event = block.event
        if not isinstance(event, model.AddData | model.ExecuteTransform):
            continue
        if event.new_data is not None:
            key = f"data/{event.new_data.physical_hash}"
            seen.setdefault(key, _Object(key, event.new_data.physical_hash, event.new_data.size, h))
        if event.new_checkpoint is not None:
            key = f"checkpoints/{event.new_checkpoint.physical_hash}"
            seen.setdefault(
                key, _Object(key, event.new_checkpoint.physical_hash, event.new_checkpoint.size, h)
            )
    return list(seen.values())


def _copy_hashing(source: Path, target: Path) -> tuple[Multihash, int]:
    """One pass: copy and hash together (the file is read once)."""
    digest = hashlib.sha3_256()
    size = 0
    with open(source, "rb") as src, open(target, "wb") as dst:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            dst.write(chunk)
            size += len(chunk)
    return Multihash(0x16, digest.digest()), size


def _hash_file(path: Path) -> tuple[Multihash, int]:
    digest = hashlib.sha3_256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return Multihash(0x16, digest.digest()), size


class _Transfer:
    """Moves one object from source to destination through a local staging file, checking it first."""

    def __init__(self, source: Dataset, destination: Dataset, staging: Path) -> None:
        self.source = source
        self.destination = destination
        self.staging = staging

    def __call__(self, obj: _Object) -> int:
        staged = self.staging / obj.key.replace("/", "-")
        try:
            local = self.source.store.local_path(obj.key)
            if local is not None:
                if not local.is_file():
                    raise self._missing(obj)
                actual, size = _copy_hashing(local, staged)
            else:
                try:
                    self.source.store.get_file(obj.key, staged, max_bytes=obj.size)
                except ObjectNotFoundError:
                    raise self._missing(obj) from None
                except ObjectTooLargeError as e:
                    raise TamperedObjectError(
                        f"source {self.source.store!r}: {obj.key} has more than the {obj.size} bytes block "
                        f"{obj.block} declares ({e}); nothing was changed at the destination's head"
                    ) from None
                actual, size = _hash_file(staged)
            if size != obj.size:
                raise TamperedObjectError(
                    f"source {self.source.store!r}: {obj.key} has {size} bytes, "
                    f"block {obj.block} declares {obj.size}; nothing was changed at the destination's head"
                )
            if actual != obj.physical_hash:
                raise TamperedObjectError(
                    f"source {self.source.store!r}: {obj.key} hashes to {actual}, block {obj.block} "
                    f"declares {obj.physical_hash}; nothing was changed at the destination's head"
                )
            self.destination.store.put_file(obj.key, staged, move=True)
            return size
        finally:
            staged.unlink(missing_ok=True)

    def _missing(self, obj: _Object) -> SyncError:
        return SyncError(
            f"source {self.source.store!r}: {obj.key} (declared by block {obj.block}) is missing"
        )


def _check_chain_rules(source: Dataset, destination: Dataset, diff: ChainDiff, replace: bool) -> None:
    """The received blocks must extend the destination's chain (or, replacing it, make a chain from a
    Seed) by the chain rules: checked before anything is written."""
    empty = replace or diff.destination_head is None  # then nothing is read (or cached) there
    state = ChainState() if empty else destination.state()
    if not empty and state.head != diff.destination_head:  # moved since the chains were compared
        raise ConflictError(f"head is {state.head}, expected {diff.destination_head}")
    try:
        for h, _raw, block in diff.blocks:
            state = apply_block(state, block, h)
    except ChainRuleError as e:
        raise TamperedObjectError(f"source {source.store!r}: its blocks break the chain rules: {e}") from None


def _check_same_dataset(
    blocks: list[tuple[Multihash, bytes, model.MetadataBlock]], destination: Dataset
) -> None:
    """Forcing replaces a history, never a dataset: both Seeds must name the same dataset."""
    seed = blocks[0][2].event if blocks else None
    ours = destination.state().dataset_id
    theirs = seed.dataset_id if isinstance(seed, model.Seed) else None
    if ours is not None and theirs != ours:
        raise SyncError(
            f"the destination holds another dataset ({ours}, the source is {theirs}); not replaced"
        )


def _run_bounded(copy: _Transfer, objects: list[_Object], max_parallel: int) -> list[int]:
    """At most `max_parallel` transfers at once; the first failure cancels those not started."""
    pool = ThreadPoolExecutor(max_workers=max(1, max_parallel), thread_name_prefix="odf-sync")
    futures = [pool.submit(copy, o) for o in objects]
    try:
        for future in as_completed(futures):
            future.result()
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [f.result() for f in futures]


STALE_STAGING_SECONDS = 3600


def _staging_dir(destination: Dataset, work_dir: Path | None) -> Path:
    """Next to the destination when it is local (the final move is a rename), else in `work_dir`.
    Staging folders that a killed sync left there over an hour ago are removed on the way."""
    local = destination.store.local_path("refs")
    base = local.parent if local is not None else work_dir
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
        now = time.time()
        for entry in base.glob(".sync-*"):
            with contextlib.suppress(OSError):
                if entry.is_dir() and now - entry.stat().st_mtime > STALE_STAGING_SECONDS:
                    shutil.rmtree(entry, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=".sync-", dir=base))


def sync(
    source: Dataset,
    destination: Dataset,
    *,
    force: bool = False,
    max_parallel: int = DEFAULT_PARALLEL_TRANSFERS,
    work_dir: Path | None = None,
    log: Callable[[str], None] = lambda _line: None,
    signatures: SignaturePolicy = DEFAULT_SIGNATURE_POLICY,
    dataset_id: DatasetId | None = None,
) -> SyncResult:
    """Makes `destination` hold the source's chain: missing objects, then blocks, the head's
    attestation, then the head (CAS).

    An equal chain is a no-op. A destination ahead of the source, or one whose history diverged from
    it, is refused unless `force` (then the destination's head is replaced by the source's: its own
    newer blocks leave the chain). `signatures` and `dataset_id`: see `transfer`.
    """
    diff = compare_chains(source, destination)
    if diff.comparison is not Comparison.EQUAL and diff.comparison is not Comparison.AHEAD:
        if not force:
            error = DestinationAheadError if diff.comparison is Comparison.BEHIND else DatasetsDivergedError
            what = (
                "the destination is ahead of the source"
                if diff.comparison is Comparison.BEHIND
                else "the histories diverged"
            )
            raise error(
                f"{what} (source head {diff.source_head}, destination head {diff.destination_head}); "
                "nothing was transferred (use force to replace the destination's head)"
            )
        # forced: the whole source chain, verified from its Seed, takes the destination's place
        blocks = list(reversed(list(_walk(source, diff.source_head))))
        _check_same_dataset(blocks, destination)
        diff = ChainDiff(diff.comparison, diff.source_head, diff.destination_head, blocks)
    return transfer(
        source,
        destination,
        diff,
        max_parallel=max_parallel,
        work_dir=work_dir,
        log=log,
        signatures=signatures,
        dataset_id=dataset_id,
    )


def full_chain(source: Dataset) -> ChainDiff:
    """The whole source chain (verified), to copy into a destination that does not exist yet."""
    head = source.head()
    if head is None:
        raise SyncError(f"source {source.store!r} has no dataset (no refs/head)")
    return ChainDiff(Comparison.AHEAD, head, None, list(reversed(list(_walk(source, head)))))


def _lost_race(
    destination: Dataset, diff: ChainDiff, conflict: ConflictError, counts: tuple[int, int, int]
) -> SyncResult:
    """Another writer moved the destination's head first. When it moved it to the head this transfer
    was bringing, the destination holds what was asked: up to date. Otherwise a clear conflict."""
    head = destination.head()
    if head == diff.source_head:
        return SyncResult(Comparison.EQUAL, head, head, [], *counts)
    raise ConflictError(
        f"the destination's head moved to {head} while transferring {diff.source_head} ({conflict}); "
        "this transfer did not change it — run again"
    ) from None


def _judge_head(
    source: Dataset,
    destination: Dataset,
    diff: ChainDiff,
    policy: SignaturePolicy,
    dataset_id: DatasetId | None,
    log: Callable[[str], None],
) -> HeadSignature:
    """The attestation of the head `diff` brings, judged before anything is written: refused
    (SignatureRefusedError) as `policy` says, noted in `log` when missing or (under `ignore`) bad."""
    head, _raw, block = diff.blocks[-1]
    seed = diff.blocks[0][2].event
    if isinstance(seed, model.Seed):
        dataset_id = seed.dataset_id  # the chain's own (a copied chain of another DID names the wrong one)
    elif dataset_id is None:
        dataset_id = destination.state().dataset_id
    if dataset_id is None:
        raise SyncError(f"the destination {destination.store!r} has no Seed: whose head this is is unknown")
    signature = judge_head(source.store, dataset_id, head, block)
    reason = signature.refusal(policy)
    if reason is not None:
        raise SignatureRefusedError(
            f"{dataset_id}: head {head} from {source.store!r} refused: {reason}; "
            f"nothing was written (signature policy {policy})"
        )
    if signature.status == "missing":
        log(f"note: {dataset_id}: head {head} carries no attestation, so who published it is unknown")
    elif signature.status == "bad":
        log(f"note: {dataset_id}: {signature.describe()}: ignored, not copied (signature policy ignore)")
    return signature


def transfer(
    source: Dataset,
    destination: Dataset,
    diff: ChainDiff,
    *,
    max_parallel: int = DEFAULT_PARALLEL_TRANSFERS,
    work_dir: Path | None = None,
    log: Callable[[str], None] = lambda _line: None,
    signatures: SignaturePolicy = DEFAULT_SIGNATURE_POLICY,
    dataset_id: DatasetId | None = None,
) -> SyncResult:
    """Copies the blocks of `diff` and their objects, then the new head's attestation, then moves the
    head from `diff.destination_head`.

    `signatures`: `check` refuses a head whose attestation is bad (another key, dataset or head, a
    damaged one), `require` also one without any, `ignore` refuses nothing (a bad one is not copied);
    judged before anything is written. `dataset_id`: the dataset's DID as the caller knows it (else the
    Seed's, or the destination's)."""
    if diff.comparison is Comparison.EQUAL:
        return SyncResult(diff.comparison, diff.destination_head, diff.destination_head, [], 0, 0, 0)
    signature = _judge_head(source, destination, diff, signatures, dataset_id, log)
    attestation = signature.attestation
    objects = objects_of(diff.blocks)
    # declared before the destination is asked what it has: `odf gc` keeps what is there (see in_flight)
    declared = [*(o.key for o in objects), *(block_key(h) for h, _raw, _b in diff.blocks)]
    if attestation is not None:
        declared.append(attestation_key(signature.head))
    with declaring(destination.store, declared) as intent:
        with ThreadPoolExecutor(max_workers=max(1, max_parallel)) as pool:  # a request each on S3/HTTP
            present = list(pool.map(lambda o: destination.store.exists(o.key), objects))
        missing = [o for o, here in zip(objects, present, strict=True) if not here]
        log(
            f"{len(diff.blocks)} block(s), {len(missing)} of {len(objects)} object(s) to transfer "
            f"({sum(o.size for o in missing)} bytes)"
        )
        replace = diff.comparison is not Comparison.AHEAD
        try:
            _check_chain_rules(source, destination, diff, replace)
        except ConflictError as e:
            return _lost_race(destination, diff, e, (0, len(objects) - len(missing), 0))
        staging = _staging_dir(destination, work_dir)
        try:
            copy = _Transfer(source, destination, staging)
            sizes = _run_bounded(copy, missing, max_parallel)
            intent.settle(
                [o.key for o in objects],
                lambda lost: _run_bounded(copy, [o for o in objects if o.key in lost], max_parallel),
            )
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        try:
            commit = destination.append_block_bytes(
                [raw for _h, raw, _b in diff.blocks],
                expected_head=diff.destination_head,
                replace=replace,
                intent=intent,
                attestation=attestation,
            )
        except ChainRuleError as e:
            raise TamperedObjectError(
                f"source {source.store!r}: its blocks break the chain rules: {e}"
            ) from None
        except ConflictError as e:
            return _lost_race(destination, diff, e, (len(missing), len(objects) - len(missing), sum(sizes)))
    return SyncResult(
        diff.comparison,
        diff.destination_head,
        commit.new_head,
        commit.new_blocks,
        len(missing),
        len(objects) - len(missing),
        sum(sizes),
        signature,
    )

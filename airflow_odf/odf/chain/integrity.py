"""Integrity verification of a dataset, and collection of objects nothing refers to.

Verification trusts nothing stored: every block is re-hashed and decoded, the chain rules are
re-checked from the Seed, every data file and checkpoint is checked for size and physical hash, and
the summary is compared with the state folded from the chain. Each problem names the block or object
it concerns. A check may start after a head verified earlier (`chain/verification.py`): then only the
newer blocks and their objects are checked. Collection deletes nothing of a dataset whose chain cannot
be followed from its head.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from airflow_odf.odf.chain.dataset import HEAD_REF, STAGING_PREFIX, Dataset, block_key
from airflow_odf.odf.chain.in_flight import collecting, declared_keys
from airflow_odf.odf.chain.rules import ChainState, apply_block
from airflow_odf.odf.chain.summary import SUMMARY_KEY, state_to_json
from airflow_odf.odf.errors import BlockDecodeError, ChainRuleError, OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import block_hash, decode_block
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.identity.attestation import ATTESTATIONS_PREFIX

_CHUNK = 1 << 20
#: A temporary file younger than this may be a write in progress (a ref, a name, a record), whatever
#: `--min-age`; a commit's big uploads are covered by its declaration instead.
TEMPORARY_GRACE_SECONDS = 60.0
#: The folders of a dataset whose unreferenced objects `collect_garbage` deletes.
_COLLECTED = ("blocks", "data", "checkpoints", ATTESTATIONS_PREFIX)


@dataclass(frozen=True)
class IntegrityProblem:
    """`kind` is head, block, chain, data, checkpoint or summary; `ref` the hash or key concerned."""

    kind: str
    ref: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind} {self.ref}: {self.message}"


def _physical_hash(dataset: Dataset, key: str) -> Multihash:
    path = dataset.store.local_path(key)
    digest = hashlib.sha3_256()
    if path is not None:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    else:
        digest.update(dataset.store.get(key))
    return Multihash(0x16, digest.digest())


def _check_object(
    dataset: Dataset, kind: str, h: Multihash, size: int, block: Multihash
) -> list[IntegrityProblem]:
    key = f"{'data' if kind == 'data' else 'checkpoints'}/{h}"
    try:
        if not dataset.store.exists(key):
            return [IntegrityProblem(kind, key, f"missing (referenced by block {block})")]
        actual_size = dataset.store.size(key)
        if actual_size != size:
            return [IntegrityProblem(kind, key, f"has {actual_size} bytes, block {block} says {size}")]
        actual = _physical_hash(dataset, key)
    except (OSError, OdfError) as e:  # e.g. a link out of the repository
        return [IntegrityProblem(kind, key, f"cannot be read: {e}")]
    if actual != h:
        return [IntegrityProblem(kind, key, f"content hashes to {actual}, expected {h} (tampered)")]
    return []


def _walk(
    dataset: Dataset, since: ChainState | None = None
) -> tuple[Multihash | None, list[tuple[Multihash, model.MetadataBlock]], list[IntegrityProblem], bool]:
    """`(head, chain, problems, reached)`: the chain from the head back to `since.head` (exclusive) or the
    Seed, oldest first, re-hashing every block; it stops where the chain cannot be followed. With
    `since`, it walks no further than the sequence numbers between it and the head; `reached` says
    whether `since.head` was found there (it is an ancestor of the head)."""
    try:
        head = h = dataset.existing_head()
    except OdfError as e:
        return None, [], [IntegrityProblem("head", HEAD_REF, str(e))], False
    chain, problems, seen = [], [], set()
    reached = since is None
    while h is not None and h not in seen:  # a tampered block may name itself as the previous one
        if since is not None:
            if h == since.head:
                reached = True
                break
            if chain and len(chain) >= chain[0][1].sequence_number - since.sequence_number:
                break  # past the verified head's sequence number without meeting it
        seen.add(h)
        try:
            raw = dataset.store.get_or_none(block_key(h))
        except OdfError as e:
            problems.append(IntegrityProblem("block", str(h), f"cannot be read: {e}"))
            break
        if raw is None:
            problems.append(IntegrityProblem("block", str(h), "missing"))
            break
        if block_hash(raw) != h:
            problems.append(IntegrityProblem("block", str(h), f"bytes hash to {block_hash(raw)} (tampered)"))
        try:
            block = decode_block(raw)
        except BlockDecodeError as e:
            problems.append(IntegrityProblem("block", str(h), f"cannot be decoded: {e}"))
            break
        chain.append((h, block))
        h = block.prev_block_hash
    chain.reverse()
    return head, chain, problems, reached


@dataclass(frozen=True)
class IntegrityCheck:
    """What `check_integrity` looked at and found: the blocks after `since` (None: from the Seed) up to
    `head`, oldest first; `base_state` the dataset at `since`, `state` at `head` (meaningful only
    without problems); `objects_checked` the data files and checkpoints re-hashed."""

    head: Multihash | None
    since: Multihash | None
    base_state: ChainState
    blocks: list[tuple[Multihash, model.MetadataBlock]]
    state: ChainState
    objects_checked: int
    problems: list[IntegrityProblem]


def verify_integrity(dataset: Dataset) -> list[IntegrityProblem]:
    """Every problem found in the whole dataset; an empty list means the dataset is intact."""
    return check_integrity(dataset).problems


def check_integrity(dataset: Dataset, since: ChainState | None = None) -> IntegrityCheck:
    """Checks the blocks after `since` (a state verified earlier) and their objects, or the whole dataset.

    The chain rules are applied from `since` on, so they hold from the Seed as long as the chain up to
    `since.head` is unchanged. When `since.head` is no longer an ancestor of the head (a reset, a
    compaction, a diverged pull), the whole dataset is checked and `since` of the result is None.
    """
    head, chain, problems, reached = _walk(dataset, since)
    if since is not None and not reached and not problems:
        return check_integrity(dataset)
    base = since if since is not None else ChainState()
    summary = None if problems else dataset.recorded_summary()
    state = base
    if summary is not None and since is not None and summary.head == since.head:
        problems += _compare_summary(dataset, summary, state)
    for h, block in chain:
        try:
            state = apply_block(state, block, h)
        except ChainRuleError as e:
            problems.append(IntegrityProblem("chain", str(h), f"sequence {block.sequence_number}: {e}"))
            break
        if summary is not None and summary.head == h:
            problems += _compare_summary(dataset, summary, state)
    objects = 0
    for h, block in chain:
        event = block.event
        if isinstance(event, (model.AddData, model.ExecuteTransform)):
            if event.new_data is not None:
                objects += 1
                problems += _check_object(
                    dataset, "data", event.new_data.physical_hash, event.new_data.size, h
                )
            if event.new_checkpoint is not None:
                objects += 1
                cp = event.new_checkpoint
                problems += _check_object(dataset, "checkpoint", cp.physical_hash, cp.size, h)
    return IntegrityCheck(head, None if since is None else since.head, base, chain, state, objects, problems)


def _compare_summary(dataset: Dataset, summary: ChainState, state: ChainState) -> list[IntegrityProblem]:
    """The summary's digest is not keyed (anyone who can write the file can recompute it): a summary
    readers would trust must equal the state folded from the chain at its head. One that does not is
    deleted, so that readers rebuild it from the chain."""
    recorded, actual = json.loads(state_to_json(summary)), json.loads(state_to_json(state))
    fields = [k for k in actual if k != "digest" and recorded.get(k) != actual[k]]
    if not fields:
        return []
    dataset.store.delete(SUMMARY_KEY)
    return [
        IntegrityProblem(
            "summary",
            SUMMARY_KEY,
            f"disagrees with the chain at block {state.head} on {', '.join(fields)} "
            "(tampered; removed, it is rebuilt from the chain)",
        )
    ]


def reachable_keys(dataset: Dataset, head: Multihash | None = None) -> set[str]:
    """The blocks, data and checkpoints the chain of `head` (default: the dataset's head) references."""
    keys = set()
    for h, block in dataset.iter_blocks(head if head is not None else dataset.existing_head()):
        keys.add(block_key(h))
        event = block.event
        if isinstance(event, (model.AddData, model.ExecuteTransform)):
            if event.new_data is not None:
                keys.add(f"data/{event.new_data.physical_hash}")
            if event.new_checkpoint is not None:
                keys.add(f"checkpoints/{event.new_checkpoint.physical_hash}")
    return keys


def _kept(dataset: Dataset, head: Multihash) -> set[str]:
    """What collection keeps for `head`: what its chain references, and the attestations of the blocks
    of that chain (the head's, and those a reset back to an earlier block would need again)."""
    keys = reachable_keys(dataset, head)
    return keys | {
        f"{ATTESTATIONS_PREFIX}/{k.removeprefix('blocks/')}" for k in keys if k.startswith("blocks/")
    }


def collect_garbage(dataset: Dataset, min_age_seconds: float = 3600) -> list[str]:
    """Deletes blocks, data, checkpoints and head attestations unreachable from the head (attestations:
    of blocks no longer in its chain) and older than `min_age_seconds`, and what failed or killed
    operations left in the engine's staging area (`cache/operations/`, in a bucket the engine writes
    itself).

    Never what the head or a commit in progress references, whatever `min_age_seconds`: candidates are
    listed first, then the dataset is marked as being collected, then the commits in flight are read
    (their declarations) and the head again (it may have moved), and only what none of them references
    is deleted; a commit that started after that reading sees the mark and stores again what it re-uses
    (`chain/in_flight.py`). The age guard is for what no declaration covers: an operation's objects
    staged before its commit starts (an object store has no locks to tell a live operation: age is the
    rule, so `min_age_seconds` must exceed the longest operation). A dataset whose head cannot be read
    (or is missing) or whose chain cannot be followed to its Seed raises CorruptDatasetError before
    anything is deleted: what it references cannot be known. Links are removed, never followed.
    """
    head = dataset.existing_head()
    keep = _kept(dataset, head)
    # resolved first: a folder that is a link out of the repository stops the collection here
    directories = {p: dataset.store.local_path(p) for p in (*_COLLECTED, "refs", "info")}
    now = time.time()
    temporary = [  # leftovers of interrupted writes (a write in progress takes less than the grace)
        (f"{prefix}/{tmp.name}", tmp)
        for prefix, directory in directories.items()
        if directory is not None and directory.is_dir()
        for tmp in directory.glob(".tmp-*")
        if _old_file(tmp, now, max(min_age_seconds, TEMPORARY_GRACE_SECONDS))
    ]
    candidates = [key for key in _old_keys(dataset, directories, now, min_age_seconds) if key not in keep]
    if not candidates and not temporary:
        return []
    removed = []
    with collecting(dataset.store) as mark:
        declared, commits = declared_keys(dataset.store, min_age_seconds)  # the declarations, then the head
        current = dataset.existing_head()
        if current != head:
            keep |= _kept(dataset, current)
        for key in candidates:
            if key not in keep and key not in declared:
                mark.refresh()
                dataset.store.delete(key)
                removed.append(key)
        if not commits:  # a commit in flight may be writing one of them
            for key, tmp in temporary:
                tmp.unlink(missing_ok=True)
                removed.append(key)
    return removed


def _old_keys(
    dataset: Dataset, directories: dict[str, Path | None], now: float, min_age_seconds: float
) -> list[str]:
    """Blocks, data, checkpoints, attestations and staged objects at least `min_age_seconds` old."""
    old = []
    for prefix in _COLLECTED:
        directory = directories[prefix]
        if directory is None:  # a bucket: the store tells each object's age (a read-only store: none)
            aged = dataset.store.list_tree(prefix)
            old += [key for key, modified in aged if now - modified >= min_age_seconds]
        else:
            old += [
                key
                for key in dataset.store.list(prefix)
                if _old_file(directory / key.removeprefix(f"{prefix}/"), now, min_age_seconds)
            ]
    old += [
        key for key, modified in dataset.store.list_tree(STAGING_PREFIX) if now - modified >= min_age_seconds
    ]
    return old


def _old_file(path: os.PathLike[str], now: float, min_age_seconds: float) -> bool:
    """A file or link (not followed) at least `min_age_seconds` old."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return not stat.S_ISDIR(info.st_mode) and now - info.st_mtime >= min_age_seconds

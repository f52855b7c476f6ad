"""Integrity verification of a dataset, and collection of objects nothing refers to.

Verification trusts nothing stored: every block is re-hashed and decoded, the chain rules are
re-checked from the Seed, every data file and checkpoint is checked for size and physical hash, and
the summary is compared with the state folded from the chain. Each problem names the block or object
it concerns. Collection deletes nothing of a dataset whose chain cannot be followed from its head.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass

from airflow_odf.odf.chain.dataset import HEAD_REF, Dataset, block_key
from airflow_odf.odf.chain.rules import ChainState, apply_block
from airflow_odf.odf.chain.summary import SUMMARY_KEY, state_to_json
from airflow_odf.odf.errors import BlockDecodeError, ChainRuleError, OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import block_hash, decode_block
from airflow_odf.odf.format.multiformats import Multihash

_CHUNK = 1 << 20


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


def _walk(dataset: Dataset) -> tuple[list[tuple[Multihash, model.MetadataBlock]], list[IntegrityProblem]]:
    """The chain from head to Seed, re-hashing every block; stops where the chain cannot be followed."""
    try:
        h: Multihash | None = dataset.existing_head()
    except OdfError as e:
        return [], [IntegrityProblem("head", HEAD_REF, str(e))]
    chain, problems, seen = [], [], set()
    while h is not None and h not in seen:  # a tampered block may name itself as the previous one
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
    return chain, problems


def verify_integrity(dataset: Dataset) -> list[IntegrityProblem]:
    """Every problem found; an empty list means the dataset is intact."""
    chain, problems = _walk(dataset)
    summary = None if problems else dataset.recorded_summary()
    state = ChainState()
    for h, block in chain:
        try:
            state = apply_block(state, block, h)
        except ChainRuleError as e:
            problems.append(IntegrityProblem("chain", str(h), f"sequence {block.sequence_number}: {e}"))
            break
        if summary is not None and summary.head == h:
            problems += _compare_summary(dataset, summary, state)
    for h, block in chain:
        event = block.event
        if isinstance(event, (model.AddData, model.ExecuteTransform)):
            if event.new_data is not None:
                problems += _check_object(
                    dataset, "data", event.new_data.physical_hash, event.new_data.size, h
                )
            if event.new_checkpoint is not None:
                cp = event.new_checkpoint
                problems += _check_object(dataset, "checkpoint", cp.physical_hash, cp.size, h)
    return problems


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


def reachable_keys(dataset: Dataset) -> set[str]:
    keys = set()
    for h, block in dataset.iter_blocks(dataset.existing_head()):
        keys.add(block_key(h))
        event = block.event
        if isinstance(event, (model.AddData, model.ExecuteTransform)):
            if event.new_data is not None:
                keys.add(f"data/{event.new_data.physical_hash}")
            if event.new_checkpoint is not None:
                keys.add(f"checkpoints/{event.new_checkpoint.physical_hash}")
    return keys


def collect_garbage(dataset: Dataset, min_age_seconds: float = 3600) -> list[str]:
    """Deletes blocks, data and checkpoints unreachable from the head and older than `min_age_seconds`.

    The age guard protects a commit in progress, whose objects land before its head moves. A dataset
    whose head cannot be read (or is missing) or whose chain cannot be followed to its Seed raises
    CorruptDatasetError before anything is deleted: what it references cannot be known. Links are
    removed, never followed.
    """
    keep = reachable_keys(dataset)
    # resolved first: a folder that is a link out of the repository stops the collection here
    directories = {p: dataset.store.local_path(p) for p in ("blocks", "data", "checkpoints", "refs", "info")}
    now = time.time()
    removed = []
    for prefix, directory in directories.items():  # leftovers of interrupted writes
        if directory is not None and directory.is_dir():
            for tmp in directory.glob(".tmp-*"):
                if _old_file(tmp, now, min_age_seconds):
                    tmp.unlink(missing_ok=True)
                    removed.append(f"{prefix}/{tmp.name}")
    for prefix in ("blocks", "data", "checkpoints"):
        for key in list(dataset.store.list(prefix)):
            if key in keep or directories[prefix] is None:
                continue
            if _old_file(directories[prefix] / key.removeprefix(f"{prefix}/"), now, min_age_seconds):
                dataset.store.delete(key)
                removed.append(key)
    return removed


def _old_file(path: os.PathLike[str], now: float, min_age_seconds: float) -> bool:
    """A file or link (not followed) at least `min_age_seconds` old."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return not stat.S_ISDIR(info.st_mode) and now - info.st_mtime >= min_age_seconds

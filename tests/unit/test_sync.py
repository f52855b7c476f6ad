"""Copying datasets between local stores: comparison, verification on arrival, order of writes,
refusals, forcing, and resuming an interrupted transfer. The same engine runs against S3 and HTTP in
tests/sharing."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from airflow_odf.odf.chain.dataset import Dataset, StagedObject
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import block_hash, encode_block
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.sharing.sync import (
    Comparison,
    DatasetsDivergedError,
    DestinationAheadError,
    SyncError,
    TamperedObjectError,
    compare_chains,
    sync,
)
from airflow_odf.odf.storage.local import LocalObjectStore
from tests.unit.test_dataset import (
    SCHEMA,
    SEED,
    T0,
    T1,
    add_data,
    data_file,
    files,
    open_dataset,
    rich_dataset,
)


def grow(dataset: Dataset, staging: Path, n: int, tag: str) -> None:
    """`n` more AddData blocks, each with its own data file."""
    for i in range(n):
        path, ph = data_file(staging, f"{tag} {i} ".encode() * 50, f"{tag}{i}")
        event = add_data(
            dataset.state(), ph, path.stat().st_size, 5, watermark=Timestamp(T1.seconds + 100 + i)
        )
        event = dataclasses.replace(event, new_checkpoint=None)
        dataset.commit([event], system_time=T1, objects=[StagedObject(f"data/{ph}", path)])


def same_dataset(a: Path, b: Path) -> None:
    for sub in ("blocks", "data", "checkpoints"):
        assert files(a, sub) == files(b, sub), sub
    assert (a / "refs/head").read_bytes() == (b / "refs/head").read_bytes()


@pytest.fixture
def source(tmp_path: Path) -> Dataset:
    return rich_dataset(tmp_path / "src", tmp_path)


def test_copy_into_an_empty_destination_is_verbatim(tmp_path: Path, source: Dataset) -> None:
    dst = open_dataset(tmp_path / "dst")
    result = sync(source, dst)
    assert result.comparison is Comparison.AHEAD and result.old_head is None
    assert result.new_head == source.head()
    assert result.new_blocks == [h for h, _ in reversed(list(source.iter_blocks()))]
    assert result.objects_transferred == 6 and result.objects_skipped == 0
    same_dataset(tmp_path / "src", tmp_path / "dst")
    assert verify_integrity(dst) == []
    assert dst.state() == source.state()
    assert not [p for p in (tmp_path / "dst").iterdir() if p.name.startswith(".sync-")]


def test_equal_chains_transfer_nothing_and_new_blocks_only_what_is_new(
    tmp_path: Path, source: Dataset
) -> None:
    dst = open_dataset(tmp_path / "dst")
    sync(source, dst)
    again = sync(source, dst)
    assert again.comparison is Comparison.EQUAL and again.up_to_date and again.objects_transferred == 0
    old = dst.head()
    grow(source, tmp_path / "more", 2, "m")
    result = sync(source, dst)
    assert result.comparison is Comparison.AHEAD and result.old_head == old
    assert len(result.new_blocks) == 2 and result.objects_transferred == 2 and result.objects_skipped == 0
    same_dataset(tmp_path / "src", tmp_path / "dst")


def test_tampered_data_is_rejected_and_the_head_does_not_move(tmp_path: Path, source: Dataset) -> None:
    dst = open_dataset(tmp_path / "dst")
    sync(source, dst)
    old = dst.head()
    grow(source, tmp_path / "more", 1, "t")
    new_data = next(source.iter_blocks())[1].event.new_data
    victim = tmp_path / "src" / "data" / str(new_data.physical_hash)
    victim.write_bytes(victim.read_bytes()[:-1] + b"X")
    with pytest.raises(TamperedObjectError, match=f"data/{new_data.physical_hash} hashes to"):
        sync(source, dst)
    assert dst.head() == old
    assert not (tmp_path / "dst" / "data" / str(new_data.physical_hash)).exists()


def test_a_truncated_object_is_named_with_its_size(tmp_path: Path, source: Dataset) -> None:
    block_data = next(source.iter_blocks())[1].event.new_data
    victim = tmp_path / "src" / "data" / str(block_data.physical_hash)
    victim.write_bytes(victim.read_bytes()[:3])
    dst = open_dataset(tmp_path / "dst")
    with pytest.raises(TamperedObjectError, match=f"has 3 bytes, block .* declares {block_data.size}"):
        sync(source, dst)
    assert dst.head() is None


def test_a_tampered_block_is_rejected(tmp_path: Path, source: Dataset) -> None:
    h, _ = list(source.iter_blocks())[2]
    path = tmp_path / "src" / "blocks" / str(h)
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF
    path.write_bytes(bytes(raw))
    dst = open_dataset(tmp_path / "dst")
    with pytest.raises(TamperedObjectError, match=f"block {h} is corrupt"):
        sync(source, dst)
    assert dst.head() is None and files(tmp_path / "dst", "blocks") == {}


def test_blocks_breaking_the_chain_rules_are_refused_before_any_object_moves(tmp_path: Path) -> None:
    """Each block hashes right, but the AddData claims earlier data that never was (prevOffset 99)."""
    source = open_dataset(tmp_path / "src")
    source.commit([SEED, SCHEMA], system_time=T0, expected_head=None)
    path, ph = data_file(tmp_path / "staging", b"forged" * 100)
    source.store.put_file(f"data/{ph}", path)
    event = dataclasses.replace(add_data(source.state(), ph, path.stat().st_size, 5), prev_offset=99)
    head = source.head()
    raw = encode_block(
        model.MetadataBlock(system_time=T1, prev_block_hash=head, sequence_number=2, event=event)
    )
    source.store.put(f"blocks/{block_hash(raw)}", raw)
    source.store.compare_and_swap("refs/head", str(head).encode(), str(block_hash(raw)).encode())
    dst = open_dataset(tmp_path / "dst")
    with pytest.raises(TamperedObjectError, match="break the chain rules"):
        sync(source, dst)
    assert dst.head() is None
    assert files(tmp_path / "dst", "data") == {} and files(tmp_path / "dst", "blocks") == {}


def test_a_missing_object_fails_before_any_block_is_written(tmp_path: Path, source: Dataset) -> None:
    cp = next(source.iter_blocks())[1].event.new_checkpoint
    (tmp_path / "src" / "checkpoints" / str(cp.physical_hash)).unlink()
    dst = open_dataset(tmp_path / "dst")
    with pytest.raises(SyncError, match=f"checkpoints/{cp.physical_hash} .* is missing"):
        sync(source, dst)
    assert dst.head() is None and files(tmp_path / "dst", "blocks") == {}


def test_diverged_histories_are_refused_unless_forced(tmp_path: Path, source: Dataset) -> None:
    dst = open_dataset(tmp_path / "dst")
    sync(source, dst)
    grow(source, tmp_path / "a", 2, "a")
    grow(dst, tmp_path / "b", 1, "b")
    assert compare_chains(source, dst).comparison is Comparison.DIVERGED
    old = dst.head()
    with pytest.raises(DatasetsDivergedError, match="histories diverged"):
        sync(source, dst)
    assert dst.head() == old
    forced = sync(source, dst, force=True)
    assert forced.comparison is Comparison.DIVERGED and dst.head() == source.head()
    assert dst.state() == source.state()
    assert verify_integrity(dst) == []


def test_a_destination_ahead_is_refused_unless_forced(tmp_path: Path, source: Dataset) -> None:
    dst = open_dataset(tmp_path / "dst")
    sync(source, dst)
    grow(dst, tmp_path / "b", 2, "b")
    assert compare_chains(source, dst).comparison is Comparison.BEHIND
    with pytest.raises(DestinationAheadError, match="destination is ahead"):
        sync(source, dst)
    sync(source, dst, force=True)
    assert dst.head() == source.head()


def test_forcing_never_replaces_another_dataset(tmp_path: Path, source: Dataset) -> None:
    other = open_dataset(tmp_path / "other")
    other.commit([model.Seed(dataset_id=DatasetId(bytes(range(1, 33))), dataset_kind=model.DatasetKind.ROOT)])
    with pytest.raises(SyncError, match="holds another dataset"):
        sync(source, other, force=True)


class FailingStore(LocalObjectStore):
    """Fails the `n`-th object it receives: an interrupted transfer."""

    def __init__(self, root: Path, n: int) -> None:
        super().__init__(root)
        self.left = n

    def put_file(self, key: str, source: Path, *, move: bool = False) -> None:
        self.left -= 1
        if self.left == 0:
            raise OSError("connection reset (simulated)")
        super().put_file(key, source, move=move)


def test_an_interrupted_transfer_resumes_without_resending(tmp_path: Path, source: Dataset) -> None:
    grow(source, tmp_path / "more", 6, "r")
    failing = Dataset(FailingStore(tmp_path / "dst", 4))
    with pytest.raises(OSError, match="simulated"):
        sync(source, failing, max_parallel=1)
    assert failing.head() is None and files(tmp_path / "dst", "blocks") == {}
    arrived = len(files(tmp_path / "dst", "data")) + len(files(tmp_path / "dst", "checkpoints"))
    assert 3 <= arrived <= 4  # the three before the failure, and at most one already under way
    result = sync(source, open_dataset(tmp_path / "dst"))
    assert result.objects_skipped == arrived and result.objects_transferred == 12 - arrived
    same_dataset(tmp_path / "src", tmp_path / "dst")


def test_staging_left_by_a_killed_sync_is_removed_later(tmp_path: Path, source: Dataset) -> None:
    dst_root = tmp_path / "dst"
    old, fresh = dst_root / ".sync-old", dst_root / ".sync-fresh"
    for folder in (old, fresh):
        folder.mkdir(parents=True)
        (folder / "data-x").write_bytes(b"partial")
    long_ago = time.time() - 2 * 3600
    os.utime(old, (long_ago, long_ago))
    sync(source, open_dataset(dst_root))
    assert not old.exists() and fresh.exists()  # a fresh one may belong to a sync still running

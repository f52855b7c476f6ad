"""Datasets on the local disk: the layout a commit writes, atomicity, the summary index, crashes,
concurrent writers, tampering, resets and garbage collection.

Everything runs against real files in `tmp_path`. Crashes are real: a child process runs a commit
through a `LocalObjectStore` subclass that calls `os._exit(9)` at a chosen step. Concurrency is real:
two child processes append to the same dataset at the same time.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.chain.dataset import (
    HEAD_REF,
    CommitResult,
    CorruptDatasetError,
    Dataset,
    StagedObject,
    fold,
)
from airflow_odf.odf.chain.in_flight import INTENT_LEASE_SECONDS, INTENTS_PREFIX
from airflow_odf.odf.chain.integrity import (
    TEMPORARY_GRACE_SECONDS,
    collect_garbage,
    reachable_keys,
    verify_integrity,
)
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.chain.summary import SUMMARY_KEY, state_to_json
from airflow_odf.odf.errors import ChainRuleError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import block_hash, decode_block
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, DatasetId, Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.storage.local import LocalObjectStore
from airflow_odf.odf.storage.store import ConflictError

REPO = Path(__file__).resolve().parents[2]
T0 = Timestamp.parse("2024-01-01T00:00:00Z")
T1 = Timestamp.parse("2024-01-02T00:00:00Z")
T2 = Timestamp.parse("2024-01-03T00:00:00Z")
DID = DatasetId(bytes(range(32)))
SCHEMA = model.SetDataSchema(
    schema=model.DataSchema(
        fields=[
            model.DataField(name="offset", type=model.DataTypeInt64()),
            model.DataField(name="value", type=model.DataTypeOption(inner=model.DataTypeString())),
        ]
    )
)
SEED = model.Seed(dataset_id=DID, dataset_kind=model.DatasetKind.ROOT)


def open_dataset(root: Path) -> Dataset:
    return Dataset(LocalObjectStore(root))


def files(root: Path, sub: str) -> dict[str, bytes]:
    """Visible files directly under `root/sub` (what the store lists), name -> bytes."""
    d = root / sub
    if not d.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and not p.name.startswith(".")}


def snapshot_tree(root: Path) -> dict[str, bytes]:
    """Every file of the dataset except the derived summary and lock files."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel != SUMMARY_KEY and not p.name.endswith(".lock"):
            out[rel] = p.read_bytes()
    return out


def data_file(directory: Path, content: bytes, name: str = "part.bin") -> tuple[Path, Multihash]:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(content)
    return path, Multihash.sha3_256(content)


def add_data(
    state: ChainState,
    physical: Multihash,
    size: int,
    records: int,
    *,
    watermark: Timestamp | None = T1,
    checkpoint: model.Checkpoint | None = None,
) -> model.AddData:
    start = 0 if state.last_offset is None else state.last_offset + 1
    return model.AddData(
        prev_checkpoint=state.checkpoint.physical_hash if state.checkpoint else None,
        prev_offset=state.last_offset,
        new_data=model.DataSlice(
            logical_hash=Multihash(ARROW0_SHA3_256, bytes(32)),
            physical_hash=physical,
            offset_interval=model.OffsetInterval(start=start, end=start + records - 1),
            size=size,
        ),
        new_checkpoint=checkpoint,
        new_watermark=watermark,
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "ds"


@pytest.fixture
def ds(root: Path) -> Dataset:
    """A Root dataset with a Seed and a SetDataSchema."""
    dataset = open_dataset(root)
    dataset.commit([SEED, SCHEMA], system_time=T0, expected_head=None)
    return dataset


def rich_dataset(
    root: Path, tmp_path: Path, *, dataset: Dataset | None = None, seed: model.Seed = SEED
) -> Dataset:
    """A dataset with sources, vocab, data, a checkpoint and source states: the one at `root`, or
    `dataset` (e.g. a repository's, which signs its heads) with its own `seed`."""
    dataset = dataset if dataset is not None else open_dataset(root)
    dataset.commit(
        [
            seed,
            model.AddPushSource(
                source_name="api", read=model.ReadStepNdJson(), merge=model.MergeStrategyAppend()
            ),
            model.SetVocab(event_time_column="t"),
            SCHEMA,
            model.SetInfo(description="rich"),
        ],
        system_time=T0,
    )
    for i in range(3):
        path, ph = data_file(tmp_path / "staging", f"chunk {i}".encode() * (i + 1), f"c{i}")
        cp_path, cp = data_file(tmp_path / "staging", f"checkpoint {i}".encode(), f"cp{i}")
        event = add_data(
            dataset.state(),
            ph,
            path.stat().st_size,
            10 + i,
            watermark=Timestamp(T1.seconds + i),
            checkpoint=model.Checkpoint(physical_hash=cp, size=cp_path.stat().st_size),
        )
        event = dataclasses.replace(
            event, new_source_state=model.SourceState(source_name="api", kind="k", value=str(i))
        )
        dataset.commit(
            [event],
            system_time=T1,
            objects=[StagedObject(f"data/{ph}", path), StagedObject(f"checkpoints/{cp}", cp_path)],
        )
    return dataset


def walk(dataset: Dataset) -> list[tuple[Multihash, model.MetadataBlock]]:
    """Head to Seed, checking links and sequence numbers on the way."""
    chain = list(dataset.iter_blocks())
    assert chain, "empty chain"
    for (_, block), (prev_h, _) in itertools.pairwise(chain):
        assert block.prev_block_hash == prev_h
    assert [b.sequence_number for _, b in chain] == list(range(len(chain) - 1, -1, -1))
    assert isinstance(chain[-1][1].event, model.Seed) and chain[-1][1].prev_block_hash is None
    return chain


def chain_state(dataset: Dataset) -> ChainState:
    """The state folded from the blocks alone (no summary involved)."""
    return fold(ChainState(), reversed(list(dataset.iter_blocks())))


# --------------------------------------------------------------------------------------------------
# layout of a commit
# --------------------------------------------------------------------------------------------------


def test_commit_writes_blocks_named_by_their_hash_and_head_without_newline(root: Path) -> None:
    dataset = open_dataset(root)
    assert dataset.head() is None and dataset.state() == ChainState()
    info = model.SetInfo(description="hello", keywords=["a", "b"])
    result = dataset.commit([SEED, SCHEMA, info], system_time=T0, expected_head=None)

    assert isinstance(result, CommitResult) and not result.up_to_date
    assert result.old_head is None
    assert len(result.new_blocks) == 3 and result.new_head == result.new_blocks[-1]
    blocks = files(root, "blocks")
    assert set(blocks) == {str(h) for h in result.new_blocks}
    for name, data in blocks.items():
        assert str(block_hash(data)) == name
        assert name.startswith("f1620") and len(name) == 5 + 64
    decoded = [decode_block(blocks[str(h)]) for h in result.new_blocks]
    assert [b.event for b in decoded] == [SEED, SCHEMA, info]
    assert [b.sequence_number for b in decoded] == [0, 1, 2]
    assert [b.prev_block_hash for b in decoded] == [None, *result.new_blocks[:2]]
    assert all(b.system_time == T0 for b in decoded)

    head_bytes = (root / "refs" / "head").read_bytes()
    assert head_bytes == str(result.new_head).encode()
    assert not head_bytes.endswith(b"\n") and b"\n" not in head_bytes
    assert dataset.head() == result.new_head
    assert result.state == dataset.state() == chain_state(dataset)
    assert result.state.info == info and result.state.num_blocks == 3


def test_empty_commit_is_up_to_date(ds: Dataset, root: Path) -> None:
    before = snapshot_tree(root)
    result = ds.commit([])
    assert result.up_to_date and result.old_head == result.new_head == ds.head()
    assert snapshot_tree(root) == before


def test_commit_never_moves_system_time_backwards(ds: Dataset) -> None:
    result = ds.commit([model.SetInfo(description="late")], system_time=Timestamp(T0.seconds - 3600))
    assert ds.block(result.new_head).system_time == T0


def test_rejected_append_changes_nothing(ds: Dataset, root: Path, tmp_path: Path) -> None:
    src, ph = data_file(tmp_path / "staging", b"some parquet bytes")
    before = snapshot_tree(root)
    head = ds.head()
    bad = model.AddData(
        prev_offset=5,  # nothing was written yet: must be absent
        new_data=add_data(ds.state(), ph, 18, 3).new_data,
    )
    with pytest.raises(ChainRuleError) as info:
        ds.commit(
            [model.SetInfo(description="fine on its own"), bad], objects=[StagedObject(f"data/{ph}", src)]
        )
    assert info.value.rule == "prev-offset"
    assert ds.head() == head
    assert snapshot_tree(root) == before
    assert not (root / "data").exists()
    assert src.read_bytes() == b"some parquet bytes"  # the staged file was not consumed
    # the same through append_block_bytes: a second Seed is refused, nothing written
    seed_bytes = ds.block_bytes(walk(ds)[-1][0])
    with pytest.raises(ChainRuleError) as info:
        ds.append_block_bytes([seed_bytes], expected_head=head)
    assert info.value.rule == "seed-only-first"
    assert snapshot_tree(root) == before


def test_expected_head_mismatch_is_a_conflict(ds: Dataset, root: Path) -> None:
    old = ds.head()
    moved = ds.commit([model.SetInfo(description="1")], expected_head=old)
    assert moved.old_head == old and ds.head() == moved.new_head
    before = snapshot_tree(root)
    with pytest.raises(ConflictError):
        ds.commit([model.SetInfo(description="2")], expected_head=old)
    with pytest.raises(ConflictError):
        ds.commit([model.SetInfo(description="2")], expected_head=None)
    with pytest.raises(ConflictError):
        ds.append_block_bytes([], expected_head=old)
    with pytest.raises(ConflictError):
        ds.reset(old, expected_head=old)
    assert snapshot_tree(root) == before
    assert ds.head() == moved.new_head
    assert (
        ds.commit([model.SetInfo(description="2")], expected_head=moved.new_head).new_head != moved.new_head
    )


def test_creating_an_existing_dataset_again_conflicts(ds: Dataset) -> None:
    with pytest.raises(ConflictError):
        ds.commit([SEED], expected_head=None)


def test_staged_objects_land_before_the_head_moves(ds: Dataset, root: Path, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    class WatchingStore(LocalObjectStore):
        """Records what is on disk at the moment the head is swapped."""

        def compare_and_swap(self, key: str, expected: bytes | None, new: bytes | None) -> None:
            if key == HEAD_REF:
                seen["data"] = set(files(root, "data"))
                seen["checkpoints"] = set(files(root, "checkpoints"))
                seen["blocks"] = set(files(root, "blocks"))
                seen["head"] = (root / "refs" / "head").read_bytes()
            super().compare_and_swap(key, expected, new)

    dataset = Dataset(WatchingStore(root))
    src, ph = data_file(tmp_path / "staging", b"x" * 1000, "part")
    cp_src, cp = data_file(tmp_path / "staging", b"checkpoint", "cp")
    keep, _ = data_file(tmp_path / "keep", b"x" * 1000, "part")  # same content, copied not moved
    old_head = dataset.head()
    event = add_data(dataset.state(), ph, 1000, 10, checkpoint=model.Checkpoint(physical_hash=cp, size=10))
    result = dataset.commit(
        [event],
        objects=[StagedObject(f"data/{ph}", src), StagedObject(f"checkpoints/{cp}", cp_src)],
    )
    assert seen["data"] == {str(ph)} and seen["checkpoints"] == {str(cp)}
    assert str(result.new_head) in seen["blocks"]
    assert seen["head"] == str(old_head).encode()  # objects and block were there while the head was old
    assert (root / "data" / str(ph)).read_bytes() == b"x" * 1000
    assert Multihash.sha3_256((root / "data" / str(ph)).read_bytes()) == ph
    assert not src.exists() and not cp_src.exists()  # moved in by default
    assert result.state.last_offset == 9 and result.state.data_size == 1000
    assert verify_integrity(dataset) == []
    # move=False copies; an object already present is not rewritten
    event = add_data(dataset.state(), ph, 1000, 5, watermark=T2)
    event = dataclasses.replace(event, new_checkpoint=None)
    dataset.commit([event], objects=[StagedObject(f"data/{ph}", keep, move=False)])
    assert keep.exists()
    assert verify_integrity(dataset) == []


def test_append_block_bytes_replicates_a_chain_verbatim(tmp_path: Path) -> None:
    source = rich_dataset(tmp_path / "a", tmp_path)
    chain = list(reversed(list(source.iter_blocks())))
    raw = [source.block_bytes(h) for h, _ in chain]
    replica = open_dataset(tmp_path / "b")
    first = replica.append_block_bytes(raw[:4], expected_head=None)
    assert first.new_head == chain[3][0]
    rest = replica.append_block_bytes(raw[4:], expected_head=first.new_head)
    assert rest.new_blocks == [h for h, _ in chain[4:]]
    assert replica.head() == source.head()
    assert files(tmp_path / "b", "blocks") == files(tmp_path / "a", "blocks")
    assert replica.state() == source.state()


# --------------------------------------------------------------------------------------------------
# the summary index (info/summary)
# --------------------------------------------------------------------------------------------------


def assert_same_state(got: ChainState, expected: ChainState) -> None:
    for name in ("head", "sequence_number", "system_time", "dataset_id", "kind", "last_offset", "watermark"):
        assert getattr(got, name) == getattr(expected, name), name
    for name in ("checkpoint", "source_states", "num_records", "data_size", "schema", "vocab", "info"):
        assert getattr(got, name) == getattr(expected, name), name
    assert got.push_sources == expected.push_sources and got.transform_inputs == expected.transform_inputs
    assert got == expected


def test_state_is_the_same_without_a_summary(root: Path, tmp_path: Path) -> None:
    dataset = rich_dataset(root, tmp_path)
    expected = dataset.state()
    assert expected.num_records == 10 + 11 + 12 and expected.last_offset == 32
    assert expected.source_states == {"api": model.SourceState(source_name="api", kind="k", value="2")}
    summary = root / "info" / "summary"
    assert json.loads(summary.read_bytes())["head"] == str(expected.head)
    summary.unlink()
    got = open_dataset(root).state()
    assert_same_state(got, expected)
    assert_same_state(chain_state(dataset), expected)
    assert summary.read_bytes() == state_to_json(expected)  # rebuilt


CORRUPTIONS: list[Any] = [
    pytest.param(lambda raw: b"", id="empty"),
    pytest.param(lambda raw: raw[: len(raw) // 2], id="truncated"),
    pytest.param(lambda raw: bytes(b ^ 0xFF for b in raw), id="inverted"),
    pytest.param(lambda raw: os.urandom(len(raw)), id="random"),
    pytest.param(lambda raw: raw.replace(b'"version":1', b'"version":99'), id="other-version"),
    pytest.param(lambda raw: b'{"version":1}', id="fields-missing"),
    pytest.param(lambda raw: raw.replace(b'"head":"f1620', b'"head":"f1621'), id="bad-head-hash"),
    pytest.param(lambda raw: raw.replace(b'"kind":"ROOT"', b'"kind":"TREE"'), id="bad-kind"),
    pytest.param(
        lambda raw: b"null",
        id="json-null",
    ),
    pytest.param(
        lambda raw: b"[]",
        id="json-list",
    ),
    pytest.param(
        lambda raw: json.dumps({**json.loads(raw), "events": []}).encode(),
        id="events-not-an-object",
    ),
]


@pytest.mark.parametrize("corrupt", CORRUPTIONS)
def test_corrupt_summary_gives_the_same_state(root: Path, tmp_path: Path, corrupt: Any) -> None:
    dataset = rich_dataset(root, tmp_path)
    expected = dataset.state()
    summary = root / "info" / "summary"
    summary.write_bytes(corrupt(summary.read_bytes()))
    assert_same_state(open_dataset(root).state(), expected)
    assert json.loads(summary.read_bytes())["head"] == str(expected.head)


def test_altered_summary_is_not_trusted(ds: Dataset, root: Path, tmp_path: Path) -> None:
    src, ph = data_file(tmp_path / "staging", b"ten records")
    ds.commit([add_data(ds.state(), ph, 11, 10)], objects=[StagedObject(f"data/{ph}", src)])
    expected = ds.state()
    assert expected.last_offset == 9
    summary = root / "info" / "summary"
    raw = summary.read_bytes()
    assert b'"lastOffset":9' in raw
    summary.write_bytes(raw.replace(b'"lastOffset":9', b'"lastOffset":8'))
    got = open_dataset(root).state()
    # what the altered summary leads to: a slice overlapping offset 9 is accepted and committed
    new_data = dataclasses.replace(
        add_data(expected, ph, 11, 3).new_data, offset_interval=model.OffsetInterval(start=9, end=11)
    )
    overlapping = model.AddData(prev_offset=8, new_data=new_data, new_watermark=T1)
    try:
        ds.commit([overlapping])
        accepted = True
    except ChainRuleError:
        accepted = False
    problems = verify_integrity(ds)
    assert (got.last_offset, accepted, problems) == (9, False, [])


def test_summary_of_another_dataset_is_ignored(root: Path, tmp_path: Path) -> None:
    dataset = rich_dataset(root, tmp_path)
    expected = dataset.state()
    other = open_dataset(tmp_path / "other")
    other.commit([model.Seed(dataset_id=DatasetId(bytes([9] * 32)), dataset_kind=model.DatasetKind.ROOT)])
    (root / "info" / "summary").write_bytes((tmp_path / "other" / "info" / "summary").read_bytes())
    assert_same_state(open_dataset(root).state(), expected)


def test_stale_summary_is_brought_up_to_date(root: Path, tmp_path: Path) -> None:
    dataset = rich_dataset(root, tmp_path)
    summary = root / "info" / "summary"
    old_state = dataset.state()
    stale = summary.read_bytes()
    for i in range(5):
        dataset.commit([model.SetInfo(description=f"newer {i}")])
    expected = chain_state(dataset)
    summary.write_bytes(stale)
    got = open_dataset(root).state()
    assert_same_state(got, expected)
    assert got.sequence_number == old_state.sequence_number + 5
    assert got.info == model.SetInfo(description="newer 4")
    assert json.loads(summary.read_bytes())["head"] == str(expected.head)
    assert summary.read_bytes() == state_to_json(expected)
    # a summary from an older head is also used as the fold's base (the blocks before it are not read)
    summary.write_bytes(stale)
    first_block = walk(dataset)[-1][0]
    (root / "blocks" / str(first_block)).rename(tmp_path / "seed.bak")
    assert_same_state(open_dataset(root).state(), expected)
    (tmp_path / "seed.bak").rename(root / "blocks" / str(first_block))


def test_state_after_reset_matches_the_chain(root: Path, tmp_path: Path) -> None:
    dataset = rich_dataset(root, tmp_path)
    chain = walk(dataset)
    target = chain[2][0]  # two blocks back
    newest = dataset.state()
    result = dataset.reset(target)
    assert result.old_head == newest.head and result.new_head == target
    assert (root / "refs" / "head").read_bytes() == str(target).encode()
    assert_same_state(dataset.state(), chain_state(dataset))
    assert dataset.state().head == target
    assert dataset.state().num_records == 10  # only the first AddData is left
    # the summary written at the newer head does not leak into the reset state
    (root / "info" / "summary").write_bytes(state_to_json(newest))
    assert_same_state(open_dataset(root).state(), chain_state(dataset))
    with pytest.raises(ChainRuleError) as info:
        dataset.reset(Multihash.sha3_256(b"not a block"))
    assert info.value.rule == "reset-target"
    with pytest.raises(ChainRuleError):
        dataset.reset(newest.head)  # no longer in the chain of the head
    assert dataset.head() == target


def test_commit_onto_an_earlier_block_rewrites_history_in_one_head_move(root: Path, tmp_path: Path) -> None:
    dataset = rich_dataset(root, tmp_path)
    chain = walk(dataset)
    seed_hash = chain[-1][0]
    old_head = dataset.head()
    info = model.SetInfo(description="rebuilt")
    # a rejected rewrite (data without a schema after the Seed) changes nothing
    with pytest.raises(ChainRuleError):
        dataset.commit([add_data(ChainState(), Multihash.sha3_256(b"x"), 1, 1)], onto=seed_hash)
    assert dataset.head() == old_head
    # a head that moved since is a conflict, whatever the base
    with pytest.raises(ConflictError):
        dataset.commit([info], onto=seed_hash, expected_head=seed_hash)
    result = dataset.commit([SCHEMA, info], system_time=T2, onto=seed_hash, expected_head=old_head)
    assert result.old_head == old_head and len(result.new_blocks) == 2
    assert [type(b.event).__name__ for _, b in walk(dataset)] == ["SetInfo", "SetDataSchema", "Seed"]
    assert [b.sequence_number for _, b in walk(dataset)] == [2, 1, 0]
    assert_same_state(dataset.state(), chain_state(dataset))
    assert dataset.state().num_records == 0 and dataset.state().info == info
    with pytest.raises(ChainRuleError) as rejected:
        dataset.state_at(old_head)  # no longer in the chain
    assert rejected.value.rule == "rebase-target"


def test_reset_then_commit_orphans_blocks_that_gc_removes(root: Path, tmp_path: Path) -> None:
    dataset = rich_dataset(root, tmp_path)
    chain = walk(dataset)
    orphan_blocks = {f"blocks/{h}" for h, _ in chain[:2]}
    orphan_objects = set()
    for _, block in chain[:2]:
        orphan_objects.add(f"data/{block.event.new_data.physical_hash}")
        orphan_objects.add(f"checkpoints/{block.event.new_checkpoint.physical_hash}")
    dataset.reset(chain[2][0])
    result = dataset.commit([model.SetInfo(description="fork")])
    assert walk(dataset)[1][0] == chain[2][0]
    assert collect_garbage(dataset, min_age_seconds=3600) == []  # too young
    removed = collect_garbage(dataset, min_age_seconds=0)
    assert set(removed) == orphan_blocks | orphan_objects
    for key in reachable_keys(dataset):
        assert (root / key).is_file(), key
    assert verify_integrity(dataset) == []
    assert dataset.state().head == result.new_head


# --------------------------------------------------------------------------------------------------
# crash injection
# --------------------------------------------------------------------------------------------------

CRASHING_COMMIT = textwrap.dedent(
    """
    import os, shutil, sys
    from pathlib import Path
    from airflow_odf.odf.format import model
    from airflow_odf.odf.chain.dataset import Dataset, StagedObject
    from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, Multihash
    from airflow_odf.odf.storage.local import LocalObjectStore
    from airflow_odf.odf.format.timestamps import Timestamp

    root, point, src = sys.argv[1], sys.argv[2], Path(sys.argv[3])

    class CrashingStore(LocalObjectStore):
        blocks = 0

        def put_file(self, key, source, *, move=False):
            if point == "inside-put-file":  # what a kill between the copy and the rename leaves
                target = self._path(key)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target.parent / f".tmp-{os.getpid()}-{target.name}")
                os._exit(9)
            super().put_file(key, source, move=move)
            if point == "objects":
                os._exit(9)

        def put(self, key, data):
            super().put(key, data)
            if key.startswith("blocks/"):
                self.blocks += 1
                if point == "first-block" and self.blocks == 1:
                    os._exit(9)
                if point == "all-blocks" and self.blocks == 2:
                    os._exit(9)

        def compare_and_swap(self, key, expected, new):
            if point == "before-cas" and key == "refs/head":
                os._exit(9)
            super().compare_and_swap(key, expected, new)
            if point == "after-cas-before-summary" and key == "refs/head":
                os._exit(9)

    ds = Dataset(CrashingStore(root))
    state = ds.state()
    physical = Multihash.sha3_256(src.read_bytes())
    start = 0 if state.last_offset is None else state.last_offset + 1
    event = model.AddData(
        prev_offset=state.last_offset,
        new_data=model.DataSlice(
            logical_hash=Multihash(ARROW0_SHA3_256, bytes(32)),
            physical_hash=physical,
            offset_interval=model.OffsetInterval(start=start, end=start + 99),
            size=src.stat().st_size,
        ),
        new_watermark=Timestamp.parse("2024-02-01T00:00:00Z"),
    )
    ds.commit(
        [event, model.SetInfo(description="committed by the crashing process")],
        objects=[StagedObject(f"data/{physical}", src)],
    )
    print(ds.head())
    """
)


def run_crashing_commit(root: Path, point: str, src: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CRASHING_COMMIT, str(root), point, str(src)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


@pytest.mark.parametrize(
    "point, new_blocks",
    [("objects", 0), ("first-block", 1), ("all-blocks", 2), ("before-cas", 2)],
)
def test_crash_before_the_head_moves_leaves_the_old_head(
    ds: Dataset, root: Path, tmp_path: Path, point: str, new_blocks: int
) -> None:
    src, ph = data_file(tmp_path / "staging", b"parquet " * 500)
    old_state = ds.state()
    old_tree = snapshot_tree(root)

    proc = run_crashing_commit(root, point, src)
    assert proc.returncode == 9, proc.stderr

    dataset = open_dataset(root)
    assert dataset.head() == old_state.head
    assert (root / "refs" / "head").read_bytes() == str(old_state.head).encode()
    leftovers = {k for k in snapshot_tree(root) if k not in old_tree}
    declarations = {k for k in leftovers if k.startswith(f"{INTENTS_PREFIX}/")}
    assert len(declarations) == 1  # the dead commit's: what it names is kept until it expires
    leftovers -= declarations
    assert f"data/{ph}" in leftovers
    assert len([k for k in leftovers if k.startswith("blocks/")]) == new_blocks
    assert leftovers <= {f"data/{ph}"} | {f"blocks/{n}" for n in files(root, "blocks")}
    assert verify_integrity(dataset) == []
    assert_same_state(dataset.state(), old_state)

    result = dataset.commit([model.SetInfo(description="after the crash")])
    assert result.old_head == old_state.head
    assert result.state.sequence_number == old_state.sequence_number + 1
    assert result.state.last_offset is None and result.state.num_records == 0
    assert verify_integrity(dataset) == []

    assert collect_garbage(dataset, min_age_seconds=0) == []
    expire_declarations(root)
    removed = collect_garbage(dataset, min_age_seconds=0)
    assert set(removed) == leftovers
    assert set(snapshot_tree(root)) == set(old_tree) | {f"blocks/{result.new_head}"}
    for key in reachable_keys(dataset):
        assert (root / key).is_file()
    assert verify_integrity(dataset) == []
    assert_same_state(open_dataset(root).state(), result.state)


def test_crash_after_the_head_moved_keeps_the_commit(ds: Dataset, root: Path, tmp_path: Path) -> None:
    src, ph = data_file(tmp_path / "staging", b"parquet " * 500)
    old_state = ds.state()
    stale_summary = (root / "info" / "summary").read_bytes()
    proc = run_crashing_commit(root, "after-cas-before-summary", src)
    assert proc.returncode == 9, proc.stderr
    assert (root / "info" / "summary").read_bytes() == stale_summary
    dataset = open_dataset(root)
    chain = walk(dataset)
    assert chain[1][0] != old_state.head and chain[2][0] == old_state.head
    assert isinstance(chain[1][1].event, model.AddData)
    state = dataset.state()
    assert state.sequence_number == old_state.sequence_number + 2
    assert state.last_offset == 99 and state.num_records == 100
    assert state.info == model.SetInfo(description="committed by the crashing process")
    assert verify_integrity(dataset) == []
    assert collect_garbage(dataset, min_age_seconds=0) == []
    assert (root / "data" / str(ph)).is_file()


def test_gc_removes_temp_files_of_a_killed_commit(ds: Dataset, root: Path, tmp_path: Path) -> None:
    src, _ = data_file(tmp_path / "staging", b"parquet " * 500)
    old_state = ds.state()
    proc = run_crashing_commit(root, "inside-put-file", src)
    assert proc.returncode == 9, proc.stderr
    dataset = open_dataset(root)
    assert dataset.head() == old_state.head
    temp = [p for p in (root / "data").iterdir() if p.name.startswith(".tmp-")]
    assert len(temp) == 1 and temp[0].read_bytes() == src.read_bytes()
    assert verify_integrity(dataset) == []
    collect_garbage(dataset, min_age_seconds=0)
    assert temp[0].exists()  # young: the write may be in progress, whatever the minimum age
    old = time.time() - TEMPORARY_GRACE_SECONDS - 1
    os.utime(temp[0], (old, old))
    collect_garbage(dataset, min_age_seconds=0)
    assert temp[0].exists()  # its commit's declaration is young: the commit may still be writing it
    expire_declarations(root)
    collect_garbage(dataset, min_age_seconds=0)
    assert not temp[0].exists()


def expire_declarations(root: Path) -> None:
    """Ages the declarations of dead commits past their lease, as time would, so that gc takes them."""
    for path in (root / INTENTS_PREFIX).iterdir():
        record = json.loads(path.read_bytes())
        path.write_text(json.dumps({**record, "written": time.time() - INTENT_LEASE_SECONDS - 1}))


# --------------------------------------------------------------------------------------------------
# two writers at once
# --------------------------------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from airflow_odf.odf.format import model
    from airflow_odf.odf.chain.dataset import Dataset
    from airflow_odf.odf.storage.local import LocalObjectStore
    from airflow_odf.odf.storage.store import ConflictError

    root, tag, out, go, attempts = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), int(sys.argv[5])
    ds = Dataset(LocalObjectStore(root))
    Path(out + ".ready").touch()
    while not go.exists():
        time.sleep(0.001)
    with open(out, "w") as f:
        for i in range(attempts):
            for retry in range(1000):
                try:
                    result = ds.commit([model.SetInfo(description=f"{tag}-{i}")])
                except ConflictError:
                    f.write(f"conflict {tag}-{i}\\n")
                    continue
                f.write(f"ok {result.new_head} {tag}-{i}\\n")
                break
            else:
                f.write(f"gave-up {tag}-{i}\\n")
            f.flush()
    """
)


def test_two_processes_appending_concurrently_keep_a_linear_chain(
    ds: Dataset, root: Path, tmp_path: Path
) -> None:
    attempts = 150
    go = tmp_path / "go"
    outs = {tag: tmp_path / f"{tag}.log" for tag in ("p1", "p2")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), tag, str(out), str(go), str(attempts)],
            cwd=REPO,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag, out in outs.items()
    ]
    deadline = time.monotonic() + 60
    while not all(Path(f"{out}.ready").exists() for out in outs.values()):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()  # both start at once
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err

    ok: dict[str, str] = {}
    conflicts = 0
    for out in outs.values():
        for line in out.read_text().splitlines():
            kind, *rest = line.split()
            assert kind in {"ok", "conflict"}, line
            if kind == "ok":
                ok[rest[1]] = rest[0]
            else:
                conflicts += 1
    assert len(ok) == 2 * attempts  # every attempt eventually succeeded

    dataset = open_dataset(root)
    chain = walk(dataset)  # linear: links and contiguous sequence numbers down to the Seed
    in_chain = {str(h): b for h, b in chain}
    assert len(chain) == 2 + 2 * attempts
    for desc, h in ok.items():
        assert h in in_chain, f"commit {desc} ({h}) reported as successful is not in the chain"
        assert in_chain[h].event == model.SetInfo(description=desc)
    descriptions = [b.event.description for _, b in chain if isinstance(b.event, model.SetInfo)]
    assert sorted(descriptions) == sorted(ok)  # each exactly once: nothing lost, nothing doubled
    for tag in ("p1", "p2"):  # each writer's own commits are in its order
        mine = [int(d.split("-")[1]) for d in reversed(descriptions) if d.startswith(tag)]
        assert mine == list(range(attempts))
    # each conflict left exactly one block no head refers to; nothing else is stray
    assert len(files(root, "blocks")) == len(chain) + conflicts
    assert verify_integrity(dataset) == []
    assert_same_state(dataset.state(), chain_state(dataset))
    assert len(collect_garbage(dataset, min_age_seconds=0)) == conflicts
    assert len(files(root, "blocks")) == len(chain)
    assert verify_integrity(dataset) == []


# --------------------------------------------------------------------------------------------------
# tampering
# --------------------------------------------------------------------------------------------------


def flip(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos % len(data)] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("which", [0, 3, -1], ids=["head", "middle", "seed"])
@pytest.mark.parametrize("pos", [0, 40, -1])
def test_flipped_byte_in_a_block_is_reported(root: Path, tmp_path: Path, which: int, pos: int) -> None:
    dataset = rich_dataset(root, tmp_path)
    assert verify_integrity(dataset) == []
    target = walk(dataset)[which][0]
    flip(root / "blocks" / str(target), pos)
    problems = verify_integrity(dataset)
    assert problems, "tampering went unnoticed"
    assert (problems[0].kind, problems[0].ref) == ("block", str(target)), problems
    assert "tampered" in problems[0].message or "cannot be decoded" in problems[0].message


def test_flipped_byte_in_a_data_file_is_reported(ds: Dataset, root: Path, tmp_path: Path) -> None:
    content = b"PAR1" + bytes(range(256)) * 8 + b"PAR1"
    src, ph = data_file(tmp_path / "staging", content)
    assert ph == Multihash.sha3_256(content)
    result = ds.commit(
        [add_data(ds.state(), ph, len(content), 100)], objects=[StagedObject(f"data/{ph}", src)]
    )
    assert verify_integrity(ds) == []
    flip(root / "data" / str(ph), 1000)
    problems = verify_integrity(ds)
    assert [(p.kind, p.ref) for p in problems] == [("data", f"data/{ph}")]
    assert "tampered" in problems[0].message and str(ph) in problems[0].message
    assert str(Multihash.sha3_256((root / "data" / str(ph)).read_bytes())) in problems[0].message
    assert result.state.num_records == 100


def test_truncated_data_file_is_a_size_problem(ds: Dataset, root: Path, tmp_path: Path) -> None:
    content = b"x" * 4096
    src, ph = data_file(tmp_path / "staging", content)
    result = ds.commit(
        [add_data(ds.state(), ph, len(content), 10)], objects=[StagedObject(f"data/{ph}", src)]
    )
    path = root / "data" / str(ph)
    path.write_bytes(content[:1000])
    problems = verify_integrity(ds)
    assert [(p.kind, p.ref) for p in problems] == [("data", f"data/{ph}")]
    assert "1000 bytes" in problems[0].message and "4096" in problems[0].message
    assert str(result.new_head) in problems[0].message
    path.unlink()
    problems = verify_integrity(ds)
    assert [(p.kind, p.ref) for p in problems] == [("data", f"data/{ph}")]
    assert "missing" in problems[0].message


def test_tampered_checkpoint_is_reported(root: Path, tmp_path: Path) -> None:
    dataset = rich_dataset(root, tmp_path)
    cp = dataset.state().checkpoint
    assert cp is not None
    flip(root / "checkpoints" / str(cp.physical_hash), 3)
    problems = verify_integrity(dataset)
    assert [(p.kind, p.ref) for p in problems] == [("checkpoint", f"checkpoints/{cp.physical_hash}")]


def test_head_pointing_nowhere_is_reported(ds: Dataset, root: Path) -> None:
    (root / "refs" / "head").write_bytes(str(Multihash.sha3_256(b"nothing")).encode())
    problems = verify_integrity(ds)
    assert [(p.kind, p.ref, p.message) for p in problems] == [
        ("block", str(Multihash.sha3_256(b"nothing")), "missing")
    ]
    (root / "refs" / "head").write_bytes(b"not a hash")
    assert [p.kind for p in verify_integrity(ds)] == ["head"]


def test_expected_head_may_be_given_as_text(ds: Dataset) -> None:
    head = ds.head()
    result = ds.commit([model.SetInfo(description="x")], expected_head=str(head))
    assert result.old_head == head


def test_head_with_a_trailing_newline_is_not_a_permanent_conflict(ds: Dataset, root: Path) -> None:
    head = ds.head()
    (root / "refs" / "head").write_bytes(str(head).encode() + b"\n")
    assert ds.head() == head  # read leniently ...
    try:
        ds.commit([model.SetInfo(description="x")])
        outcome = "committed"
    except ConflictError:
        outcome = "conflict"
    except CorruptDatasetError:
        outcome = "reported as corrupt"
    assert outcome != "conflict"  # ... so a commit must not claim a concurrent writer

"""The verification record (`info/verification`) and verification that starts after the last verified head.

Real datasets on the local disk (no engine: root datasets, whose blocks have nothing to replay). What
an incremental run looks at is counted through a store that logs every read.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_odf.odf.chain.dataset import Dataset, StagedObject
from airflow_odf.odf.chain.verification import (
    RECORD_KEY,
    VerificationRecord,
    read_record,
    record_from_json,
    record_to_json,
    verify_dataset,
)
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.sharing.sync import sync
from airflow_odf.odf.storage.local import LocalObjectStore
from tests.unit.test_dataset import SCHEMA, SEED, T0, T1, add_data, data_file, open_dataset
from tests.unit.test_tampered_repository import forge_summary


class ReadLog(LocalObjectStore):
    """A local store that remembers the keys it was asked to read (blocks, data, checkpoints)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[str] = []

    def get(self, key: str) -> bytes:
        self.reads.append(key)
        return super().get(key)

    def size(self, key: str) -> int:
        self.reads.append(key)
        return super().size(key)

    def kinds(self, kind: str) -> list[str]:
        return [k for k in self.reads if k.startswith(f"{kind}/")]


def grow(dataset: Dataset, staging: Path, n: int, tag: str) -> None:
    """`n` more AddData blocks, each with its own data file and a later watermark."""
    for i in range(n):
        state = dataset.state()
        path, ph = data_file(staging, f"{tag} {i} ".encode() * 50, f"{tag}{i}")
        watermark = Timestamp((state.watermark or T1).seconds + 1)
        event = add_data(state, ph, path.stat().st_size, 5, watermark=watermark)
        dataset.commit([event], system_time=T1, objects=[StagedObject(f"data/{ph}", path)])


@pytest.fixture
def root(tmp_path: Path) -> Path:
    dataset = open_dataset(tmp_path / "ds")
    dataset.commit([SEED, SCHEMA], system_time=T0, expected_head=None)
    grow(dataset, tmp_path / "staging", 3, "a")
    return tmp_path / "ds"


def data_of(dataset: Dataset, h: Multihash) -> Path:
    event = dataset.block(h).event
    assert isinstance(event, model.AddData) and event.new_data is not None
    return dataset.store.local_path(f"data/{event.new_data.physical_hash}")  # type: ignore[return-value]


def tamper(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))


def test_first_run_is_full_and_records_the_head(root: Path) -> None:
    dataset = open_dataset(root)
    report = verify_dataset(dataset)
    assert report.ok and report.full and report.reason == "no earlier verification recorded"
    assert (report.blocks_checked, report.objects_checked, report.replayed) == (5, 3, None)
    assert report.recorded == f"{RECORD_KEY} at {dataset.head()}"
    record = read_record(dataset)
    assert record.integrity is not None and record.replay is None
    assert record.integrity.head == dataset.head() and record.integrity.full
    assert record.integrity.state == dataset.state()
    plain = json.loads((root / RECORD_KEY).read_text())
    assert plain["integrity"]["head"] == str(dataset.head()) and plain["integrity"]["sequenceNumber"] == 4
    # nothing new: nothing read but the head's ref and the record
    again = verify_dataset(Dataset(ReadLog(root)))
    assert again.ok and not again.full and again.since == dataset.head()
    assert (again.blocks_checked, again.objects_checked) == (0, 0)


def test_incremental_run_reads_only_the_new_blocks_and_objects(root: Path, tmp_path: Path) -> None:
    dataset = open_dataset(root)
    grow(dataset, tmp_path / "staging", 20, "old")
    assert verify_dataset(dataset).full
    verified = dataset.head()
    grow(dataset, tmp_path / "staging", 2, "new")
    store = ReadLog(root)
    report = verify_dataset(Dataset(store))
    assert report.ok and report.since == verified and report.head == dataset.head()
    assert (report.blocks_checked, report.objects_checked) == (2, 2)
    new = [h for h, _ in dataset.iter_blocks(stop=verified)]
    assert sorted(store.kinds("blocks")) == sorted(f"blocks/{h}" for h in new)  # bounded by what is new
    assert len(store.kinds("data")) == 2  # each new data file (then hashed from its file)
    assert read_record(dataset).integrity.head == dataset.head()  # type: ignore[union-attr]


def test_a_tampered_new_object_is_caught_and_nothing_is_recorded(root: Path, tmp_path: Path) -> None:
    dataset = open_dataset(root)
    verify_dataset(dataset)
    before = (root / RECORD_KEY).read_bytes()
    grow(dataset, tmp_path / "staging", 1, "new")
    tamper(data_of(dataset, dataset.existing_head()))
    report = verify_dataset(dataset)
    assert not report.ok and not report.full
    assert [(p.kind, "tampered" in p.message) for p in report.problems] == [("data", True)]
    assert (root / RECORD_KEY).read_bytes() == before  # a failed verification records nothing
    assert not verify_dataset(dataset).ok  # and so the next run checks it again


def test_a_tampered_old_object_is_left_to_a_full_run(root: Path, tmp_path: Path) -> None:
    dataset = open_dataset(root)
    old = dataset.existing_head()
    verify_dataset(dataset)
    grow(dataset, tmp_path / "staging", 1, "new")
    tamper(data_of(dataset, old))
    assert verify_dataset(dataset).ok  # verified earlier: not looked at again
    report = verify_dataset(dataset, full=True)
    assert not report.ok and report.full and report.reason == "full verification asked for"
    assert [p.kind for p in report.problems] == ["data"] and "tampered" in report.problems[0].message


@pytest.mark.parametrize("grow_after", [0, 3])
def test_a_reset_below_the_record_makes_the_next_run_full(
    root: Path, tmp_path: Path, grow_after: int
) -> None:
    dataset = open_dataset(root)
    blocks = [h for h, _ in dataset.iter_blocks()]
    verify_dataset(dataset)
    dataset.reset(blocks[2])  # two blocks below the verified head
    grow(dataset, tmp_path / "staging", grow_after, "other")  # past the record's sequence number, or not
    report = verify_dataset(dataset)
    assert report.ok and report.full
    assert report.reason == (
        f"the verified head {blocks[0]} is no longer in the chain (reset, compaction or diverged pull)"
    )
    assert report.blocks_checked == 3 + grow_after
    assert read_record(dataset).integrity.head == dataset.head()  # type: ignore[union-attr]


def test_a_reset_to_the_verified_head_keeps_the_record(root: Path, tmp_path: Path) -> None:
    dataset = open_dataset(root)
    verify_dataset(dataset)
    verified = dataset.existing_head()
    grow(dataset, tmp_path / "staging", 2, "new")
    dataset.reset(verified)
    report = verify_dataset(dataset)
    assert report.ok and report.since == verified and report.blocks_checked == 0


def test_a_history_rewritten_past_the_record_makes_the_next_run_full(root: Path, tmp_path: Path) -> None:
    """A compaction commits `onto` an earlier block: the blocks after it leave the chain."""
    dataset = open_dataset(root)
    blocks = [h for h, _ in dataset.iter_blocks()]
    verify_dataset(dataset)
    dataset.commit([model.SetInfo(description="rewritten")] * 3, onto=blocks[2])  # same length and more
    report = verify_dataset(dataset)
    assert report.ok and report.full and "no longer in the chain" in str(report.reason)


def test_a_forced_pull_over_a_diverged_history_makes_the_next_run_full(root: Path, tmp_path: Path) -> None:
    dataset = open_dataset(root)
    shutil.copytree(root, tmp_path / "other")
    other = open_dataset(tmp_path / "other")
    grow(other, tmp_path / "staging", 1, "theirs")
    verify_dataset(dataset)
    grow(dataset, tmp_path / "staging", 1, "ours")
    assert verify_dataset(dataset).since is not None
    sync(other, dataset, force=True)
    report = verify_dataset(dataset)
    assert report.ok and report.full and "no longer in the chain" in str(report.reason)


def test_the_record_is_not_pushed_or_pulled(root: Path, tmp_path: Path) -> None:
    dataset = open_dataset(root)
    verify_dataset(dataset)
    ours = (root / RECORD_KEY).read_bytes()
    replica = open_dataset(tmp_path / "replica")
    sync(dataset, replica)
    assert replica.head() == dataset.head()
    assert not (tmp_path / "replica" / RECORD_KEY).exists()
    assert verify_dataset(replica).full  # the replica has its own verification to do
    theirs = (tmp_path / "replica" / RECORD_KEY).read_bytes()
    grow(replica, tmp_path / "staging", 1, "replica")
    sync(replica, dataset)  # and back: each side keeps its own record
    assert (root / RECORD_KEY).read_bytes() == ours
    assert (tmp_path / "replica" / RECORD_KEY).read_bytes() == theirs
    assert verify_dataset(dataset).blocks_checked == 1


@pytest.mark.parametrize(
    "content",
    [b"", b"not json", b'{"version": 99}', b'{"version": 1, "integrity": {"head": "x"}, "replay": null}'],
)
def test_a_damaged_record_is_ignored(root: Path, content: bytes) -> None:
    dataset = open_dataset(root)
    verify_dataset(dataset)
    (root / RECORD_KEY).write_bytes(content)
    assert read_record(dataset) == VerificationRecord()
    report = verify_dataset(dataset)
    assert report.ok and report.full and report.reason == "no earlier verification recorded"


def test_a_record_whose_state_was_edited_is_ignored(root: Path) -> None:
    dataset = open_dataset(root)
    verify_dataset(dataset)
    plain = json.loads((root / RECORD_KEY).read_text())
    plain["integrity"]["state"]["numRecords"] = 1  # its state's digest no longer matches
    (root / RECORD_KEY).write_text(json.dumps(plain))
    assert verify_dataset(dataset).full


def test_a_record_copied_from_another_dataset_is_not_trusted(root: Path, tmp_path: Path) -> None:
    other = open_dataset(tmp_path / "other")
    other.commit([SEED, SCHEMA], system_time=T0, expected_head=None)
    grow(other, tmp_path / "staging", 9, "other")
    verify_dataset(other)
    (root / RECORD_KEY).write_bytes((tmp_path / "other" / RECORD_KEY).read_bytes())
    report = verify_dataset(open_dataset(root))
    assert report.ok and report.full and "no longer in the chain" in str(report.reason)


def test_the_record_round_trips(root: Path) -> None:
    dataset = open_dataset(root)
    verify_dataset(dataset)
    record = read_record(dataset)
    assert record_from_json(record_to_json(record)) == record


def test_a_forged_summary_is_caught_incrementally(root: Path) -> None:
    """Readers trust the summary; an incremental run still compares it with the verified state."""
    dataset = open_dataset(root)
    verify_dataset(dataset)
    forge_summary(root, numRecords=999)
    report = verify_dataset(dataset)
    assert not report.ok and not report.full and [p.kind for p in report.problems] == ["summary"]


def test_a_record_that_cannot_be_written_leaves_the_outcome(root: Path) -> None:
    class NoRecord(LocalObjectStore):
        def put(self, key: str, data: bytes) -> None:
            if key == RECORD_KEY:
                raise OSError("disk full")
            super().put(key, data)

    report = verify_dataset(Dataset(NoRecord(root)))
    assert report.ok and report.recorded == "not written: disk full"
    assert not (root / RECORD_KEY).exists()


def test_integrity_only_records_leave_the_replay_entry(root: Path) -> None:
    """A root dataset has nothing to replay: a run asking for replays records integrity only."""
    dataset = open_dataset(root)
    calls = []
    report = verify_dataset(dataset, replay=lambda since, blocks: calls.append(blocks) or [], engine="local")
    assert report.ok and report.replayed is None and calls == []
    record = read_record(dataset)
    assert record.integrity is not None and record.replay is None

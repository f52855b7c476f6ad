"""The summary's index of data slices, and how a stateful ingest uses it (no Spark: a recording engine).

The index (`ChainState.data_slices`, `data_checkpoint`) must say what a walk of the chain says: the
slices' physical hashes oldest first, and whether the checkpoint was recorded with the last slice. A
stateful ingest reads it instead of the chain, hands the engine only the checkpoint when that is
current, and stages every slice when the checkpoint is stale or the engine asks for them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_odf.odf.chain.dataset import Dataset, fold
from airflow_odf.odf.chain.rules import ChainState, SliceIndex
from airflow_odf.odf.chain.summary import FORMAT_VERSION, SUMMARY_KEY, state_to_json
from airflow_odf.odf.engine_client.contract import IngestRequest
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.operation import IngestError
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.utils.engine_json import NEEDS_PREVIOUS_DATA

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
NAME = "com.acme.orders"
SCHEMA = model.SetDataSchema(
    schema=model.DataSchema(
        fields=[
            model.DataField(name="offset", type=model.DataTypeInt64()),
            model.DataField(name="id", type=model.DataTypeInt64()),
        ]
    )
)


def _hash(text: str) -> Multihash:
    return Multihash.sha3_256(text.encode())


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return Repository.init(tmp_path / "repo")


@pytest.fixture
def orders(repo: Repository) -> Dataset:
    """A root with a Ledger push source and a schema, no data yet."""
    read = model.ReadStepCsv(header=True, ddl_schema=["id BIGINT"])
    source = model.AddPushSource(
        source_name="default", read=read, merge=model.MergeStrategyLedger(primary_key=["id"])
    )
    snapshot = model.DatasetSnapshot(name=NAME, kind=model.DatasetKind.ROOT, metadata=[source, SCHEMA])
    repo.add(snapshot, system_time=T0)
    return repo.dataset(NAME)


def add(dataset: Dataset, records: int = 0, *, checkpoint: bool = False, watermark: int = 0) -> None:
    """One AddData: a made-up slice of `records` records (none: 0), a made-up checkpoint, or a watermark
    (minutes after T0). Nothing reads the files."""
    state = dataset.state()
    start = 0 if state.last_offset is None else state.last_offset + 1
    new_data = None
    if records:
        new_data = model.DataSlice(
            logical_hash=Multihash(ARROW0_SHA3_256, bytes(32)),
            physical_hash=_hash(f"slice {start}"),
            offset_interval=model.OffsetInterval(start=start, end=start + records - 1),
            size=records,
        )
    new_checkpoint = model.Checkpoint(physical_hash=_hash(f"cp {start}"), size=1) if checkpoint else None
    event = model.AddData(
        prev_checkpoint=state.checkpoint.physical_hash if state.checkpoint else None,
        prev_offset=state.last_offset,
        new_data=new_data,
        new_checkpoint=new_checkpoint,
        new_watermark=Timestamp(T0.seconds + watermark * 60) if watermark else state.watermark,
    )
    dataset.commit([event], system_time=T0)


def walked(dataset: Dataset) -> tuple[list[Multihash], bool]:
    """What a chain walk says (the rule the ingest used before the index): the slices oldest first, and
    whether the checkpoint was recorded by the block of the last slice."""
    adds = [
        block.event
        for _, block in dataset.iter_blocks()
        if isinstance(block.event, model.AddData) and block.event.new_data is not None
    ]
    checkpoint = dataset.state().checkpoint
    current = checkpoint is not None and bool(adds) and adds[0].new_checkpoint == checkpoint
    return [e.new_data.physical_hash for e in reversed(adds)], current


def assert_index_matches_the_chain(dataset: Dataset) -> None:
    slices, current = walked(dataset)
    state = dataset.state()
    assert list(state.data_slices) == slices and len(state.data_slices) == len(slices)
    assert state.checkpoint_is_current == current
    from_blocks = fold(ChainState(), reversed(list(dataset.iter_blocks())))
    assert from_blocks == state  # the summary read back equals the fold of the chain


# --------------------------------------------------------------------------------------------------
# the index
# --------------------------------------------------------------------------------------------------


def test_the_slice_index_matches_a_chain_walk_after_every_commit(orders: Dataset) -> None:
    steps: list[Callable[[], None]] = [
        lambda: add(orders, 3, checkpoint=True),  # our ingests: the checkpoint on the slice's block
        lambda: add(orders, watermark=5),  # a watermark alone: the checkpoint stays current
        lambda: add(orders, 2, checkpoint=True),
        lambda: add(orders, 1),  # data without a checkpoint (another tool): stale
        lambda: add(orders, checkpoint=True),  # a checkpoint without data: still stale
        lambda: add(orders, 4, checkpoint=True),  # current again
    ]
    assert_index_matches_the_chain(orders)
    currents = []
    for step in steps:
        step()
        assert_index_matches_the_chain(orders)
        currents.append(orders.state().checkpoint_is_current)
    assert currents == [True, True, True, False, False, True]
    assert [str(h) for h in orders.state().data_slices] == [
        str(_hash(f"slice {start}")) for start in (0, 3, 5, 6)
    ]


def test_the_index_is_rebuilt_with_the_summary(orders: Dataset) -> None:
    for n in range(1, 6):
        add(orders, n, checkpoint=n % 2 == 1)
    expected = orders.state()
    orders.store.delete(SUMMARY_KEY)
    assert orders.state() == expected
    assert json.loads(orders.store.get(SUMMARY_KEY))["dataSlices"] == expected.data_slices.texts()


def test_a_summary_of_the_previous_format_is_rebuilt(orders: Dataset) -> None:
    """A version-1 summary (no index) with a valid digest is not trusted: the state comes from the chain."""
    add(orders, 2, checkpoint=True)
    expected = orders.state()
    plain = json.loads(state_to_json(expected))
    del plain["digest"], plain["dataSlices"], plain["dataCheckpoint"]
    plain["version"] = 1
    text = json.dumps(plain, separators=(",", ":"), ensure_ascii=False)
    plain["digest"] = hashlib.sha3_256(text.encode()).hexdigest()
    orders.store.put(SUMMARY_KEY, json.dumps(plain, separators=(",", ":")).encode())
    state = orders.state()
    assert state == expected and len(state.data_slices) == 1 and state.checkpoint_is_current
    assert json.loads(orders.store.get(SUMMARY_KEY))["version"] == FORMAT_VERSION == 2


def test_a_slice_index_is_persistent_and_compares_by_value() -> None:
    hashes = [_hash(str(i)) for i in range(5)]
    index = SliceIndex()
    for h in hashes[:3]:
        index = index.append(h)
    branch_a, branch_b = index.append(hashes[3]), index.append(hashes[4])
    assert list(index) == hashes[:3]  # appending left it unchanged
    assert list(branch_a) == hashes[:4] and list(branch_b) == [*hashes[:3], hashes[4]]
    assert branch_a == SliceIndex(str(h) for h in hashes[:4]) != branch_b
    assert len(branch_b) == 4 and len(SliceIndex()) == 0 and SliceIndex() == SliceIndex([])


# --------------------------------------------------------------------------------------------------
# what a stateful ingest hands the engine
# --------------------------------------------------------------------------------------------------


class RecordingEngine:
    """Answers each request with the next of `answers` (an error kind, or None: nothing written), and
    keeps the requests and what their out_dir held when they arrived."""

    def __init__(self, *answers: str | None) -> None:
        self.answers = list(answers)
        self.requests: list[IngestRequest] = []
        self.out_dir_held: list[list[str]] = []

    def run(self, request_json: str, work_dir: Path) -> str:
        request = IngestRequest.from_json(request_json)
        self.requests.append(request)
        out = Path(request.out_dir)
        self.out_dir_held.append(sorted(p.name for p in out.iterdir()) if out.is_dir() else [])
        out.mkdir(parents=True, exist_ok=True)
        (out / "partial.parquet").write_bytes(b"left by an attempt")
        kind = self.answers.pop(0)
        error = None if kind is None else {"kind": kind, "message": f"{kind}: details"}
        return json.dumps({"version": 1, "error": error})


def ingest(orders: Dataset, engine: RecordingEngine, tmp_path: Path) -> None:
    data = tmp_path / "in.csv"
    data.write_text("id\n1\n")
    push_ingest(orders, NAME, engine, [data], IngestOptions(work_dir=tmp_path / "work"), system_time=T0)


def test_a_current_checkpoint_is_sent_alone_and_no_chain_is_walked(
    orders: Dataset, tmp_path: Path, count_walks: list[int]
) -> None:
    for n in (2, 3, 4):
        add(orders, n, checkpoint=True)
    state = orders.state()
    count_walks[0] = 0
    engine = RecordingEngine(None)
    ingest(orders, engine, tmp_path)
    [request] = engine.requests
    assert count_walks[0] == 0
    assert request.prev_checkpoint_path == str(orders.store.local_path(f"checkpoints/{_hash('cp 5')}"))
    assert request.prev_data_paths == [] and request.prev_data_withheld == 3
    assert orders.state() == state  # the engine wrote nothing: nothing committed


def test_a_stale_checkpoint_sends_every_slice_oldest_first(
    orders: Dataset, tmp_path: Path, count_walks: list[int]
) -> None:
    add(orders, 2, checkpoint=True)
    add(orders, 3)  # data after the checkpoint, without one
    count_walks[0] = 0
    engine = RecordingEngine(None)
    ingest(orders, engine, tmp_path)
    [request] = engine.requests
    assert count_walks[0] == 0
    assert request.prev_checkpoint_path is None and request.prev_data_withheld == 0
    assert request.prev_data_paths == [
        str(orders.store.local_path(f"data/{_hash(f'slice {start}')}")) for start in (0, 2)
    ]


def test_an_engine_that_asks_gets_every_slice_in_the_same_request_again(
    orders: Dataset, tmp_path: Path
) -> None:
    add(orders, 2, checkpoint=True)
    add(orders, 3, checkpoint=True)
    engine = RecordingEngine(NEEDS_PREVIOUS_DATA, None)
    ingest(orders, engine, tmp_path)
    first, second = engine.requests
    assert (first.prev_data_paths, first.prev_data_withheld) == ([], 2)
    assert second.prev_data_withheld == 0
    assert second.prev_data_paths == [
        str(orders.store.local_path(f"data/{_hash(f'slice {start}')}")) for start in (0, 2)
    ]
    same = {"prev_data_paths": [], "prev_data_withheld": 0}
    assert {**vars(first), **same} == {**vars(second), **same}  # the checkpoint and all else unchanged
    assert engine.out_dir_held == [[], []]  # what the first attempt left was cleared


def test_an_engine_asking_for_slices_that_were_all_sent_fails_the_ingest(
    orders: Dataset, tmp_path: Path
) -> None:
    add(orders, 2)  # no checkpoint: every slice is sent at once
    engine = RecordingEngine(NEEDS_PREVIOUS_DATA)
    with pytest.raises(IngestError) as failure:
        ingest(orders, engine, tmp_path)
    assert failure.value.kind == NEEDS_PREVIOUS_DATA and len(engine.requests) == 1

"""Record provenance (`odf inspect provenance`, `airflow_odf.odf.repo.provenance`) on chains built
directly, without an engine: roots, a derivative of a derivative, a join, a diamond, a missing input, a
reset and a compacted input, a step that wrote nothing, the errors, the JSON and the text; and the
pieces it stands on (merged offset intervals, the lazy chain index).

`Chains` commits AddData and ExecuteTransform blocks as a transform would (rules checked on commit),
with no data files: provenance reads metadata only. bench/bench_provenance.py builds its chains with it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.chain.block_index import ChainIndex
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.integrity import collect_garbage
from airflow_odf.odf.chain.offsets import consumed_interval, merged, without
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, DatasetId, Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.operation import IngestResult
from airflow_odf.odf.repo.provenance import (
    DIVERGED,
    MISSING,
    RESOLVED,
    UNRESOLVED,
    WHAT_IT_PROVES,
    DatasetProvenance,
    ProvenanceError,
    provenance,
)
from airflow_odf.odf.repo.repository import Repository
from tests.unit.test_transform_plan import SCHEMA, T0, derivative


def _slice(tag: str, start: int, records: int) -> model.DataSlice:
    return model.DataSlice(
        logical_hash=Multihash(ARROW0_SHA3_256, Multihash.sha3_256(b"l" + tag.encode()).digest),
        physical_hash=Multihash.sha3_256(b"p" + tag.encode()),
        offset_interval=model.OffsetInterval(start=start, end=start + records - 1),
        size=100 * records,
    )


class Chains:
    """Grows roots and derivatives block by block; remembers each dataset's data blocks
    `(hash, last offset)` in order, which the steps of derivatives read up to."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo
        self.data: dict[str, list[tuple[Multihash, int]]] = {}
        self.read: dict[str, dict[str, tuple[Multihash, int | None]]] = {}  # derivative -> input -> last

    def _commit(self, name: str, events: list[Any], last: int | None) -> list[Multihash]:
        dataset = self.repo.dataset(name)
        first = [SCHEMA] if dataset.state().schema is None else []
        blocks = dataset.commit([*first, *events], system_time=T0).new_blocks[len(first) :]
        offset = last
        for block_hash, event in zip(blocks, events, strict=True):
            if getattr(event, "new_data", None) is not None:
                offset = event.new_data.offset_interval.end
                self.data.setdefault(name, []).append((block_hash, offset))
        return blocks

    def _last(self, name: str) -> int | None:
        return self.data[name][-1][1] if self.data.get(name) else None

    def root(self, name: str, sizes: list[int]) -> list[Multihash]:
        """A root (created if new) with one AddData per size: a source state and a watermark each."""
        if name not in self.data:
            self.repo.add(
                model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=[]), system_time=T0
            )
            self.data[name] = []
        events = []
        last = self._last(name)
        for size in sizes:
            start = 0 if last is None else last + 1
            n = len(self.data[name]) + len(events)
            events.append(
                model.AddData(
                    prev_offset=last,
                    new_data=_slice(f"{name}/{n}", start, size),
                    new_watermark=Timestamp(T0.seconds + 3600 * n),
                    new_source_state=model.SourceState(
                        source_name="default", kind="odf/etag", value=f'"{n}"'
                    ),
                )
            )
            last = start + size - 1
        return self._commit(name, events, self._last(name))

    def derivative(self, name: str, *inputs: str) -> None:
        """A derivative reading the given datasets, each by its name as alias."""
        derivative(self.repo, [(i, i) for i in inputs], name)
        self.data[name] = []
        self.read[name] = {}

    def steps(self, name: str, steps: list[tuple[dict[str, int], int]]) -> list[Multihash]:
        """One ExecuteTransform per step: each input read up to its data block of the given index (an
        input left out: nothing new of it), and that many records written (0: none)."""
        transform = self.repo.dataset(name).state().transform
        assert transform is not None
        order = [(ti.alias, ti.dataset_ref) for ti in transform.inputs]
        events = []
        last = self._last(name)
        for up_to, records in steps:
            query_inputs = []
            for alias, did in order:
                prev_block, prev_offset = self.read[name].get(alias, (None, None))
                if alias in up_to:
                    new_block, new_offset = self.data[alias][up_to[alias]]
                    self.read[name][alias] = (new_block, new_offset)
                else:
                    new_block, new_offset = None, None
                query_inputs.append(
                    model.ExecuteTransformInput(
                        dataset_id=DatasetId.parse(did),
                        prev_block_hash=prev_block,
                        new_block_hash=new_block,
                        prev_offset=prev_offset,
                        new_offset=None if new_offset == prev_offset else new_offset,
                    )
                )
            start = 0 if last is None else last + 1
            n = len(self.data[name]) + len(events)
            new_data = _slice(f"{name}/{n}", start, records) if records else None
            events.append(
                model.ExecuteTransform(query_inputs=query_inputs, prev_offset=last, new_data=new_data)
            )
            last = last if not records else start + records - 1
        return self._commit(name, events, self._last(name))


@pytest.fixture
def chains(tmp_path: Path) -> Chains:
    """trades (offsets 0..2, 3..4, 5..9) and prices (0..1, 2..3) roots; daily <- trades (0..1 from trades
    0..2, nothing from 3..4, 2..3 from 3..9); weekly <- daily (0 from daily 0..3); joined <- trades and
    prices (0..4 from trades 0..4 and prices 0..1)."""
    c = Chains(Repository.init(tmp_path / "repo"))
    c.root("trades", [3, 2, 5])
    c.root("prices", [2, 2])
    c.derivative("daily", "trades")
    c.steps("daily", [({"trades": 0}, 2), ({"trades": 1}, 0), ({"trades": 2}, 2)])
    c.derivative("weekly", "daily")
    c.steps("weekly", [({"daily": 1}, 1)])
    c.derivative("joined", "trades", "prices")
    c.steps("joined", [({"trades": 1, "prices": 0}, 5)])
    return c


def did(c: Chains, name: str) -> str:
    return str(c.repo.resolve(name))


def block(c: Chains, name: str, i: int) -> str:
    """The hash of a dataset's i-th data block."""
    return str(c.data[name][i][0])


def summary(node: DatasetProvenance) -> tuple[Any, ...]:
    return node.name, node.status, node.offsets, [(b.block_hash, b.offsets) for b in node.blocks]


# ----- the core -----


def test_a_root_record_is_in_the_adddata_that_added_it(chains: Chains) -> None:
    answer = provenance(chains.repo, "trades", offset=4)
    [node] = answer.datasets
    assert summary(node) == ("trades", RESOLVED, [(4, 4)], [(block(chains, "trades", 1), (3, 4))])
    [found] = node.blocks
    assert (found.event, found.sequence_number, found.inputs) == ("AddData", 3, [])
    assert found.source_state == model.SourceState(source_name="default", kind="odf/etag", value='"1"')
    assert found.watermark == "2024-01-01T01:00:00Z"
    assert (answer.dataset_id, answer.offset, answer.block) == (did(chains, "trades"), 4, None)


def test_two_levels_down_to_the_root(chains: Chains) -> None:
    answer = provenance(chains.repo, "weekly", offset=0)
    weekly, daily, trades = answer.datasets
    assert summary(weekly) == ("weekly", RESOLVED, [(0, 0)], [(block(chains, "weekly", 0), (0, 0))])
    [step] = weekly.blocks[0].inputs
    assert (step.dataset_id, step.name, step.offsets) == (did(chains, "daily"), "daily", (0, 3))
    assert (step.prev_block_hash, step.new_block_hash) == (None, block(chains, "daily", 1))
    # daily's two data steps (not the one between them that wrote nothing), and what each read
    assert summary(daily) == (
        "daily",
        RESOLVED,
        [(0, 3)],
        [(block(chains, "daily", 0), (0, 1)), (block(chains, "daily", 1), (2, 3))],
    )
    assert [[i.offsets for i in b.inputs] for b in daily.blocks] == [[(0, 2)], [(5, 9)]]
    assert daily.blocks[1].inputs[0].prev_block_hash == block(chains, "trades", 1)
    # trades: 0..2 and 5..9, not 3..4 (read by the step that wrote nothing)
    assert summary(trades) == (
        "trades",
        RESOLVED,
        [(0, 2), (5, 9)],
        [(block(chains, "trades", 0), (0, 2)), (block(chains, "trades", 2), (5, 9))],
    )
    assert [n.depth for n in answer.datasets] == [0, 1, 2]
    assert (daily.kind, trades.kind) == ("Derivative", "Root")


def test_a_join_leads_to_both_inputs(chains: Chains) -> None:
    joined, trades, prices = provenance(chains.repo, "joined", offset=3).datasets
    [step] = joined.blocks
    assert [(i.name, i.offsets, i.new_block_hash) for i in step.inputs] == [
        ("trades", (0, 4), block(chains, "trades", 1)),
        ("prices", (0, 1), block(chains, "prices", 0)),
    ]
    assert summary(trades)[2:] == (
        [(0, 4)],
        [(block(chains, "trades", 0), (0, 2)), (block(chains, "trades", 1), (3, 4))],
    )
    assert summary(prices)[2:] == ([(0, 1)], [(block(chains, "prices", 0), (0, 1))])


def test_a_dataset_reached_twice_is_searched_once_with_its_intervals_merged(chains: Chains) -> None:
    chains.derivative("both", "daily", "trades")
    chains.steps("both", [({"daily": 0, "trades": 1}, 1)])  # daily 0..1 (from trades 0..2), trades 0..4
    both, daily, trades = provenance(chains.repo, "both", offset=0).datasets
    assert trades.offsets == [(0, 4)]  # 0..2 through daily and 0..4 directly: one interval
    assert [b.block_hash for b in trades.blocks] == [block(chains, "trades", 0), block(chains, "trades", 1)]
    assert [n.depth for n in (both, daily, trades)] == [0, 1, 1]


def test_an_input_not_in_the_repository_is_missing_with_what_was_read_of_it(chains: Chains) -> None:
    prices = did(chains, "prices")
    shutil.rmtree(chains.repo.root / "datasets" / prices.removeprefix("did:odf:"))
    (chains.repo.root / "aliases" / "prices").unlink()
    joined, trades, missing = provenance(chains.repo, "joined", offset=0).datasets
    assert (missing.dataset_id, missing.name, missing.kind, missing.status) == (prices, None, None, MISSING)
    assert missing.offsets == [(0, 1)] and missing.blocks == []
    assert "not in this repository" in missing.reasons[0]
    assert trades.status == RESOLVED and joined.blocks[0].inputs[1].name is None


def _compact(c: Chains) -> Multihash:
    """Rebuilds trades' chain as a hard compaction does: its ten records in one new AddData block."""
    trades = c.repo.dataset("trades")
    [schema_block] = [h for h, b in trades.iter_blocks() if isinstance(b.event, model.SetDataSchema)]
    trades.reset(schema_block)
    return trades.commit([model.AddData(new_data=_slice("merged", 0, 10))], system_time=T0).new_head


def test_a_compacted_input_shows_the_blocks_read_while_they_are_in_the_store(chains: Chains) -> None:
    _compact(chains)
    _, daily, trades = provenance(chains.repo, "weekly", offset=0).datasets
    assert daily.status == RESOLVED and all(b.in_chain for b in daily.blocks)
    assert (trades.status, [b.block_hash for b in trades.blocks]) == (
        DIVERGED,
        [block(chains, "trades", 0), block(chains, "trades", 2)],
    )
    assert [b.in_chain for b in trades.blocks] == [False, False]
    [reason] = trades.reasons
    assert reason.startswith("blocks daily read hold records that are no longer in its chain")


def test_after_gc_a_compacted_input_is_found_by_offset(chains: Chains) -> None:
    merged_block = _compact(chains)
    collect_garbage(chains.repo.dataset("trades"), min_age_seconds=0)
    _, daily, trades = provenance(chains.repo, "weekly", offset=0).datasets
    assert daily.status == RESOLVED
    assert (trades.status, [b.block_hash for b in trades.blocks]) == (DIVERGED, [str(merged_block)])
    assert trades.offsets == [(0, 2), (5, 9)] and trades.blocks[0].in_chain
    [reason] = trades.reasons
    assert reason.startswith("blocks daily read are no longer in the repository")


def test_records_no_longer_in_a_reset_input(chains: Chains) -> None:
    chains.repo.dataset("trades").reset(chains.data["trades"][0][0])  # back to offsets 0..2
    *_, trades = provenance(chains.repo, "weekly", offset=0).datasets
    assert trades.status == DIVERGED  # the blocks read are in the store still: shown as read
    assert [(b.block_hash, b.in_chain) for b in trades.blocks] == [
        (block(chains, "trades", 0), True),
        (block(chains, "trades", 2), False),
    ]
    collect_garbage(chains.repo.dataset("trades"), min_age_seconds=0)
    *_, trades = provenance(chains.repo, "weekly", offset=0).datasets
    assert trades.status == UNRESOLVED
    assert [b.block_hash for b in trades.blocks] == [block(chains, "trades", 0)]  # 0..2 still there
    assert trades.reasons == [
        "blocks daily read are no longer in the repository (it was reset or compacted since, then `odf gc` "
        "ran): its records are found by offset in its chain now, which a hard compaction keeps and a reset "
        "followed by new data does not",
        "offsets 5..9 are not in its chain (its records are offsets 0..2): it was reset, or compacted with "
        "--keep-metadata-only, since they were read",
    ]


def test_a_block_gives_all_its_records_and_a_step_that_wrote_nothing_its_inputs(chains: Chains) -> None:
    daily, trades = provenance(chains.repo, "daily", block=block(chains, "daily", 1)).datasets
    assert (daily.offsets, trades.offsets) == ([(2, 3)], [(5, 9)])
    nothing = next(
        h
        for h, b in chains.repo.dataset("daily").iter_blocks()
        if isinstance(b.event, model.ExecuteTransform) and b.event.new_data is None
    )
    daily, trades = provenance(chains.repo, "daily", block=str(nothing)).datasets
    assert daily.offsets == [] and daily.blocks[0].offsets is None
    assert summary(trades)[2:] == ([(3, 4)], [(block(chains, "trades", 1), (3, 4))])


def test_questions_that_cannot_be_asked(chains: Chains) -> None:
    with pytest.raises(
        ProvenanceError, match=r"^offset 10 is beyond the data of trades: its records are offsets 0\.\.9$"
    ):
        provenance(chains.repo, "trades", offset=10)
    with pytest.raises(ProvenanceError, match="is not in the chain of trades"):
        provenance(chains.repo, "trades", block=block(chains, "prices", 0))
    seed = next(h for h, b in chains.repo.dataset("trades").iter_blocks() if b.sequence_number == 0)
    with pytest.raises(
        ProvenanceError, match="is a Seed: only AddData and ExecuteTransform blocks hold records"
    ):
        provenance(chains.repo, "trades", block=str(seed))
    with pytest.raises(ProvenanceError, match="'f16zz' is not a block hash"):
        provenance(chains.repo, "trades", block="f16zz")
    chains.derivative("empty", "trades")
    with pytest.raises(ProvenanceError, match=r"^empty has no records yet"):
        provenance(chains.repo, "empty", offset=0)


def test_blocks_beyond_the_limit_are_counted_not_listed(chains: Chains) -> None:
    *_, trades = provenance(chains.repo, "weekly", offset=0, max_blocks=1).datasets
    assert (trades.num_blocks, [b.offsets for b in trades.blocks]) == (2, [(0, 2)])


# ----- the command -----


def odf(c: Chains, capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> str:
    assert main(["inspect", "provenance", *args, "--repo", str(c.repo.root)]) == code
    out, err = capsys.readouterr()
    return err if code else out


def test_json_output(chains: Chains, capsys: pytest.CaptureFixture[str]) -> None:
    answer = json.loads(odf(chains, capsys, "joined", "--offset", "3", "-o", "json"))
    assert (answer["dataset"], answer["dataset_id"], answer["offset"], answer["block"]) == (
        "joined",
        did(chains, "joined"),
        3,
        None,
    )
    assert answer["note"] == WHAT_IT_PROVES
    joined, trades, prices = answer["datasets"]
    assert joined["blocks"][0]["inputs"][1] == {
        "dataset_id": did(chains, "prices"),
        "name": "prices",
        "prev_block_hash": None,
        "new_block_hash": block(chains, "prices", 0),
        "offsets": {"start": 0, "end": 1},
    }
    assert prices == {
        "dataset_id": did(chains, "prices"),
        "name": "prices",
        "kind": "Root",
        "depth": 1,
        "status": "resolved",
        "reasons": [],
        "offsets": [{"start": 0, "end": 1}],
        "num_blocks": 1,
        "blocks": [
            {
                "block": block(chains, "prices", 0),
                "sequence_number": 2,
                "system_time": "2024-01-01T00:00:00Z",
                "event": "AddData",
                "offsets": {"start": 0, "end": 1},
                "watermark": "2024-01-01T00:00:00Z",
                "source_state": {"source_name": "default", "kind": "odf/etag", "value": '"0"'},
                "inputs": [],
                "in_chain": True,
            }
        ],
    }
    assert [b["block"] for b in trades["blocks"]] == [block(chains, "trades", 0), block(chains, "trades", 1)]
    by_block = json.loads(odf(chains, capsys, "trades", "--block", block(chains, "trades", 2), "-o", "json"))
    assert (by_block["offset"], by_block["block"]) == (None, block(chains, "trades", 2))
    assert by_block["datasets"][0]["offsets"] == [{"start": 5, "end": 9}]


def test_text_output_is_a_tree_that_says_what_it_proves(
    chains: Chains, capsys: pytest.CaptureFixture[str]
) -> None:
    text = odf(chains, capsys, "weekly", "--offset", "0")
    lines = text.splitlines()
    assert lines[0] == f"weekly offset 0: written by ExecuteTransform {block(chains, 'weekly', 0)} (#3)"
    assert "may have contributed" in text and "and no others" in text
    assert f"weekly  {did(chains, 'weekly')}  Derivative  offsets 0" in lines
    assert f"└─ ExecuteTransform {block(chains, 'daily', 1)}  #5  2024-01-01T00:00:00Z  offsets 2..3" in lines
    assert (
        f"   └─ read daily  {did(chains, 'daily')}  offsets 0..3  blocks up to {block(chains, 'daily', 1)}"
        in lines
    )
    assert f"trades  {did(chains, 'trades')}  Root  offsets 0..2, 5..9" in lines
    assert any(
        line.startswith(f"├─ AddData {block(chains, 'trades', 0)}  #2") and "source default" in line
        for line in lines
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("trades", "--offset", "10"),
            "offset 10 is beyond the data of trades: its records are offsets 0..9",
        ),
        (("trades", "--block", "f1620" + "0" * 64), "is not in the chain of trades"),
        (("nope", "--offset", "0"), "no dataset named 'nope' in "),
    ],
)
def test_errors_are_one_line_and_exit_2(
    chains: Chains, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    err = odf(chains, capsys, *args, code=2)
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_offset_and_block_are_exclusive_and_required(
    chains: Chains, capsys: pytest.CaptureFixture[str]
) -> None:
    for args in (
        ("trades",),
        ("trades", "--offset", "1", "--block", block(chains, "trades", 0)),
        ("trades", "--offset", "-1"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["inspect", "provenance", *args, "--repo", str(chains.repo.root)])
        assert exit_.value.code == 2
    capsys.readouterr()


# ----- the pieces -----


def test_intervals_merge_and_subtract() -> None:
    assert merged([(5, 9), (0, 2), (3, 4), (20, 20), (8, 12)]) == [(0, 12), (20, 20)]
    assert without([(0, 12), (20, 25)], [(3, 4), (10, 21)]) == [(0, 2), (5, 9), (22, 25)]
    assert without([(0, 5)], []) == [(0, 5)] and without([(0, 5)], [(0, 9)]) == []
    assert consumed_interval(None, 4) == model.OffsetInterval(start=0, end=4)
    assert consumed_interval(4, 9) == model.OffsetInterval(start=5, end=9)
    assert consumed_interval(4, None) is None


def test_the_index_walks_only_as_far_back_as_asked(chains: Chains, monkeypatch: pytest.MonkeyPatch) -> None:
    trades = chains.repo.dataset("trades")
    read: list[Multihash] = []
    original = Dataset.block

    def counted(self: Dataset, h: Multihash) -> model.MetadataBlock:
        read.append(h)
        return original(self, h)

    monkeypatch.setattr(Dataset, "block", counted)
    index = ChainIndex(trades, trades.head())
    assert [b.block_hash for b in index.data_blocks(6, 7)] == [chains.data["trades"][2][0]]
    assert read == [chains.data["trades"][2][0]]  # the head holds them: one block read
    assert [(b.start, b.end) for b in index.data_blocks(0, 9)] == [(0, 2), (3, 4), (5, 9)]
    assert index.sequence_number(chains.data["trades"][0][0]) == 2
    assert index.sequence_number(chains.data["prices"][0][0]) is None  # walked to the Seed, not found
    walked = len(read)
    assert index.data_blocks(3, 3)[0].end == 4 and index.last_offset() == 9
    assert len(read) == walked == 5  # Seed, SetDataSchema... each block once: nothing read again


def test_a_transform_result_counts_the_offsets_its_steps_read(chains: Chains) -> None:
    """The transform operator's XCom `input_offsets`: per input, what its own ExecuteTransforms read,
    merged; an input it read nothing of has an empty list; an ingest's result has no such key."""
    result = IngestResult("joined", did(chains, "joined"), None, None, input_offsets={})
    for step in chains.steps("joined", [({"prices": 1}, 1)]):
        result.add_inputs_read(chains.repo.dataset("joined").block(step).event)
    assert result.as_dict()["input_offsets"] == {
        did(chains, "trades"): [],
        did(chains, "prices"): [{"start": 2, "end": 3}],
    }
    first = chains.repo.dataset("joined").block(Multihash.parse(block(chains, "joined", 0))).event
    result.add_inputs_read(first)
    assert result.as_dict()["input_offsets"] == {
        did(chains, "trades"): [{"start": 0, "end": 4}],
        did(chains, "prices"): [{"start": 0, "end": 3}],
    }
    assert "input_offsets" not in IngestResult("trades", did(chains, "trades"), None, None).as_dict()

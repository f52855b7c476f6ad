"""Chain growth: is an append at block 10,000 as cheap as at block 100, and how fast is opening a dataset?

Issue 3 targets, measured on datasets in a temp directory (local disk by default, `--dir` to change):
  * append cost near block 10,000 / append cost near block 100 <= 1.2 (median of `--samples` appends each);
  * open a dataset with 10,000 blocks and read its state (new `Dataset` + `state()`) < 50 ms (median).
Baseline in the same run: the same open without the summary index (`info/summary` deleted first), i.e. a
full chain walk + fold — what every open would cost without the summary.

Appends are what real use does: one `Dataset.commit` per block (read state, encode, validate, write the
block, compare-and-swap the head, write the summary; every write fsync'ed). Events alternate AddData with
a new 100-record slice, a rising watermark and a source state, and every tenth block is a SetInfo. No
data files are staged, so the numbers are the metadata chain's own cost.

The append comparison is interleaved: once the big dataset has `--blocks` blocks, a second dataset is
grown to just under 100 blocks, then one append to the small one and one to the big one alternate
`--samples` times, so both medians see the same disk conditions (fsync latency drifts over a run). The
same windows measured while the big chain was being built are printed too, for reference.

Run: .venv/bin/python bench/bench_chain.py [--blocks 10000] [--samples 50] [--opens 20] [--walks 5]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine_info import cpu_model

from airflow_odf.odf.chain.dataset import Dataset, fold
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.chain.summary import SUMMARY_KEY
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, DatasetId, Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.storage.local import LocalObjectStore

SCHEMA = model.SetDataSchema(
    schema=model.DataSchema(
        fields=[
            model.DataField(name="offset", type=model.DataTypeInt64()),
            model.DataField(name="op", type=model.DataTypeInt32()),
            model.DataField(
                name="system_time", type=model.DataTypeTimestamp(unit=model.TimeUnit.MILLISECOND)
            ),
            model.DataField(name="event_time", type=model.DataTypeTimestamp(unit=model.TimeUnit.MILLISECOND)),
            model.DataField(name="value", type=model.DataTypeOption(inner=model.DataTypeFloat64())),
        ]
    )
)
WATERMARK_START = Timestamp.parse("2024-01-01T00:00:00Z").seconds


def next_event(seq: int, last_offset: int | None) -> model.AddData | model.SetInfo:
    """The event of block `seq`: a SetInfo every tenth block, else a 100-record slice with a watermark."""
    if seq % 10 == 0:
        return model.SetInfo(description=f"revision {seq}", keywords=["bench", "chain"])
    start = 0 if last_offset is None else last_offset + 1
    return model.AddData(
        prev_offset=last_offset,
        new_data=model.DataSlice(
            logical_hash=Multihash(ARROW0_SHA3_256, Multihash.sha3_256(b"l%d" % seq).digest),
            physical_hash=Multihash.sha3_256(b"p%d" % seq),
            offset_interval=model.OffsetInterval(start=start, end=start + 99),
            size=40_000 + seq % 977,
        ),
        new_watermark=Timestamp(WATERMARK_START + seq * 60),
        new_source_state=model.SourceState(source_name="default", kind="odf/etag", value=f'"{seq:08x}"'),
    )


class Chain:
    """One dataset being appended to, one commit per block, timing each append."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ds = Dataset(LocalObjectStore(root))
        seed = model.Seed(dataset_id=DatasetId(bytes(range(32))), dataset_kind=model.DatasetKind.ROOT)
        self.ds.commit([seed, SCHEMA])
        self.seq = 2  # sequence number of the next block
        self.last_offset: int | None = None

    def append(self) -> float:
        event = next_event(self.seq, self.last_offset)
        t0 = time.perf_counter()
        result = self.ds.commit([event])
        elapsed = time.perf_counter() - t0
        assert result.state.sequence_number == self.seq
        if isinstance(event, model.AddData) and event.new_data is not None:
            self.last_offset = event.new_data.offset_interval.end
        self.seq += 1
        return elapsed


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def machine() -> str:
    u = platform.uname()
    return (
        f"{u.system} {u.release} {u.machine}; {cpu_model()} x{os.cpu_count()}; "
        f"Python {platform.python_version()} ({sys.implementation.name})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=10_000, help="length of the big chain")
    parser.add_argument("--samples", type=int, default=50, help="appends measured at each size")
    parser.add_argument("--opens", type=int, default=20)
    parser.add_argument("--walks", type=int, default=5)
    parser.add_argument("--dir", help="parent directory of the temp datasets (default: system temp)")
    args = parser.parse_args()
    n, k = args.blocks, args.samples
    small_start = 100 - k // 2  # the small chain's appends make blocks small_start .. small_start + k - 1
    assert small_start >= 2 and n > 100 + k

    tmp = Path(tempfile.mkdtemp(prefix="odf-bench-chain-", dir=args.dir))
    print(f"machine: {machine()}")
    print(f"date:    {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    print(f"dir:     {tmp} (medians of {k} appends / {args.opens} opens / {args.walks} walks)")
    try:
        big = Chain(tmp / "big")
        build: dict[int, float] = {}
        t_build = time.perf_counter()
        while big.seq < n:
            seq = big.seq
            build[seq] = big.append()
        build_s = time.perf_counter() - t_build
        state = big.ds.state()
        assert state.num_blocks == n and state.last_offset == big.last_offset
        print(
            f"built:   {n:,} blocks, {n - 2:,} appends in {build_s:.1f} s "
            f"({(n - 2) / build_s:,.0f} appends/s)"
        )

        # ----- open + state() at n blocks, with the summary and (baseline) without -----
        opens = []
        for _ in range(args.opens):
            t0 = time.perf_counter()
            opened = Dataset(LocalObjectStore(big.root)).state()
            opens.append(time.perf_counter() - t0)
            assert opened == state
        open_ms = median_ms(opens)
        walks = []
        for _ in range(args.walks):
            (big.root / SUMMARY_KEY).unlink()
            t0 = time.perf_counter()
            walked = Dataset(LocalObjectStore(big.root)).state()
            walks.append(time.perf_counter() - t0)
            assert walked == state
        walk_ms = median_ms(walks)
        blocks = list(reversed(list(big.ds.iter_blocks())))
        t0 = time.perf_counter()
        assert fold(ChainState(), blocks) == state
        fold_ms = (time.perf_counter() - t0) * 1000

        # ----- append near block 100 vs near block n, interleaved -----
        small = Chain(tmp / "small")
        while small.seq < small_start:
            small.append()
        near_small, near_big = [], []
        for _ in range(k):
            near_small.append(small.append())
            near_big.append(big.append())
        small_ms, big_ms = median_ms(near_small), median_ms(near_big)
        ratio = big_ms / small_ms
        during_small = median_ms([build[s] for s in range(small_start, small_start + k)])
        during_big = median_ms([build[s] for s in range(n - k, n)])

        print()
        print(f"append, interleaved: blocks {small_start}-{small.seq - 1}:     median {small_ms:7.3f} ms")
        print(f"append, interleaved: blocks {n}-{big.seq - 1}: median {big_ms:7.3f} ms")
        print(f"append ratio (~{n:,} / ~100): {ratio:.3f}   target <= 1.2: {verdict(ratio <= 1.2)}")
        print(
            f"  (same windows during the build: {during_small:.3f} ms vs {during_big:.3f} ms, "
            f"ratio {during_big / during_small:.3f})"
        )
        print(
            f"open + state() at {n:,} blocks:            median {open_ms:8.3f} ms   target < 50 ms: "
            f"{verdict(open_ms < 50)}"
        )
        print(f"baseline: same without info/summary:      median {walk_ms:8.1f} ms   (full walk + fold)")
        print(f"  of which the rule fold alone, in memory:        {fold_ms:8.1f} ms")
        print(f"summary speed-up over the full walk: {walk_ms / open_ms:,.0f}x")
        print(
            f"RESULT blocks={n} append_100_ms={small_ms:.3f} append_{n}_ms={big_ms:.3f} ratio={ratio:.3f} "
            f"open_ms={open_ms:.3f} walk_ms={walk_ms:.1f} fold_ms={fold_ms:.1f}"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

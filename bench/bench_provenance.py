"""Record provenance 5 derivatives deep on chains of 1,000 blocks (issue 35, part 4), with its baseline in
the same run.

A root of `--blocks` AddData blocks (100 records each) and a line of `--depth` derivatives over it, each
with one ExecuteTransform per block of its input (each step reads one input block and writes 10
records), built in the set-up (not timed) through the core with the tests' chain builder
(`tests/unit/test_provenance.Chains`): real blocks, hashed and committed with the chain rules, no data
files (provenance reads metadata only). Timed, `--repeat` times each, interleaved:

(A) `provenance` of the last derivative's offset 0, its oldest record: the worst case, as its chain is
    read from the head down to the Seed to find the block of that offset (each upstream chain is read
    only in the block range its reader recorded: a few blocks, wherever they are in the chain);
(B) the same of its newest record (the best case: a few blocks of each chain read);
(C) baseline: a full `iter_blocks` walk of the same chains (every block read, hash checked, decoded):
    what indexing every chain once from its head costs, which is what (A) costs when the blocks its
    readers recorded are gone from the store (an input reset or compacted, then `odf gc`).

Reported: the medians, the ratio A / C, and the target A <= 1 s. Checked: each answer reaches the root
through every derivative, one block per dataset, with the expected offsets.

Usage: .venv/bin/python bench/bench_provenance.py [--blocks 1000] [--depth 5] [--repeat 7] [--dir DIR]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine_info import cpu_model

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the chain builder is the tests' (tests/unit/test_provenance.py)

from airflow_odf.odf.repo.provenance import RESOLVED, Provenance, provenance  # noqa: E402
from airflow_odf.odf.repo.repository import Repository  # noqa: E402
from tests.unit.test_provenance import Chains  # noqa: E402

ROOT_RECORDS, STEP_RECORDS = 100, 10


def build(root: Path, blocks: int, depth: int) -> tuple[Repository, list[str]]:
    """The root and `depth` derivatives, each one reading the one before; their names, root first."""
    chains = Chains(Repository.init(root))
    names = ["root"] + [f"d{i}" for i in range(1, depth + 1)]
    chains.root("root", [ROOT_RECORDS] * blocks)
    for upstream, name in itertools.pairwise(names):
        chains.derivative(name, upstream)
        chains.steps(name, [({upstream: i}, STEP_RECORDS) for i in range(blocks)])
    return chains.repo, names


def check(answer: Provenance, names: list[str], first: bool, blocks: int) -> None:
    """One block per dataset, down to the root, each the first (or last) of its chain."""
    assert [n.name for n in answer.datasets] == names[::-1], [n.name for n in answer.datasets]
    for node in answer.datasets:
        assert node.status == RESOLVED and len(node.blocks) == 1, node
        size = ROOT_RECORDS if node.name == "root" else STEP_RECORDS
        start = 0 if first else (blocks - 1) * size
        assert node.blocks[0].offsets == (start, start + size - 1), (node.name, node.blocks[0].offsets)


def full_walk(repo: Repository, names: list[str]) -> int:
    return sum(1 for name in names for _ in repo.dataset(name).iter_blocks())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=1000, help="data blocks in each chain")
    parser.add_argument("--depth", type=int, default=5, help="derivatives over the root")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--dir", help="parent directory of the temp repository (default: system temp)")
    args = parser.parse_args()
    u = platform.uname()
    python = platform.python_version()
    print(f"machine: {u.system} {u.release} {u.machine}; {cpu_model()} x{os.cpu_count()}; Python {python}")
    print(f"date:    {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    print(f"load:    {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    tmp = Path(tempfile.mkdtemp(prefix="odf-bench-provenance-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        repo, names = build(tmp / "repo", args.blocks, args.depth)
        total = full_walk(repo, names)
        print(f"built:   {len(names)} chains, {total:,} blocks in all, in {time.perf_counter() - t0:.1f} s")
        leaf = names[-1]
        last = args.blocks * STEP_RECORDS - 1
        oldest, newest, walks = [], [], []
        for _ in range(args.repeat):
            t = time.perf_counter()
            answer = provenance(repo, leaf, offset=0)
            oldest.append(time.perf_counter() - t)
            check(answer, names, True, args.blocks)
            t = time.perf_counter()
            answer = provenance(repo, leaf, offset=last)
            newest.append(time.perf_counter() - t)
            check(answer, names, False, args.blocks)
            t = time.perf_counter()
            assert full_walk(repo, names) == total
            walks.append(time.perf_counter() - t)
        a, b, c = (statistics.median(x) for x in (oldest, newest, walks))
        print(f"(A) provenance of {leaf} offset 0 ({args.depth} derivatives deep, its oldest record):")
        print(f"      median {a * 1000:8.1f} ms  (range {min(oldest) * 1000:.1f}-{max(oldest) * 1000:.1f})")
        print(f"(B) provenance of {leaf} offset {last} (its newest record):")
        print(f"      median {b * 1000:8.1f} ms  (range {min(newest) * 1000:.1f}-{max(newest) * 1000:.1f})")
        print(f"(C) baseline, a full iter_blocks walk of the same {len(names)} chains ({total:,} blocks):")
        print(f"      median {c * 1000:8.1f} ms  (range {min(walks) * 1000:.1f}-{max(walks) * 1000:.1f})")
        print(f"ratio A / C: {a / c:.2f}   target A <= 1 s: {'met' if a <= 1 else 'NOT met'}")
        print(
            f"RESULT blocks={args.blocks} depth={args.depth} oldest_ms={a * 1000:.1f} "
            f"newest_ms={b * 1000:.1f} walk_ms={c * 1000:.1f} ratio={a / c:.2f}"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

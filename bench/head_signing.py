"""Signed heads: what signing and checking a head costs, alone and inside a commit (issue 35, part 2).

Targets: `make_attestation` and `check_attestation` each <= 1 ms per head (median of `--iterations`
calls, after a warm-up). In the same run, the cost inside a real commit: one `Dataset.commit` of a
SetInfo block per sample on the local disk, a dataset whose repository holds its key (attestation made
and stored before the ref moves) against the same dataset opened without a signer (the baseline: what
a commit cost before signed heads), interleaved so both see the same disk. And the check a pull makes:
`judge_head` (read the attestation from the store, then check it).

Run: .venv/bin/python bench/head_signing.py [--iterations 2000] [--commits 200] [--dir DIR]
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
from collections.abc import Callable
from pathlib import Path

from machine_info import cpu_model

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.head_signature import judge_head
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.identity.attestation import HeadFacts, check_attestation, make_attestation
from airflow_odf.odf.repo.repository import Repository


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def timed(call: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=2000, help="signatures and checks timed")
    parser.add_argument("--commits", type=int, default=200, help="commits timed with and without signing")
    parser.add_argument("--dir", help="parent directory of the temp repository (default: system temp)")
    args = parser.parse_args()
    u = platform.uname()
    print(f"machine: {u.system} {u.release} {u.machine}; {cpu_model()} x{os.cpu_count()}; ", end="")
    print(f"Python {platform.python_version()}; load {os.getloadavg()[0]:.1f}")
    print(f"date:    {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")

    tmp = Path(tempfile.mkdtemp(prefix="odf-bench-signing-", dir=args.dir))
    try:
        repo = Repository.init(tmp / "repo")
        did, secret = DatasetId.generate()
        repo.keys.save(secret)
        signed = repo.dataset_by_id(did)
        signed.commit([model.Seed(dataset_id=did, dataset_kind=model.DatasetKind.ROOT)])
        head = signed.head()
        assert head is not None
        block = signed.block(head)
        facts = HeadFacts(did, head, block.sequence_number, block.prev_block_hash)
        attestation = make_attestation(secret, facts)
        n = args.iterations
        timed(lambda: check_attestation(make_attestation(secret, facts), facts), 50)  # warm-up, imports
        sign_ms = median_ms(timed(lambda: make_attestation(secret, facts), n))
        check_ms = median_ms(timed(lambda: check_attestation(attestation, facts), n))
        judge_ms = median_ms(timed(lambda: judge_head(signed.store, did, head, block), n))

        unsigned = Dataset(signed.store)  # the same folder, no signer: a commit as before signed heads
        with_key, without_key = [], []
        for i in range(args.commits):
            for dataset, samples in ((signed, with_key), (unsigned, without_key)):
                event = model.SetInfo(description=f"revision {i} {len(samples)}")
                t0 = time.perf_counter()
                result = dataset.commit([event])
                samples.append(time.perf_counter() - t0)
                assert result.attested is (dataset is signed)
        with_ms, without_ms = median_ms(with_key), median_ms(without_key)

        ratio = with_ms / without_ms
        print()
        print(f"attestation: {len(attestation)} bytes")
        for what, ms in (("make_attestation: ", sign_ms), ("check_attestation:", check_ms)):
            print(f"{what} median {ms:.3f} ms over {n:,}   target <= 1 ms: {verdict(ms <= 1)}")
        print(f"judge_head (read from the store + check): median {judge_ms:.3f} ms")
        print(
            f"commit of one block, signed: median {with_ms:.3f} ms; unsigned (baseline): "
            f"{without_ms:.3f} ms; ratio {ratio:.2f} over {args.commits} interleaved pairs"
        )
        print(
            f"RESULT bytes={len(attestation)} sign_ms={sign_ms:.3f} check_ms={check_ms:.3f} "
            f"judge_ms={judge_ms:.3f} commit_signed_ms={with_ms:.3f} "
            f"commit_unsigned_ms={without_ms:.3f} ratio={ratio:.3f}"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""Logical-hash throughput (arrow-digest RecordDigestV0<Sha3_256>) on a typical ODF data slice.

Target: >= 50% of plain `hashlib.sha3_256` throughput over the same number of bytes, measured in the
same run (so the ratio is comparable across machines). "Bytes hashed" are the value bytes fed to the
column hashers (`RecordDigest.bytes_hashed`: u64 length prefixes, null markers and raw values).

Columns: offset int64, op int32, system_time / event_time timestamp(ms, UTC), a ~20-character string
and a float64 with 10% nulls. Hashed as 10,000-row batches (as when reading parquet) and as one batch;
then, as an Airflow task hashes the slice it wrote: `parquet_hashes` (logical and physical hash) of the
table's Parquet file, the first hash in a fresh interpreter (median of the runs).

Run: .venv/bin/python bench/bench_logical_hash.py [--rows N] [--repeat R]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from machine_info import cpu_model

from airflow_odf.odf.hashing.arrow_digest import RecordDigest

FIRST_HASH = """
import sys, time
from airflow_odf.odf.hashing.parquet_hashes import parquet_hashes
t0 = time.perf_counter()
logical, _ = parquet_hashes(sys.argv[1])
print(time.perf_counter() - t0, logical.digest.hex())
"""

BATCH_ROWS = 10_000


def make_table(rows: int) -> pa.Table:
    rng = np.random.default_rng(42)
    start = 1_700_000_000_000
    system_time = np.full(rows, start, dtype=np.int64)
    event_time = start - 86_400_000 + np.sort(rng.integers(0, 86_400_000, rows))
    regions = ["north", "south", "east", "west", "central"]
    names = [f"sensor-{k % 100_000:06d}-{regions[k % 5]}" for k in range(rows)]  # 17..21 chars
    value = rng.normal(20.0, 5.0, rows)
    return pa.table(
        {
            "offset": pa.array(np.arange(rows, dtype=np.int64)),
            "op": pa.array(np.zeros(rows, dtype=np.int32)),
            "system_time": pa.array(system_time, pa.timestamp("ms", "UTC")),
            "event_time": pa.array(event_time, pa.timestamp("ms", "UTC")),
            "name": pa.array(names, pa.string()),
            "value": pa.array(value, mask=rng.random(rows) < 0.10),
        }
    )


def time_logical(batches: list[pa.RecordBatch], schema: pa.Schema, repeat: int) -> tuple[float, int, bytes]:
    best = float("inf")
    hashed = 0
    result = b""
    for _ in range(repeat):
        t0 = time.perf_counter()
        d = RecordDigest(schema)
        for batch in batches:
            d.update(batch)
        result = d.finalize()
        best = min(best, time.perf_counter() - t0)
        hashed = d.bytes_hashed
    return best, hashed, result


def time_plain_sha3(total: int, repeat: int) -> float:
    chunk = 1 << 20
    data = np.random.default_rng(0).integers(0, 256, chunk, dtype=np.uint8).tobytes()
    full, rest = divmod(total, chunk)
    view = memoryview(data)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        h = hashlib.sha3_256()
        for _ in range(full):
            h.update(view)
        h.update(view[:rest])
        h.digest()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    print(f"date     : {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}")
    print(f"machine  : {cpu_model()} ({platform.machine()}), {os.cpu_count()} CPUs, {platform.platform()}")
    print(f"software : Python {platform.python_version()}, pyarrow {pa.__version__}, numpy {np.__version__}")
    print(f"sha3     : {hashlib.sha3_256}")

    t0 = time.perf_counter()
    table = make_table(args.rows)
    built = time.perf_counter() - t0
    print(f"data     : {args.rows:,} rows, {table.nbytes / 1e6:.1f} MB in Arrow (built in {built:.1f}s)")
    print(f"schema   : {', '.join(f'{f.name}:{f.type}' for f in table.schema)}")
    print(f"best of {args.repeat} runs each\n")

    small = table.to_batches(max_chunksize=BATCH_ROWS)
    big = table.combine_chunks().to_batches()
    results = {}
    for label, batches in ((f"{BATCH_ROWS:,}-row batches", small), ("one batch", big)):
        seconds, hashed, result = time_logical(batches, table.schema, args.repeat)
        results[label] = result
        plain = time_plain_sha3(hashed, args.repeat)
        mbs = hashed / seconds / 1e6
        plain_mbs = hashed / plain / 1e6
        print(f"[{label}] {len(batches)} batch(es)")
        print(f"  bytes hashed      : {hashed / 1e6:.1f} MB ({hashed / args.rows:.2f} B/row)")
        print(
            f"  logical hash      : {seconds:.3f}s  {mbs:7.1f} MB/s  {args.rows / seconds / 1e6:.2f} M rows/s"
        )
        print(f"  plain sha3-256    : {plain:.3f}s  {plain_mbs:7.1f} MB/s  (same byte count)")
        print(f"  ratio             : {mbs / plain_mbs:.2f}  (target >= 0.50)\n")
    assert len(set(results.values())) == 1, "batch boundaries changed the logical hash"
    first_hash_in_fresh_process(table, hashed, args.repeat, next(iter(results.values())))


def first_hash_in_fresh_process(table: pa.Table, hashed: int, repeat: int, expected: bytes) -> None:
    """`parquet_hashes` of the table's Parquet file as the first hash of a new interpreter."""
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "slice.parquet"
        pq.write_table(table, path, row_group_size=1 << 20)
        times = []
        for _ in range(max(repeat, 3)):
            out = subprocess.run(
                [sys.executable, "-c", FIRST_HASH, str(path)], capture_output=True, text=True, check=True
            )
            seconds, digest = out.stdout.split()
            assert bytes.fromhex(digest) == expected, "the file's logical hash differs from the table's"
            times.append(float(seconds))
        size = path.stat().st_size
    seconds = statistics.median(times)
    plain = time_plain_sha3(hashed + size, repeat)
    print(f"[parquet_hashes, first hash in a fresh process] {size / 1e6:.1f} MB file, median of {len(times)}")
    print(
        f"  both hashes       : {seconds:.3f}s  {(hashed + size) / seconds / 1e6:7.1f} MB/s (all runs: "
        + ", ".join(f"{t:.3f}" for t in times)
        + ")"
    )
    print(
        f"  plain sha3-256    : {plain:.3f}s  {(hashed + size) / plain / 1e6:7.1f} MB/s  (one thread, "
        "the value bytes plus the file's)\n"
    )


if __name__ == "__main__":
    main()

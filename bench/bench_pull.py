"""Pull of a 1,000-block dataset with 50 data files (about 500 MB): file -> file vs `cp -r`, and over
HTTP from `odf serve` on loopback (MB/s). Issue 8's target: file -> file within 1.5x of `cp -r`.

The dataset is built once (not timed): a Seed, a schema, then 998 AddData blocks of which 50 carry a
10 MB data file of random bytes (sync hashes files, it does not parse them) and the others only move
the watermark. Timed, interleaved B A B A ... after a warm-up of each (page cache warm for both):

- (A) `pull_dataset` from `file://` into a fresh repository: every block re-hashed, decoded and
  validated, every object hashed and sized against its block, objects copied in parallel, blocks,
  then the head by compare-and-swap; every object is fsync'ed by the store;
- (B) `cp -r` of the dataset's folder (no verification, no fsync), the target's baseline;
- (B') `cp -r` then `sync -f`: the same copy made durable, as the pull's fsyncs make it.
- (C) the same pull from `odf serve` (HTTP on 127.0.0.1), as MB/s of object bytes.

Run: `.venv/bin/python bench/bench_pull.py [--files 50] [--file-mb 10] [--blocks 1000] [--repeat 3]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_odf.odf.chain.dataset import StagedObject
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.sharing.push_pull import pull_dataset
from airflow_odf.odf.sharing.serve import RepositoryServer

NAME = "bench.pull"


def build(root: Path, blocks: int, files: int, file_mb: int) -> Path:
    """The source repository; returns the dataset's folder."""
    repo = Repository.init(root)
    schema = model.SetDataSchema(
        schema=model.DataSchema(fields=[model.DataField(name="offset", type=model.DataTypeInt64())])
    )
    created = repo.add(
        model.DatasetSnapshot(name=NAME, kind=model.DatasetKind.ROOT, metadata=[schema]),
        system_time=Timestamp.parse("2024-01-01T00:00:00Z"),
    )
    dataset = repo.dataset_by_id(created.dataset_id)
    every = max(1, (blocks - 2) // files)
    staging = root / "staging"
    staging.mkdir()
    offset, with_data = 0, 0
    for i in range(blocks - 2):
        t = Timestamp(1_704_067_200 + i)
        if with_data < files and i % every == 0:
            path = staging / f"f{with_data}"
            path.write_bytes(os.urandom(file_mb << 20))
            physical = Multihash.sha3_256(path.read_bytes())
            event = model.AddData(
                prev_offset=None if offset == 0 else offset - 1,
                new_data=model.DataSlice(
                    logical_hash=Multihash(ARROW0_SHA3_256, bytes(32)),
                    physical_hash=physical,
                    offset_interval=model.OffsetInterval(start=offset, end=offset + 999),
                    size=path.stat().st_size,
                ),
                new_watermark=t,
            )
            offset += 1000
            with_data += 1
            dataset.commit([event], system_time=t, objects=[StagedObject(f"data/{physical}", path)])
        else:
            event = model.AddData(prev_offset=None if offset == 0 else offset - 1, new_watermark=t)
            dataset.commit([event], system_time=t)
    assert with_data == files and dataset.state().sequence_number == blocks - 1
    return root / "datasets" / str(created.dataset_id).removeprefix("did:odf:")


def timed_pull(url: str, target: Path) -> float:
    shutil.rmtree(target, ignore_errors=True)
    repo = Repository.init(target)
    subprocess.run(["sync"], check=True)
    t0 = time.perf_counter()
    result = pull_dataset(repo, url, name=NAME, remember=False)
    elapsed = time.perf_counter() - t0
    assert len(result.result.new_blocks) > 0
    return elapsed


def timed_cp(folder: Path, target: Path, *, durable: bool = False) -> float:
    """`cp -r`; `durable`: then `sync -f` (flush the file system), as the pull's fsyncs do."""
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["sync"], check=True)  # every run starts with nothing dirty
    t0 = time.perf_counter()
    subprocess.run(["cp", "-r", str(folder), str(target)], check=True)
    if durable:
        subprocess.run(["sync", "-f", str(target)], check=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=1000)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--file-mb", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", help="where to build (default: a temp dir)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-pull-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        folder = build(base / "src", args.blocks, args.files, args.file_mb)
        size_mb = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
        print(
            f"built {args.blocks} blocks, {args.files} files, {size_mb:.0f} MB "
            f"in {time.perf_counter() - t0:.1f} s"
        )
        print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
        url = folder.as_uri()
        timed_cp(folder, base / "cp")  # warm-up: both read the source through the page cache
        timed_pull(url, base / "pull")
        runs = []
        for _ in range(args.repeat):
            b = timed_cp(folder, base / "cp")
            a = timed_pull(url, base / "pull")
            d = timed_cp(folder, base / "cp", durable=True)
            runs.append((a, b, d))
            print(f"  pull {a:.2f} s   cp -r {b:.2f} s ({a / b:.2f})   cp -r + sync {d:.2f} s ({a / d:.2f})")
        med = statistics.median
        ratios = [a / b for a, b, _ in runs]
        durable = [a / d for a, _, d in runs]
        print(
            f"file -> file: pull median {med(a for a, _, _ in runs):.2f} s; cp -r median "
            f"{med(b for _, b, _ in runs):.2f} s, paired ratio median {med(ratios):.2f} "
            f"(range {min(ratios):.2f}-{max(ratios):.2f}; target <= 1.5); cp -r + sync median "
            f"{med(d for _, _, d in runs):.2f} s, paired ratio median {med(durable):.2f}; "
            f"load {os.getloadavg()}"
        )
        server = RepositoryServer(Repository.open(base / "src"))
        server.start_in_thread()
        try:
            http = [timed_pull(f"{server.url}/{NAME}", base / "http") for _ in range(args.repeat)]
        finally:
            server.shutdown()
            server.server_close()
        best = min(http)
        print(
            f"HTTP from odf serve (loopback): best {best:.2f} s = {size_mb / best:.0f} MB/s, "
            f"median {statistics.median(http):.2f} s = {size_mb / statistics.median(http):.0f} MB/s"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

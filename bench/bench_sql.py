"""`odf sql` of a `count(*)` over a 1,000-slice dataset vs the same query by bare Spark over the same
files. Issue 27's target: <= 1.2x.

Set-up (not timed): a root dataset whose slices (100 records each, the system columns and two data
columns) are written by pyarrow and committed as AddData blocks through the core's commit helpers, in
commits of 100 blocks (the summary then holds the slice index).

Timed, on one warm local SparkSession in this process, interleaved B A B A ... after a warm-up of each:

- (A) `query_rows` — what `odf sql` runs: the dataset's slices from its summary, the request, the
  engine's views over the slice files (with the dataset's schema), the query, its result written as
  Parquet into the operation's folder and read back;
- (B) bare Spark: the same files (listed from the data folder) read with the same schema as a view,
  the same SQL, the result collected.

Run: `.venv/bin/python bench/bench_sql.py [--slices 1000] [--records 100] [--rounds 5]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.parquet as pq
from machine_info import java_version

from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.engine.session import get_session
from airflow_odf.engine.spark_types import arrow_to_spark
from airflow_odf.odf.chain.dataset import StagedObject
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.query.run import QueryOptions, query_rows
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.data_schema import data_schema_from_arrow
from tests.engine.test_transform_job import SCHEMA  # the slices of the engine tests

NAME = "bench.sql"
SQL = f"SELECT count(*) AS n FROM `{NAME}`"
T0 = 1_704_067_200_000  # 2024-01-01, ms


def build(root: Path, slices: int, records: int) -> Repository:
    """The repository with the dataset of `slices` AddData blocks of `records` records each."""
    repo = Repository.init(root)
    schema = model.SetDataSchema(schema=data_schema_from_arrow(SCHEMA))
    created = repo.add(model.DatasetSnapshot(name=NAME, kind=model.DatasetKind.ROOT, metadata=[schema]))
    dataset = repo.dataset_by_id(created.dataset_id)
    staging = root.parent / "staging"
    staging.mkdir()
    events: list[model.AddData] = []
    objects: list[StagedObject] = []
    for i in range(slices):
        start = i * records
        offsets = pa.array(range(start, start + records), pa.int64())
        table = pa.table(
            [
                offsets,
                pa.array([0] * records, pa.int32()),
                pa.array([T0] * records, pa.timestamp("ms", tz="UTC")),
                pa.array(
                    [T0 + 1000 * o for o in range(start, start + records)], pa.timestamp("ms", tz="UTC")
                ),
                pa.array(["ACME" if o % 2 else "INIT" for o in range(start, start + records)]),
                pa.array([float(o % 97) for o in range(start, start + records)]),
            ],
            schema=SCHEMA,
        )
        path = staging / f"s{i}.parquet"
        pq.write_table(table, path)
        physical = Multihash.sha3_256(path.read_bytes())
        events.append(
            model.AddData(
                prev_offset=None if start == 0 else start - 1,
                new_data=model.DataSlice(
                    logical_hash=Multihash(ARROW0_SHA3_256, bytes(32)),  # not read by queries
                    physical_hash=physical,
                    offset_interval=model.OffsetInterval(start=start, end=start + records - 1),
                    size=path.stat().st_size,
                ),
                new_watermark=Timestamp.from_epoch_nanos((T0 + 1000 * (start + records - 1)) * 1_000_000),
            )
        )
        objects.append(StagedObject(f"data/{physical}", path))
        if len(events) == 100 or i == slices - 1:
            dataset.commit(events, objects=objects)
            events, objects = [], []
    assert len(dataset.state().data_slices) == slices
    return repo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=1000)
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-sql-"))
    try:
        started = time.perf_counter()
        repo = build(tmp / "repo", args.slices, args.records)
        print(
            f"set-up: {args.slices} slices of {args.records} records in {time.perf_counter() - started:.1f} s"
        )
        spark = get_session("local[*]")
        runner = LocalSparkRunner("local[*]")
        options = QueryOptions(work_dir=tmp / "work")
        data_dir = next((tmp / "repo" / "datasets").iterdir()) / "data"
        struct = arrow_to_spark(SCHEMA)
        expected = args.slices * args.records

        def ours() -> float:
            t = time.perf_counter()
            assert query_rows(repo, SQL, runner, options).to_pylist() == [{"n": expected}]
            return time.perf_counter() - t

        def bare() -> float:
            t = time.perf_counter()
            paths = [str(data_dir / name) for name in os.listdir(data_dir)]
            spark.read.schema(struct).parquet(*paths).createOrReplaceTempView(f"`{NAME}`")
            assert spark.sql(SQL).collect()[0]["n"] == expected
            spark.catalog.dropTempView(f"`{NAME}`")
            return time.perf_counter() - t

        bare(), ours()  # warm-up: JIT, file cache
        a: list[float] = []
        b: list[float] = []
        for _ in range(args.rounds):
            b.append(bare())
            a.append(ours())
        ta, tb = statistics.median(a), statistics.median(b)
        ratio = ta / tb
        print(f"python {sys.version.split()[0]}, java {java_version()}, {os.cpu_count()} CPUs")
        print(
            f"(A) odf sql   count(*) over {args.slices} slices: median {ta:.3f} s  {[round(x, 3) for x in a]}"
        )
        print(f"(B) bare Spark, same files and query:         median {tb:.3f} s  {[round(x, 3) for x in b]}")
        print(f"ratio A/B: {ratio:.2f}x (target <= 1.2x): {'MET' if ratio <= 1.2 else 'NOT MET'}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""The ingest's one-pass write into a bucket (`engine/one_pass_writer.py`) against the two-pass path it
replaces (Spark's writer, a counting pass before it, the slices read back to hash them): on the same
sorted partitions — one of them empty, ties in event time, a slice limit that splits partitions — the
same slices (offsets, records, latest event time, columns with nulls, logical hash), the same schema,
and the same rows, column types and values when read back; only the physical layout may differ. Then a
whole engine ingest over several range partitions (a barrier stage) and its fallback when the cluster
has too few task slots.

One local SparkSession with the s3a jars and four cores for the module (as tests/sharing/test_s3_in_place.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_odf.engine import one_pass_writer
from airflow_odf.engine.executor_fs import store_access
from airflow_odf.engine.job import run_request
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.engine.slice_footer import WrittenSlice
from airflow_odf.odf.engine_client.contract import IngestRequest, InputFile
from airflow_odf.utils.engine_json import Vocab
from airflow_odf.utils.hashing.file_hashes import logical_hash_of_parquet
from airflow_odf.utils.hashing.multihash import SHA3_256, multihash_text
from tests.sharing.test_s3_in_place import s3a_session_runner

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

VOCAB = Vocab()
SYSTEM_TIME = datetime(2024, 3, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
PARTITIONS = 3


@pytest.fixture(scope="module")
def s3a_runner(moto_endpoint: str) -> Iterator[LocalSparkRunner]:
    """Four task slots: a barrier stage of three partitions runs."""
    yield from s3a_session_runner(moto_endpoint, {"spark.sql.shuffle.partitions": "4"}, "local[4]")


@pytest.fixture(scope="module")
def spark(s3a_runner: LocalSparkRunner) -> SparkSession:
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    assert session is not None
    return session


def _sorted_partitions(spark: SparkSession) -> DataFrame:
    """`op`, event time and data columns in PARTITIONS hash partitions, the middle one empty, each sorted by
    event time (three rows share each second) then input order; timestamps with microseconds (cut to
    milliseconds on the way, as Spark's writer cuts them, also before 1970), nulls in one column."""
    rows = spark.range(10_000).select(
        F.col("id").alias("seq"),
        (F.col("id") % 5).alias("bucket"),
        F.lit(0).alias("op"),
        F.timestamp_micros(F.lit(-5_000_000) + F.floor(F.col("id") / 3) * 1_000_123).alias("event_time"),
        F.when(F.col("id") % 7 == 0, F.lit(None))
        .otherwise(F.concat(F.lit("sym-"), F.col("id") % 13))
        .alias("symbol"),
        (F.col("id") * 0.25).alias("price"),
        F.to_date(F.timestamp_micros(F.col("id") * 86_400_000_000)).alias("day"),
        F.col("id").cast("decimal(12,2)").alias("amount"),
    )
    partitioned = rows.repartition(PARTITIONS, F.col("bucket")).where(F.spark_partition_id() != 1)
    partitioned = partitioned.sortWithinPartitions("event_time", "seq")
    return partitioned.select(
        F.col("op").cast("int").alias("op"), "event_time", "symbol", "price", "day", "amount"
    )


def _read_back(spark: SparkSession, slices: list[WrittenSlice]) -> pa.Table:
    """The slices' rows, in offset order, as pyarrow reads them from the bucket."""
    access = store_access(spark)
    tables = []
    for s in slices:
        fs, key = access.open(s.path)
        with fs.open_input_file(key) as file:
            tables.append(pq.read_table(file))
    return pa.concat_tables(tables)


def _facts(slices: list[WrittenSlice]) -> list[tuple[Any, ...]]:
    return [
        (s.offset_start, s.offset_end, s.num_records, s.max_event_time, s.null_columns, s.logical_hash)
        for s in slices
    ]


@pytest.mark.parametrize("max_records", [None, 1_234])
def test_one_pass_writes_what_the_two_passes_write(
    spark: SparkSession, s3_bucket: str, max_records: int | None
) -> None:
    from airflow_odf.engine.writer import numbered, write_slices_in_place

    frame = _sorted_partitions(spark)
    sizes = frame.rdd.glom().map(len).collect()
    assert sizes[1] == 0 and sizes[0] and sizes[2]  # the middle partition is empty
    rows = sum(sizes)
    base = f"s3a://{s3_bucket}/staging/{max_records}"
    one, one_schema = one_pass_writer.write_in_one_pass(
        frame,
        f"{base}/one",
        vocab=VOCAB,
        system_time=SYSTEM_TIME,
        next_offset=100,
        num_partitions=PARTITIONS,
        max_records_per_slice=max_records,
    )
    two, two_schema = write_slices_in_place(
        numbered(frame, vocab=VOCAB, system_time=SYSTEM_TIME, next_offset=100, count=True),
        f"{base}/two",
        vocab=VOCAB,
        max_records_per_slice=max_records,
    )

    assert _facts(one) == _facts(two)
    assert one[0].offset_start == 100 and one[-1].offset_end == 100 + rows - 1
    assert len(one) == sum(-(-n // (max_records or n or 1)) for n in sizes)
    assert one_schema == two_schema
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(one_schema)))
    assert [(f.name, str(f.type)) for f in schema][:4] == [
        ("offset", "int64"),
        ("op", "int32"),
        ("system_time", "timestamp[ms, tz=UTC]"),
        ("event_time", "timestamp[ms, tz=UTC]"),
    ]
    got, want = _read_back(spark, one), _read_back(spark, two)
    assert got.schema.remove_metadata() == want.schema.remove_metadata()
    assert got.equals(want)  # every value, offsets and times included
    assert got["offset"].to_pylist() == list(range(100, 100 + rows))
    assert set(got["system_time"].to_pylist()) == {
        datetime(2024, 3, 1, 12, 0, 0, 123000, tzinfo=timezone.utc)
    }
    assert all(s.physical_hash and s.size for s in one)


_TRADES = pa.schema(
    [("event_time", pa.timestamp("ms", tz="UTC")), ("id", pa.int64()), ("symbol", pa.string())]
)


def _request(csv: Path, **extra: Any) -> dict[str, Any]:
    request = IngestRequest(
        operation_id="op",
        dataset_id="did:odf:trades",
        dataset_alias="trades",
        system_time="2024-03-01T12:00:00.5Z",
        next_offset=7,
        inputs=[InputFile(str(csv), None)],
        read={"kind": "Csv", "header": True},
        merge={"kind": "Append"},
        out_dir="",
        read_schema=base64.b64encode(_TRADES.serialize().to_pybytes()).decode("ascii"),
    )
    return {**json.loads(request.to_json()), **extra}


def _trades(path: Path, rows: int) -> Path:
    """Trades three per second, the seconds shuffled: a sort with ties to keep in input order."""
    seconds = [(i * 7919) % (rows // 3) for i in range(rows // 3)]
    lines = ["event_time,id,symbol"]
    for n, second in enumerate(s for s in seconds for _ in range(3)):
        lines.append(f"2024-01-01T00:{second // 60 % 60:02d}:{second % 60:02d}Z,{n},s{n % 11}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _response(spark: SparkSession, request: dict[str, Any], *, enabled: bool) -> dict[str, Any]:
    previous = one_pass_writer.ENABLED
    one_pass_writer.ENABLED = enabled
    try:
        response = run_request(spark, request)
    finally:
        one_pass_writer.ENABLED = previous
    assert response.get("error") is None, response["error"]
    return response


def _objects(spark: SparkSession, paths: list[str]) -> list[bytes]:
    access = store_access(spark)
    found = []
    for path in paths:
        fs, key = access.open(path)
        with fs.open_input_stream(key) as stream:
            found.append(stream.read())
    return found


def test_an_ingest_over_range_partitions_in_one_pass(
    spark: SparkSession, s3_bucket: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The engine's ingest over three range partitions (a barrier stage), with a slice limit: the
    response of the two-pass path but for the layout; with more partitions than task slots it takes
    the two-pass path and says why."""
    csv = _trades(tmp_path / "trades.csv", 9_000)
    size = csv.stat().st_size
    request = _request(csv, target_slice_bytes=size // PARTITIONS + 1, max_records_per_slice=2_000)
    one = _response(spark, {**request, "out_dir": f"s3a://{s3_bucket}/ingest/one"}, enabled=True)
    two = _response(spark, {**request, "out_dir": f"s3a://{s3_bucket}/ingest/two"}, enabled=False)
    # Spark samples the range bounds anew in each job: the two runs cut their partitions elsewhere, so
    # the slices are compared by their rows and each slice's hashes by the reference's over its bytes
    assert one["output_schema"] == two["output_schema"]
    assert one["max_event_time"] == two["max_event_time"]
    slices = one["slices"]
    assert len(slices) >= 5  # three partitions, each cut at 2,000 records
    # the one-pass writer's names, `part-<partition>-<slice of it>`: a barrier stage of several tasks
    assert all(re.search(r"/data/part-\d{5}-\d{5}\.parquet$", s["path"]) for s in slices)
    assert len({s["path"].rsplit("/", 1)[1][:10] for s in slices}) == PARTITIONS
    assert slices[0]["offset_start"] == 7 and slices[-1]["offset_end"] == 7 + 9_000 - 1
    tables = []
    for s, data in zip(slices, _objects(spark, [s["path"] for s in slices]), strict=True):
        assert 0 < s["num_records"] <= 2_000 and s["size"] == len(data)
        assert s["physical_hash"] == multihash_text(SHA3_256, hashlib.sha3_256(data).digest())
        assert s["logical_hash"] == logical_hash_of_parquet(pa.BufferReader(data))
        table = pq.read_table(pa.BufferReader(data))
        assert table["offset"].to_pylist() == list(range(s["offset_start"], s["offset_end"] + 1))
        tables.append(table)
    two_tables = [
        pq.read_table(pa.BufferReader(d)) for d in _objects(spark, [s["path"] for s in two["slices"]])
    ]
    got, want = pa.concat_tables(tables), pa.concat_tables(two_tables)
    assert got.schema.remove_metadata() == want.schema.remove_metadata() and got.equals(want)

    too_many = {**request, "target_slice_bytes": size // 8 + 1, "out_dir": f"s3a://{s3_bucket}/ingest/many"}
    with caplog.at_level("WARNING", logger="airflow_odf.engine.ingest_job"):
        many = _response(spark, too_many, enabled=True)
    assert "need as many free task slots at once" in caplog.text
    assert sum(s["num_records"] for s in many["slices"]) == 9_000

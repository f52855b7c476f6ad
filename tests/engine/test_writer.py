"""System columns, offsets and slice files as the reference writes them."""

from __future__ import annotations

import itertools
from datetime import date, datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_odf.engine.writer import (
    SOURCE_EVENT_TIME_COLUMN,
    normalize_timestamps,
    with_system_columns,
    write_slices,
)
from airflow_odf.odf.hashing import arrow_digest as logical_hash
from airflow_odf.odf.hashing import parquet_hashes as logical_hash_pq
from airflow_odf.utils.engine_json import Vocab
from airflow_odf.utils.hashing import arrow_digest as shared_digest

SYSTEM_TIME = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=timezone.utc)
VOCAB = Vocab()


def _frame(spark: SparkSession, rows: list[tuple], partitions: int = 1):
    df = spark.createDataFrame(
        rows, "op int, event_time timestamp, name string, __odf_row long, __odf_source_event_time timestamp"
    )
    return df.repartition(partitions) if partitions > 1 else df


def _read_all(slices) -> pa.Table:
    return pa.concat_tables([pq.read_table(s.path) for s in slices])


def test_columns_types_and_order(spark: SparkSession, tmp_path: Path) -> None:
    src_et = datetime(2024, 1, 1, tzinfo=timezone.utc)
    df = _frame(
        spark,
        [
            (0, datetime(2024, 3, 1, tzinfo=timezone.utc), "b", 1, src_et),
            (0, None, "a", 0, src_et),
            (0, datetime(2024, 2, 1, tzinfo=timezone.utc), "c", 2, src_et),
        ],
    )
    out = with_system_columns(
        df,
        [F.col("event_time").asc_nulls_first(), F.col("__odf_row")],
        vocab=VOCAB,
        system_time=SYSTEM_TIME,
        next_offset=5,
        drop_columns=("__odf_row",),
    )
    slices, schema_file = write_slices(out, str(tmp_path), vocab=VOCAB, max_records_per_slice=None)
    out.unpersist()
    table = _read_all(slices)
    assert table.schema.names == ["offset", "op", "system_time", "event_time", "name"]
    assert table.schema.field("offset").type == pa.int64()
    assert not table.schema.field("offset").nullable
    assert table.schema.field("op").type == pa.int32()
    assert table.schema.field("system_time").type == pa.timestamp("ms", tz="UTC")
    assert table.schema.field("event_time").type == pa.timestamp("ms", tz="UTC")
    rows = table.to_pylist()
    # the null event time is filled from the source; offsets follow event time order
    assert [(r["offset"], r["name"]) for r in rows] == [(5, "a"), (6, "c"), (7, "b")]
    assert rows[0]["event_time"] == src_et
    assert {r["system_time"] for r in rows} == {datetime(2024, 5, 1, 12, 30, 15, 123000, tzinfo=timezone.utc)}
    assert [(s.offset_start, s.offset_end, s.num_records) for s in slices] == [(5, 7, 3)]
    assert slices[0].max_event_time == "2024-03-01T00:00:00.000Z"
    assert pq.read_schema(schema_file).names == table.schema.names


def test_offsets_contiguous_across_partitions_and_slices(spark: SparkSession, tmp_path: Path) -> None:
    n = 5000
    src_et = datetime(2024, 1, 1, tzinfo=timezone.utc)
    rows = [
        (0, datetime(2024, 1, 1 + (i * 7919) % 28, tzinfo=timezone.utc), f"r{i}", i, src_et) for i in range(n)
    ]
    df = _frame(spark, rows, partitions=4)
    out = with_system_columns(
        df,
        [F.col("event_time").asc_nulls_first(), F.col("__odf_row")],
        vocab=VOCAB,
        system_time=SYSTEM_TIME,
        next_offset=100,
        num_partitions=3,
        drop_columns=("__odf_row",),
    )
    slices, _ = write_slices(out, str(tmp_path), vocab=VOCAB, max_records_per_slice=700)
    out.unpersist()
    assert len(slices) >= 8
    assert all(s.num_records <= 700 for s in slices)
    assert slices[0].offset_start == 100 and slices[-1].offset_end == 100 + n - 1
    for a, b in itertools.pairwise(slices):
        assert b.offset_start == a.offset_end + 1
    table = _read_all(slices)
    assert table["offset"].to_pylist() == list(range(100, 100 + n))
    expected = sorted(rows, key=lambda r: (r[1], r[3]))
    assert table["name"].to_pylist() == [r[2] for r in expected]


def test_empty_output_still_gives_the_schema(spark: SparkSession, tmp_path: Path) -> None:
    df = _frame(spark, []).withColumn("event_time", F.col("event_time"))
    out = with_system_columns(
        df,
        [F.col("__odf_row")],
        vocab=VOCAB,
        system_time=SYSTEM_TIME,
        next_offset=0,
        drop_columns=("__odf_row",),
    )
    slices, schema_file = write_slices(out, str(tmp_path), vocab=VOCAB, max_records_per_slice=None)
    out.unpersist()
    assert slices == []
    schema = pq.read_schema(schema_file)
    assert schema.names == ["offset", "op", "system_time", "event_time", "name"]
    assert schema.field("event_time").type == pa.timestamp("ms", tz="UTC")


def test_date_event_time_and_custom_vocab(spark: SparkSession, tmp_path: Path) -> None:
    vocab = Vocab("off", "operation", "sys_t", "day")
    df = spark.createDataFrame(
        [(0, None, 1, 0, datetime(2024, 2, 3, 10, tzinfo=timezone.utc)), (0, date(2024, 1, 5), 2, 1, None)],
        f"operation int, day date, v int, __odf_row long, {SOURCE_EVENT_TIME_COLUMN} timestamp",
    )
    out = with_system_columns(
        df,
        [F.col("day").asc_nulls_first(), F.col("__odf_row")],
        vocab=vocab,
        system_time=SYSTEM_TIME,
        next_offset=0,
        drop_columns=("__odf_row",),
    )
    slices, _ = write_slices(out, str(tmp_path), vocab=vocab, max_records_per_slice=None)
    out.unpersist()
    table = _read_all(slices)
    assert table.schema.names == ["off", "operation", "sys_t", "day", "v"]
    assert table.schema.field("day").type == pa.date32()
    assert table.to_pylist()[0]["day"] == date(2024, 1, 5)
    assert table.to_pylist()[1]["day"] == date(2024, 2, 3)
    assert slices[0].max_event_time == "2024-02-03T00:00:00.000Z"


def test_timestamps_without_zone_become_utc(spark: SparkSession) -> None:
    df = spark.sql("SELECT TIMESTAMP_NTZ '2024-01-02 03:04:05' AS t, 1 AS x")
    out = normalize_timestamps(df)
    assert out.schema["t"].dataType.typeName() == "timestamp"
    assert out.collect()[0]["t"] == datetime(2024, 1, 2, 3, 4, 5)


def test_gathered_rows_get_the_same_offsets_and_order(spark: SparkSession, tmp_path: Path) -> None:
    """`gather` (small inputs: `coalesce(1)`, no shuffle, no partition count) changes nothing in the
    output: the same rows at the same offsets, in event-time order, from a frame of several partitions."""
    src_et = datetime(2024, 1, 1, tzinfo=timezone.utc)
    rows = [
        (
            0,
            None if i % 7 == 0 else datetime(2024, 1, 1 + (i * 31) % 28, tzinfo=timezone.utc),
            f"r{i}",
            i,
            src_et,
        )
        for i in range(300)
    ]
    tables = []
    for gather in (False, True):
        out = with_system_columns(
            _frame(spark, rows, partitions=4),
            [F.col("event_time").asc_nulls_first(), F.col("__odf_row")],
            vocab=VOCAB,
            system_time=SYSTEM_TIME,
            next_offset=10,
            gather=gather,
            drop_columns=("__odf_row",),
        )
        slices, _ = write_slices(out, str(tmp_path / str(gather)), vocab=VOCAB, max_records_per_slice=None)
        assert [(s.offset_start, s.offset_end) for s in slices] == [(10, 309)]
        tables.append(_read_all(slices).drop(["system_time"]))
    assert tables[0].equals(tables[1])
    filled = [(r[1] or src_et, r[3]) for r in rows]
    expected = [rows[i][2] for _, i in sorted(filled)]
    assert tables[1]["name"].to_pylist() == expected
    assert tables[1]["offset"].to_pylist() == list(range(10, 310))


def test_spark_strings_are_hashed_from_their_dictionary_unless_they_fell_back(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark marks only fallback pages PLAIN: a string column of few values is hashed from its
    dictionary, one that outgrew its dictionary page is read decoded; the digest is the decoded values'."""
    df = spark.range(20_000).select(
        F.when(F.col("id") % 11 == 0, None).otherwise(F.concat(F.lit("s"), F.col("id") % 7)).alias("few"),
        F.sha2(F.col("id").cast("string"), 256).alias("many"),
        F.col("id"),
    )
    out = str(tmp_path / "out")
    df.coalesce(1).write.option("parquet.dictionary.page.size", 4096).parquet(out)
    [path] = Path(out).glob("*.parquet")
    column = pq.read_metadata(path).row_group(0)
    assert "PLAIN" not in column.column(0).encodings and "PLAIN" in column.column(1).encodings
    calls: list[int] = []
    stream = shared_digest._dictionary_stream
    monkeypatch.setattr(
        shared_digest, "_dictionary_stream", lambda arr, valid: calls.append(len(arr)) or stream(arr, valid)
    )
    logical, _ = logical_hash_pq.parquet_hashes(path)
    assert logical == logical_hash.logical_hash_of_table(pq.read_table(path))
    assert sum(calls) == 20_000  # the first column only, every row

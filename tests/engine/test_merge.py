"""Merge strategies: reference semantics over successive ingests, and the checkpointed merge state.

Scenarios run through `Dataset`, which simulates the writer (event time coalesced with the source's,
offsets by the merge's sort order) and keeps the merge state in checkpoints. With `verify=True` (the main
scenario of each stateful strategy) it also writes the slices and proves on every ingest that the state
loaded from the checkpoint and the state rebuilt from the slices are equal and give the same result.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.merge import ROW_COLUMN, load_state, merge, next_state, write_state
from airflow_odf.engine.writer import SOURCE_EVENT_TIME_COLUMN

VOCAB = {
    "offset_column": "offset",
    "operation_type_column": "op",
    "system_time_column": "system_time",
    "event_time_column": "event_time",
}
SYSTEM_TIME = datetime(2025, 1, 1)
ADD, RETRACT, CORRECT_FROM, CORRECT_TO = 0, 1, 2, 3


def ts(day: int) -> datetime:
    return datetime(2024, 1, day)


def _rows(df: DataFrame) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


class Dataset:
    """One dataset's slices and checkpoints in tmp_path, written the way the engine writes them."""

    def __init__(self, spark: SparkSession, tmp_path: Path, strategy: dict[str, Any], verify: bool) -> None:
        self.spark, self.dir, self.strategy, self.verify = spark, tmp_path, strategy, verify
        self.slices: list[str] = []
        self.checkpoint: str | None = None
        self.next_offset = 0
        self.ingests = 0

    def new_frame(self, schema: str, rows: list[tuple], source_et: datetime | None) -> DataFrame:
        """Input as the job hands it to the merge: typed event time, input order, source event time."""
        df = self.spark.createDataFrame([(*r, i) for i, r in enumerate(rows)], f"{schema}, {ROW_COLUMN} long")
        if "event_time" not in df.columns:
            df = df.withColumn("event_time", F.lit(None).cast("timestamp"))
        return df.withColumn(SOURCE_EVENT_TIME_COLUMN, F.lit(source_et).cast("timestamp"))

    def state(self, *, rebuilt: bool = False) -> DataFrame | None:
        checkpoint = None if rebuilt else self.checkpoint
        return load_state(self.spark, self.strategy, checkpoint, self.slices, vocab=VOCAB)

    def write(self, new: DataFrame, state: DataFrame | None) -> list[tuple]:
        """What the writer does with a merge result; returns (offset, op, event_time, data...) rows."""
        result = merge(self.strategy, new, state, vocab=VOCAB)
        hidden = ("op", "event_time", ROW_COLUMN, SOURCE_EVENT_TIME_COLUMN)
        position = F.row_number().over(Window.orderBy(*result.sort_columns))
        output = result.data.withColumn(
            "event_time", F.coalesce("event_time", SOURCE_EVENT_TIME_COLUMN)
        ).select(
            (position + self.next_offset - 1).cast("long").alias("offset"),
            "op",
            F.lit(SYSTEM_TIME).alias("system_time"),
            "event_time",
            *[c for c in result.data.columns if c not in hidden],
        )
        rows = sorted(output.collect(), key=lambda r: r.offset)
        self.output = self.spark.createDataFrame(rows, output.schema)
        return [(r[0], r[1], *r[3:]) for r in rows]

    def ingest(self, schema: str, rows: list[tuple], source_et: datetime | None = None) -> list[tuple]:
        """One ingest with the checkpointed state (verified against the rebuilt state if asked)."""
        new = self.new_frame(schema, rows, source_et)
        state = self.state()
        written = self.write(new, state)
        if self.verify:
            rebuilt = self.state(rebuilt=True)
            assert (state is None) == (rebuilt is None)
            if state is not None:
                assert sorted(state.columns) == sorted(rebuilt.columns)
                assert _rows(state) == _rows(rebuilt.select(*state.columns))
                assert self.write(new, rebuilt) == written
        self.ingests += 1
        if written and self.verify:
            self.output.coalesce(1).write.parquet(str(self.dir / f"slice-{self.ingests}"))
            self.slices += [str(p) for p in (self.dir / f"slice-{self.ingests}").glob("*.parquet")]
        self.next_offset += len(written)
        new_state = next_state(self.strategy, state, self.output, vocab=VOCAB)
        if new_state is not None:
            self.checkpoint = str(self.dir / f"checkpoint-{self.ingests}.parquet")
            write_state(new_state, self.checkpoint, self.strategy)
        return written


@pytest.fixture
def spark_ds(spark: SparkSession, tmp_path: Path):
    return lambda strategy, verify=False: Dataset(spark, tmp_path, strategy, verify)


def test_append_orders_by_event_time_then_input_order(spark_ds) -> None:
    ds = spark_ds({"kind": "Append"})
    early = datetime(2023, 12, 31)
    schema = "event_time timestamp, v string"
    assert ds.ingest(schema, [(ts(3), "c"), (None, "n"), (ts(1), "a"), (ts(1), "a2")], early) == [
        (0, ADD, early, "n"),
        (1, ADD, ts(1), "a"),
        (2, ADD, ts(1), "a2"),
        (3, ADD, ts(3), "c"),
    ]
    assert ds.ingest(schema, [(ts(2), "b"), (ts(2), "b")], early) == [
        (4, ADD, ts(2), "b"),
        (5, ADD, ts(2), "b"),
    ]
    assert ds.checkpoint is None


def test_ledger_drops_seen_keys_keeps_batch_duplicates(spark_ds) -> None:
    ds = spark_ds({"kind": "Ledger", "primaryKey": ["id"]}, verify=True)
    schema = "id int, v string"
    assert ds.ingest(schema, [(1, "a"), (2, "b"), (1, "a-dup")], ts(1)) == [
        (0, ADD, ts(1), 1, "a"),
        (1, ADD, ts(1), 2, "b"),
        (2, ADD, ts(1), 1, "a-dup"),
    ]
    assert ds.ingest(schema, [(1, "x"), (3, "c"), (3, "c-dup")], ts(2)) == [
        (3, ADD, ts(2), 3, "c"),
        (4, ADD, ts(2), 3, "c-dup"),
    ]
    # A key with a null part never matches a seen key, so it is kept every time (as in the reference).
    assert ds.ingest(schema, [(2, "zz"), (None, "n"), (3, "q")], ts(3)) == [(5, ADD, ts(3), None, "n")]
    assert ds.ingest(schema, [(1, "again")], ts(4)) == []
    assert _rows(ds.state()) == [(1,), (2,), (3,)]


def test_snapshot_additions_changes_deletions(spark_ds) -> None:
    ds = spark_ds({"kind": "Snapshot", "primaryKey": ["id"]}, verify=True)
    schema = "id int, name string, population int"
    assert ds.ingest(schema, [(1, "a", 10), (2, "b", 20), (3, "c", 30)], ts(1)) == [
        (0, ADD, ts(1), 1, "a", 10),
        (1, ADD, ts(1), 2, "b", 20),
        (2, ADD, ts(1), 3, "c", 30),
    ]
    # -C (old values, old event time) sorts before +C; a deletion is -R with the old row and event time.
    assert ds.ingest(schema, [(4, "d", 40), (2, "b", 21), (1, "a", 10)], ts(2)) == [
        (3, CORRECT_FROM, ts(1), 2, "b", 20),
        (4, CORRECT_TO, ts(2), 2, "b", 21),
        (5, RETRACT, ts(1), 3, "c", 30),
        (6, ADD, ts(2), 4, "d", 40),
    ]
    assert ds.ingest(schema, [(3, "c", 30), (2, "b", 21), (4, "d", 40)], ts(3)) == [
        (7, RETRACT, ts(1), 1, "a", 10),
        (8, ADD, ts(3), 3, "c", 30),
    ]
    assert ds.ingest(schema, [(4, "d", 40), (3, "c", 30), (2, "b", 21)], ts(4)) == []


def test_snapshot_input_carrying_event_time(spark_ds) -> None:
    ds = spark_ds({"kind": "Snapshot", "primaryKey": ["id"]})
    schema = "event_time timestamp, id int, v string"
    assert ds.ingest(schema, [(ts(1), 1, "x"), (ts(1), 2, "y"), (None, 3, "z")], ts(9)) == [
        (0, ADD, ts(1), 1, "x"),
        (1, ADD, ts(1), 2, "y"),
        (2, ADD, ts(9), 3, "z"),
    ]
    # id 1: a changed event time alone is a change; id 3: a null event time alone is not;
    # id 2: a changed value with a null event time gets the snapshot's time on +C.
    assert ds.ingest(schema, [(ts(2), 1, "x"), (None, 2, "y2"), (None, 3, "z")], ts(10)) == [
        (3, CORRECT_FROM, ts(1), 1, "x"),
        (4, CORRECT_TO, ts(2), 1, "x"),
        (5, CORRECT_FROM, ts(1), 2, "y"),
        (6, CORRECT_TO, ts(10), 2, "y2"),
    ]


def test_snapshot_compare_columns(spark_ds) -> None:
    ds = spark_ds({"kind": "Snapshot", "primaryKey": ["id"], "compareColumns": ["population"]})
    schema = "id int, name string, population int"
    ds.ingest(schema, [(1, "a", 10), (2, "b", 20)], ts(1))
    assert ds.ingest(schema, [(1, "A", 10), (2, "b", 21)], ts(2)) == [
        (2, CORRECT_FROM, ts(1), 2, "b", 20),
        (3, CORRECT_TO, ts(2), 2, "b", 21),
    ]
    # The rename of id 1 was not a change, so the state still holds "a"; -C carries what was written.
    assert ds.ingest(schema, [(1, "A", 11), (2, "b", 21)], ts(3)) == [
        (4, CORRECT_FROM, ts(1), 1, "a", 10),
        (5, CORRECT_TO, ts(3), 1, "A", 11),
    ]


def test_snapshot_rows_with_only_null_values_are_added_and_deleted(spark_ds) -> None:
    """The reference's IS DISTINCT FROM filter alone would drop these (null vs missing is not distinct)."""
    ds = spark_ds({"kind": "Snapshot", "primaryKey": ["id"]})
    schema = "id int, v string"
    assert ds.ingest(schema, [(1, None), (2, "b")], ts(1)) == [
        (0, ADD, ts(1), 1, None),
        (1, ADD, ts(1), 2, "b"),
    ]
    assert ds.ingest(schema, [(2, "b")], ts(2)) == [(2, RETRACT, ts(1), 1, None)]


def test_changelog_stream_passes_rows_through_sorted_by_key_and_op(spark_ds) -> None:
    ds = spark_ds({"kind": "ChangelogStream", "primaryKey": ["id"]})
    schema = "op int, id int, v string"
    assert ds.ingest(schema, [(ADD, 2, "b"), (ADD, 1, "a")], ts(1)) == [
        (0, ADD, ts(1), 1, "a"),
        (1, ADD, ts(1), 2, "b"),
    ]
    assert ds.ingest(schema, [(CORRECT_TO, 1, "a2"), (CORRECT_FROM, 1, "a"), (RETRACT, 2, "b")], ts(2)) == [
        (2, CORRECT_FROM, ts(2), 1, "a"),
        (3, CORRECT_TO, ts(2), 1, "a2"),
        (4, RETRACT, ts(2), 2, "b"),
    ]
    assert ds.checkpoint is None


def test_upsert_stream(spark_ds) -> None:
    ds = spark_ds({"kind": "UpsertStream", "primaryKey": ["id"]}, verify=True)
    # Without an op column every row is an upsert; the last row per key in the batch wins.
    assert ds.ingest("id int, v string", [(1, "a"), (2, "b"), (1, "a2")], ts(1)) == [
        (0, ADD, ts(1), 1, "a2"),
        (1, ADD, ts(1), 2, "b"),
    ]
    schema = "op int, id int, v string"
    # id 1: identical upsert (null event time is no change) -> no-op; id 5: retraction of an unseen key.
    assert ds.ingest(schema, [(ADD, 1, "a2"), (ADD, 2, "b2"), (RETRACT, 5, "zz"), (ADD, 3, "c")], ts(2)) == [
        (2, CORRECT_FROM, ts(1), 2, "b"),
        (3, CORRECT_TO, ts(2), 2, "b2"),
        (4, ADD, ts(2), 3, "c"),
    ]
    # A retraction carries the old row whatever values it was sent with.
    assert ds.ingest(schema, [(RETRACT, 2, "ignored"), (ADD, 3, "c3"), (RETRACT, 3, "c3")], ts(3)) == [
        (5, RETRACT, ts(2), 2, "b2"),
        (6, RETRACT, ts(2), 3, "c"),
    ]
    assert ds.ingest(schema, [(ADD, 2, "b4")], ts(4)) == [(7, ADD, ts(4), 2, "b4")]
    assert _rows(ds.state()) == [(ts(1), 1, "a2"), (ts(4), 2, "b4")]


@pytest.mark.parametrize(
    ("strategy", "schema", "column"),
    [
        ({"kind": "Ledger", "primaryKey": ["key"]}, "id int", "key"),
        ({"kind": "Snapshot", "primaryKey": ["id", "key"]}, "id int", "key"),
        ({"kind": "Snapshot", "primaryKey": ["id"], "compareColumns": ["v"]}, "id int", "v"),
        ({"kind": "UpsertStream", "primaryKey": ["key"]}, "id int", "key"),
        ({"kind": "ChangelogStream", "primaryKey": ["key"]}, "op int, id int", "key"),
        ({"kind": "ChangelogStream", "primaryKey": ["id"]}, "id int", "op"),
    ],
)
def test_missing_column_is_named(spark_ds, strategy: dict, schema: str, column: str) -> None:
    ds = spark_ds(strategy)
    with pytest.raises(EngineInputError) as e:
        merge(strategy, ds.new_frame(schema, [], None), None, vocab=VOCAB)
    assert e.value.kind == "missing-column"
    assert repr(column) in e.value.message and strategy["kind"] in e.value.message


def test_op_codes_must_be_integers(spark_ds) -> None:
    strategy = {"kind": "ChangelogStream", "primaryKey": ["id"]}
    with pytest.raises(EngineInputError) as e:
        merge(strategy, spark_ds(strategy).new_frame("op string, id int", [], None), None, vocab=VOCAB)
    assert e.value.kind == "bad-schema"


def test_checkpoint_of_another_strategy_or_key_is_ignored(
    spark: SparkSession, spark_ds, tmp_path: Path
) -> None:
    ds = spark_ds({"kind": "Snapshot", "primaryKey": ["id"]}, verify=True)
    schema = "id int, name string"
    ds.ingest(schema, [(1, "a"), (2, "b")], ts(1))
    ds.ingest(schema, [(1, "a"), (3, "b")], ts(2))
    assert _rows(load_state(spark, ds.strategy, ds.checkpoint, [], vocab=VOCAB)) == [
        (ts(1), 1, "a"),
        (ts(2), 3, "b"),
    ]
    by_name = {"kind": "Snapshot", "primaryKey": ["name"]}
    # Rebuilt by name: "b" was last written by the +A of id 3 (offset 3, after the -R of id 2).
    assert _rows(load_state(spark, by_name, ds.checkpoint, ds.slices, vocab=VOCAB)) == [
        (ts(1), 1, "a"),
        (ts(2), 3, "b"),
    ]
    assert load_state(spark, by_name, ds.checkpoint, [], vocab=VOCAB) is None
    for other in (
        {"kind": "UpsertStream", "primaryKey": ["id"]},
        {"kind": "Snapshot", "primaryKey": ["id"], "compareColumns": ["name"]},
    ):
        assert load_state(spark, other, ds.checkpoint, [], vocab=VOCAB) is None
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not parquet")
    assert _rows(load_state(spark, ds.strategy, str(garbage), ds.slices, vocab=VOCAB)) == [
        (ts(1), 1, "a"),
        (ts(2), 3, "b"),
    ]


def test_write_state_is_one_deterministic_file(spark: SparkSession, tmp_path: Path) -> None:
    strategy = {"kind": "Ledger", "primaryKey": ["id"]}
    state = spark.createDataFrame([(3,), (1,), (2,)], "id int").repartition(3)
    first, second = tmp_path / "a" / "state.parquet", tmp_path / "b" / "state.parquet"
    write_state(state, str(first), strategy)
    write_state(state, str(second), strategy)
    assert first.is_file() and first.read_bytes() == second.read_bytes()
    assert sorted(p.name for p in first.parent.iterdir()) == ["state.parquet"]
    assert [r.id for r in spark.read.parquet(str(first)).collect()] == [1, 2, 3]


def test_stateless_strategies_keep_no_state(spark: SparkSession) -> None:
    output = spark.createDataFrame([], "offset long, op int, system_time timestamp, event_time timestamp")
    for strategy in ({"kind": "Append"}, {"kind": "ChangelogStream", "primaryKey": ["id"]}):
        assert load_state(spark, strategy, None, ["/nonexistent"], vocab=VOCAB) is None
        assert next_state(strategy, None, output, vocab=VOCAB) is None

"""ODF merge strategies with the reference's semantics, against a checkpointed merge state.

The reference (kamu) re-reads every previous data slice on every merge. Here the merge needs only a
*state*: the set of seen primary keys (Ledger) or the projected current row per primary key (Snapshot,
UpsertStream); Append and ChangelogStream need none. The state is written as one Parquet checkpoint
after each ingest and is read back on the next one; it is rebuilt from the data slices whenever the
checkpoint is missing or was written for another strategy, so the data stays the source of truth. The
coordinator sends the slices only when it knows the checkpoint is stale; when it withheld them and the
checkpoint turns out unusable here, the engine asks for them (NEEDS_PREVIOUS_DATA).
See docs/merge-strategies.md for the rules with worked examples.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.py4j_errors import Py4JJavaError
from airflow_odf.engine.remote_files import RemoteFile, describe_written, is_uri
from airflow_odf.engine.writer import SOURCE_EVENT_TIME_COLUMN
from airflow_odf.utils.engine_json import NEEDS_PREVIOUS_DATA, Vocab

ROW_COLUMN = "__odf_row"

OP_APPEND, OP_RETRACT, OP_CORRECT_FROM, OP_CORRECT_TO = 0, 1, 2, 3

_KINDS = ("Append", "Ledger", "Snapshot", "ChangelogStream", "UpsertStream")
_STATEFUL = ("Ledger", "Snapshot", "UpsertStream")
_HIDDEN = (ROW_COLUMN, SOURCE_EVENT_TIME_COLUMN)
_OLD_PREFIX = "__odf_old_"
_OLD_PRESENT = "__odf_old_present"
_NEW_PRESENT = "__odf_new_present"
_RANK = "__odf_rank"
_STATE_MARKER_KEY = "airflow_odf.merge_state"
_STATE_FORMAT_VERSION = 1
_SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"
_INTEGRAL_TYPES = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


@dataclass
class MergeResult:
    """Merged rows (data, event time, op, ROW_COLUMN) and the total order the offsets follow."""

    data: DataFrame
    sort_columns: list[Column]


@dataclass(frozen=True)
class _Strategy:
    kind: str
    primary_key: tuple[str, ...]
    compare_columns: tuple[str, ...] | None

    @classmethod
    def parse(cls, strategy: dict[str, Any]) -> _Strategy:
        """Reads the manifest form; kind names are matched case-insensitively as manifests vary."""
        raw = str(strategy.get("kind", ""))
        kind = next((k for k in _KINDS if k.lower() == raw.lower()), None)
        if kind is None:
            raise EngineInputError("unsupported", f"unknown merge strategy {raw!r}, expected one of {_KINDS}")
        primary_key = tuple(strategy.get("primaryKey") or ())
        if kind != "Append" and not primary_key:
            raise EngineInputError("bad-input", f"the {kind} merge strategy needs a non-empty primaryKey")
        compare = strategy.get("compareColumns") if kind == "Snapshot" else None
        return cls(kind, primary_key, tuple(compare) if compare else None)

    def marker(self) -> str:
        """Identity of a checkpoint: a state is reused only by the strategy that wrote it."""
        return json.dumps(
            {
                "version": _STATE_FORMAT_VERSION,
                "kind": self.kind,
                "primaryKey": list(self.primary_key),
                "compareColumns": None if self.compare_columns is None else list(self.compare_columns),
            },
            sort_keys=True,
        )


def _c(name: str) -> Column:
    """A column by its exact name (dots, spaces and backticks included)."""
    return F.col("`" + name.replace("`", "``") + "`")


def _require_columns(
    df: DataFrame, columns: tuple[str, ...], what: str, strategy: _Strategy, where: str = "the new data"
) -> None:
    for name in columns:
        if name not in df.columns:
            raise EngineInputError(
                "missing-column",
                f"{what} column {name!r} of the {strategy.kind} merge strategy is not in {where} "
                f"(columns: {', '.join(c for c in df.columns if c not in _HIDDEN)})",
            )


def _integral_op(df: DataFrame, vocab: Vocab, strategy: _Strategy) -> Column:
    """The input's operation type as Int32; op codes are integers 0..3 in ODF."""
    op_type = df.schema[vocab.operation_type_column].dataType
    if not isinstance(op_type, _INTEGRAL_TYPES):
        raise EngineInputError(
            "bad-schema",
            f"column {vocab.operation_type_column!r} must hold integer op codes (0 +A, 1 -R, 2 -C, 3 +C) "
            f"for the {strategy.kind} merge strategy, got {op_type.simpleString()}",
        )
    return _c(vocab.operation_type_column).cast(T.IntegerType())


def _data_columns(df: DataFrame, vocab: Vocab) -> list[str]:
    """Data and event-time columns, in input order (neither op nor the hidden columns)."""
    return [c for c in df.columns if c not in (vocab.operation_type_column, *_HIDDEN)]


def _with_op(df: DataFrame, op: Column, vocab: Vocab) -> DataFrame:
    return df.withColumn(vocab.operation_type_column, op.cast(T.IntegerType()))


def _is_distinct(old: Column, new: Column, column: str, vocab: Vocab) -> Column:
    """IS DISTINCT FROM; a null event time in the new data alone is not a change (reference rule)."""
    distinct = ~old.eqNullSafe(new)
    return new.isNotNull() & distinct if column == vocab.event_time_column else distinct


def merge(
    strategy: dict[str, Any], new: DataFrame, prev_state: DataFrame | None, *, vocab: dict[str, str]
) -> MergeResult:
    """Merges the new rows against the previous merge state (None when there is no previous data)."""
    s, v = _Strategy.parse(strategy), Vocab.from_json(vocab)
    if s.kind == "Append":
        data = _with_op(new, F.lit(OP_APPEND), v)
    elif s.kind == "Ledger":
        _require_columns(new, s.primary_key, "primary key", s)
        data = _with_op(new, F.lit(OP_APPEND), v)
        if prev_state is not None:
            data = data.join(_key_columns(prev_state, s), list(s.primary_key), "left_anti")
    elif s.kind == "ChangelogStream":
        _require_columns(new, s.primary_key, "primary key", s)
        _require_columns(new, (v.operation_type_column,), "operation type", s)
        data = _with_op(new, _integral_op(new, v, s), v)
    elif s.kind == "Snapshot":
        data = _merge_snapshot(s, new, prev_state, v)
    else:
        data = _merge_upsert(s, new, prev_state, v)
    if s.kind in ("Append", "Ledger"):
        order = [_c(v.event_time_column).asc_nulls_first()]
    else:
        order = [_c(k).asc_nulls_first() for k in s.primary_key] + [
            _c(v.operation_type_column).asc_nulls_first()
        ]
    return MergeResult(data, [*order, F.col(ROW_COLUMN).asc_nulls_first()])


def _join_state(
    s: _Strategy, new: DataFrame, state: DataFrame | None, how: str
) -> tuple[DataFrame, dict[str, Column]]:
    """Joins new rows with the state on the primary key (plain equality: a null key matches nothing, as
    in the reference). Returns the joined frame and each new column's old-value expression."""
    renamed = {c: f"{_OLD_PREFIX}{i}" for i, c in enumerate(state.columns)} if state is not None else {}
    # a column without old values: null of the new column's own type (a cast to that type would, on
    # Spark Connect, give a string column an explicit collation, written into the Parquet metadata)
    old_values = {c: F.col(renamed[c]) if c in renamed else F.when(F.lit(False), _c(c)) for c in new.columns}
    new = new.withColumn(_NEW_PRESENT, F.lit(True))
    if state is None:
        return new.withColumn(_OLD_PRESENT, F.lit(None).cast(T.BooleanType())), old_values
    old = state.select(*[_c(c).alias(renamed[c]) for c in state.columns], F.lit(True).alias(_OLD_PRESENT))
    on = reduce(lambda a, b: a & b, [_c(k) == F.col(renamed[k]) for k in s.primary_key])
    return new.join(old, on, how), old_values


def _changelog_rows(
    joined: DataFrame, main_op: Column, old_values: dict[str, Column], columns: list[str], vocab: Vocab
) -> DataFrame:
    """Emits one row per change, plus a `-C` row before each `+C`, in one pass over the join (the
    reference unions two scans of it). -R and -C rows carry the old values, the others the new ones."""
    op = _c(vocab.operation_type_column)
    correction = F.array(F.lit(OP_CORRECT_FROM), main_op)
    ops = F.when(main_op == OP_CORRECT_TO, correction).otherwise(F.array(main_op))
    exploded = joined.withColumn(vocab.operation_type_column, F.explode(ops))
    from_old = op.isin(OP_RETRACT, OP_CORRECT_FROM)
    selected = [F.when(from_old, old_values[c]).otherwise(_c(c)).alias(c) for c in columns]
    selected += [op, F.col(ROW_COLUMN)]
    if SOURCE_EVENT_TIME_COLUMN in joined.columns:
        source_et = F.col(SOURCE_EVENT_TIME_COLUMN)
        selected.append(F.when(from_old, F.lit(None)).otherwise(source_et).alias(SOURCE_EVENT_TIME_COLUMN))
    return exploded.select(*selected)


def _merge_snapshot(s: _Strategy, new: DataFrame, state: DataFrame | None, v: Vocab) -> DataFrame:
    """CDC of a full snapshot against the current state: +A new keys, -R vanished keys, -C/+C changes."""
    _require_columns(new, s.primary_key, "primary key", s)
    columns = _data_columns(new, v)
    compared = s.compare_columns or tuple(c for c in columns if c not in s.primary_key)
    _require_columns(new, compared, "compare", s)
    joined, old = _join_state(s, new, state, "full_outer")
    old_absent, new_absent = F.col(_OLD_PRESENT).isNull(), F.col(_NEW_PRESENT).isNull()
    changed = reduce(lambda a, b: a | b, [_is_distinct(old[c], _c(c), c, v) for c in compared], F.lit(False))
    main_op = F.when(old_absent, OP_APPEND).when(new_absent, OP_RETRACT).otherwise(OP_CORRECT_TO)
    return _changelog_rows(joined.filter(old_absent | new_absent | changed), main_op, old, columns, v)


def _merge_upsert(s: _Strategy, new: DataFrame, state: DataFrame | None, v: Vocab) -> DataFrame:
    """Last upsert per key in the batch against the current state: no-ops vanish, retractions of unseen
    keys are dropped, corrections become -C/+C pairs."""
    _require_columns(new, s.primary_key, "primary key", s)
    op = _integral_op(new, v, s) if v.operation_type_column in new.columns else F.lit(OP_APPEND)
    new = _with_op(new, op, v)
    last = Window.partitionBy(*[_c(k) for k in s.primary_key]).orderBy(F.col(ROW_COLUMN).desc())
    new = new.withColumn(_RANK, F.row_number().over(last)).filter(F.col(_RANK) == 1).drop(_RANK)
    columns = _data_columns(new, v)
    joined, old = _join_state(s, new, state, "left")
    old_absent, is_retract = F.col(_OLD_PRESENT).isNull(), _c(v.operation_type_column) == OP_RETRACT
    ordinary = [c for c in columns if c not in s.primary_key]
    changed = reduce(lambda a, b: a | b, [_is_distinct(old[c], _c(c), c, v) for c in ordinary], F.lit(False))
    keep = (is_retract & ~old_absent) | (~is_retract & (old_absent | changed))
    main_op = F.when(is_retract, OP_RETRACT).when(old_absent, OP_APPEND).otherwise(OP_CORRECT_TO)
    return _changelog_rows(joined.filter(keep), main_op, old, columns, v)


def _project(ledger: DataFrame, s: _Strategy, v: Vocab) -> DataFrame:
    """Current state of a changelog: the latest row per key by offset unless it is a retraction."""
    latest = Window.partitionBy(*[_c(k) for k in s.primary_key]).orderBy(_c(v.offset_column).desc())
    ranked = ledger.withColumn(_RANK, F.row_number().over(latest))
    current = ranked.filter((F.col(_RANK) == 1) & (_c(v.operation_type_column) != OP_RETRACT))
    return current.drop(_RANK, v.offset_column, v.operation_type_column, v.system_time_column, *_HIDDEN)


def _key_columns(df: DataFrame, s: _Strategy) -> DataFrame:
    return df.select(*[_c(k) for k in s.primary_key])


def _seen_keys(df: DataFrame, s: _Strategy) -> DataFrame:
    """Distinct non-null primary keys (a key with a null part never matches in the anti-join)."""
    not_null = reduce(lambda a, b: a & b, [_c(k).isNotNull() for k in s.primary_key])
    return _key_columns(df, s).filter(not_null).distinct()


def _rebuild(s: _Strategy, ledger: DataFrame, v: Vocab) -> DataFrame:
    _require_columns(ledger, s.primary_key, "primary key", s, "the previous data")
    return _seen_keys(ledger, s) if s.kind == "Ledger" else _project(ledger, s, v)


def load_state(
    spark: SparkSession,
    strategy: dict[str, Any],
    checkpoint_path: str | None,
    prev_data_paths: list[str],
    *,
    vocab: dict[str, str],
    prev_data_withheld: int = 0,
) -> DataFrame | None:
    """The merge state before this ingest: the checkpoint if it was written for this strategy, else
    rebuilt from the previous slices; None for stateless strategies or when there is no previous data.

    `prev_data_withheld`: how many previous slices the coordinator left out of `prev_data_paths`,
    trusting the checkpoint; if it cannot be used, EngineInputError(NEEDS_PREVIOUS_DATA) asks for them.
    """
    s, v = _Strategy.parse(strategy), Vocab.from_json(vocab)
    if s.kind not in _STATEFUL:
        return None
    if checkpoint_path:
        state = _read_checkpoint(spark, s, checkpoint_path)
        if state is not None:
            return state
    if prev_data_withheld:
        raise EngineInputError(
            NEEDS_PREVIOUS_DATA,
            f"the merge state {checkpoint_path} cannot be used by the {s.kind} merge strategy (another "
            f"strategy's, or unreadable): send the {prev_data_withheld} previous slice(s) to rebuild it",
        )
    if not prev_data_paths:
        return None
    return _rebuild(s, spark.read.option("mergeSchema", "true").parquet(*prev_data_paths), v)


def _read_checkpoint(spark: SparkSession, s: _Strategy, path: str) -> DataFrame | None:
    """The checkpointed state, or None if it is unreadable or belongs to another strategy or key.

    The footer is checked with pyarrow, so a foreign or corrupt file costs no Spark job and the
    state is read with the schema Spark recorded in it (no schema inference pass); a file in a bucket
    is checked through Spark."""
    try:
        if is_uri(path):  # in a bucket: its footer through Spark (which reads the same schema from it)
            schema = spark.read.parquet(path).schema
        else:
            footer = pq.read_metadata(path).metadata or {}
            schema = T.StructType.fromJson(json.loads(footer[_SPARK_SCHEMA_KEY]))
    except (OSError, ValueError, KeyError, pa.ArrowException, PySparkException, Py4JJavaError):
        return None
    if not schema.fields or schema.fields[0].metadata.get(_STATE_MARKER_KEY) != s.marker():
        return None
    if any(k not in schema.fieldNames() for k in s.primary_key):
        return None
    state = spark.read.schema(schema).parquet(path)
    return state.select(*[_c(c).alias(c, metadata={}) for c in state.columns])


def orders_by_event_time(strategy: dict[str, Any]) -> bool:
    """Whether the strategy's offsets follow event time, then input order (Append, Ledger)."""
    return _Strategy.parse(strategy).kind in ("Append", "Ledger")


def keeps_state(strategy: dict[str, Any]) -> bool:
    """Whether the strategy has a merge state to fold an ingest's output into (Append and ChangelogStream
    have none: their ingest need not read back what it wrote)."""
    return _Strategy.parse(strategy).kind in _STATEFUL


def next_state(
    strategy: dict[str, Any], prev_state: DataFrame | None, output: DataFrame, *, vocab: dict[str, str]
) -> DataFrame | None:
    """The merge state after this ingest, from the previous state and the rows written (with offset, op
    and final event time); it equals the state rebuilt from all slices, without reading them."""
    s, v = _Strategy.parse(strategy), Vocab.from_json(vocab)
    if s.kind not in _STATEFUL:
        return None
    if s.kind == "Ledger":
        # The merge anti-joined the output against prev_state, so the two key sets are disjoint.
        keys = _seen_keys(output, s)
        return keys if prev_state is None else keys.unionByName(_key_columns(prev_state, s))
    ledger = output.drop(v.system_time_column, *_HIDDEN)
    if prev_state is not None:
        before = prev_state.withColumn(v.offset_column, F.lit(-1).cast(T.LongType()))
        before = before.withColumn(v.operation_type_column, F.lit(OP_APPEND).cast(T.IntegerType()))
        ledger = ledger.unionByName(before, allowMissingColumns=True)
    return _project(ledger, s, v)


def write_state(state: DataFrame, path: str, strategy: dict[str, Any]) -> None:
    """Writes the state as one Parquet file at `path`, rows sorted by key so equal states give equal
    bytes; the strategy's identity is stored as metadata of the first column."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".merge-state-", dir=target.parent)
    try:
        _ordered_state(state, strategy).write.mode("overwrite").parquet(tmp)
        parts = sorted(Path(tmp).glob("*.parquet"))
        if len(parts) != 1:
            raise EngineInputError("internal", f"expected one merge-state file in {tmp}, found {len(parts)}")
        os.replace(parts[0], target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_state_in_place(state: DataFrame, folder: str, strategy: dict[str, Any]) -> RemoteFile:
    """`write_state` into a bucket (`folder` a URI): the one file Spark writes there stays where it is,
    described and hashed on the executors (`remote_files`)."""
    _ordered_state(state, strategy).write.mode("overwrite").parquet(folder)
    written = describe_written(state.sparkSession, folder, None)
    if len(written) != 1:
        raise EngineInputError("internal", f"expected one merge-state file in {folder}, found {len(written)}")
    return written[0]


def _ordered_state(state: DataFrame, strategy: dict[str, Any]) -> DataFrame:
    """The state in one partition sorted by key, its first column marked with the strategy."""
    s = _Strategy.parse(strategy)
    marker = {_STATE_MARKER_KEY: s.marker()}
    columns = [_c(c).alias(c, metadata=marker if i == 0 else {}) for i, c in enumerate(state.columns)]
    return (
        state.select(*columns)
        .repartition(1)
        .sortWithinPartitions(*[_c(k).asc_nulls_first() for k in s.primary_key])
    )

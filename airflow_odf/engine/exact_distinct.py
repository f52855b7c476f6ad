"""Exact distinct counts of one column without Spark's aggregation by value (the `distinct` passes of
the request's `checks`, docs/checks.md).

Spark counts distinct values by aggregating on them: a shuffle of every key and a hash table of every
distinct value, which over millions of distinct values costs more than the ingest's own sort (5M unique
ids: 10-28 s on 2 cores). Here each non-NULL value becomes a 64-bit key on the executors, the keys come
to the driver as Arrow (8 bytes a row) and numpy sorts them:

- where the key is the value itself (integers, dates, timestamps), the distinct keys are the distinct
  values;
- otherwise the key is `xxhash64` of the value: equal values have equal hashes, so a hash seen once is
  one distinct value; only the hashes seen more than once (duplicates, or the rare collision of two
  values) are counted again exactly, by Spark, on the rows that have them (a broadcast semi-join).

Nothing is estimated: the result equals `COUNT(col)` and `COUNT(DISTINCT col)`. Where this does not pay,
or could exhaust the driver, `count_distinct` answers None and the caller runs Spark's aggregation: a
column of few distinct values (Spark aggregates those cheaply; a probe of the first rows tells), more
than `MAX_ROWS` rows, more than `MAX_RECOUNTED_KEYS` repeated hashes, or a type whose equality is not
that of its bytes (floating point: -0.0 and 0.0 are one value; collated strings).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_odf.engine.spark_types import quote_identifier

MAX_ROWS = 50_000_000
"""Above this many rows the keys (8 bytes a row, twice while sorted) stay out of the driver."""
PROBE_ROWS = 100_000
"""The first rows whose keys decide the way: all of a smaller relation, then no second read."""
PROBE_DISTINCT_SHARE = 0.5
"""Fewer distinct keys than this share of the probe: Spark's aggregation is the cheaper way."""
MAX_RECOUNTED_KEYS = 1_000_000
"""At most this many repeated hashes are counted again by value (a broadcast of 8 bytes each)."""
_EXACT_KEYS = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.DateType, T.TimestampType)
_HASHED = (T.StringType, T.BinaryType, T.DecimalType, T.BooleanType, T.TimestampNTZType)


def _hash(column: Column) -> Column:
    """The 64-bit hash of a value (a test seam: tests hash into few buckets to force collisions)."""
    return F.xxhash64(column)


def _key(column: Column, data_type: T.DataType) -> tuple[Column, bool] | None:
    """The column's 64-bit key and whether it is the value itself (exact), or None when hashing the
    value's bytes is not its equality."""
    if isinstance(data_type, T.DateType):
        return F.unix_date(column), True
    if isinstance(data_type, T.TimestampType):
        return F.unix_micros(column), True
    if isinstance(data_type, _EXACT_KEYS):
        return column.cast("long"), True
    if (
        isinstance(data_type, T.StringType)
        and getattr(data_type, "collation", "UTF8_BINARY") != "UTF8_BINARY"
    ):
        return None
    if isinstance(data_type, _HASHED):
        return _hash(column), False
    return None


def count_distinct(frame: DataFrame, column: str) -> tuple[int, int] | None:
    """`(COUNT(column), COUNT(DISTINCT column))` over `frame`, exactly; None where Spark's aggregation
    should count them instead (see the module's docstring)."""
    col = F.col(quote_identifier(column))
    key = _key(col, frame.schema[column].dataType)
    if key is None:
        return None
    expression, exact = key
    keys = frame.where(col.isNotNull()).select(expression.alias("k"))
    probe = _sorted(keys.limit(PROBE_ROWS).toArrow())
    if len(probe) == PROBE_ROWS:  # more rows than the probe: is it worth the whole column?
        if _distinct(probe)[0].size < PROBE_DISTINCT_SHARE * PROBE_ROWS or frame.count() > MAX_ROWS:
            return None
        probe = _sorted(keys.toArrow())
    distinct, repeated = _distinct(probe)
    if exact or repeated.size == 0:
        return len(probe), int(distinct.size)
    if repeated.size > MAX_RECOUNTED_KEYS:
        return None
    # values whose hash repeats: duplicates or collisions, told apart by Spark's own equality
    spark: Any = frame.sparkSession
    pairs = frame.where(col.isNotNull()).select(col.alias("v"), expression.alias("k"))
    hashes = F.broadcast(spark.createDataFrame(pa.table({"r": pa.array(repeated, pa.int64())})))
    recounted = pairs.join(hashes, F.col("k") == F.col("r"), "left_semi")
    [row] = recounted.agg(F.count_distinct("v")).collect()
    return len(probe), int(distinct.size - repeated.size + row[0])


def _sorted(table: pa.Table) -> np.ndarray:
    return np.sort(table.column(0).to_numpy())


def _distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys of sorted `keys`, and those among them that occur more than once."""
    if keys.size == 0:
        return keys, keys
    first = np.empty(keys.size, dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, keys.size))
    return keys[starts], keys[starts[counts > 1]]

"""The transform job: a derivative dataset's SQL over its inputs' new records (docs/engine-contract.md).

Each input is a view named by its query alias (dots allowed), holding exactly the input's records in the
request's offset range; the queries run in order and the last one is the output. As the reference
requires, the output has no `offset` / `system_time` columns and has an event-time column of date or
timestamp type; `op` is optional (+A when absent). Offsets follow the query's output order. The output
is one slice: one ExecuteTransform consumes one interval of every input, so its data is not split.
"""

from __future__ import annotations

import base64
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.preprocess import run_sql
from airflow_odf.engine.spark_types import arrow_to_spark, quote_identifier
from airflow_odf.engine.writer import (
    Vocabulary,
    normalize_timestamps,
    parse_time,
    with_system_columns,
    write_slices,
)

_ROW = "__odf_output_row"


def _input_view(spark: SparkSession, item: dict[str, Any]) -> DataFrame:
    """The input's records with offsets in `[offset_start, offset_end]`, in offset order."""
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(item["schema"])))
    struct = arrow_to_spark(schema)
    vocab = Vocabulary.from_request(item.get("vocab", {}))
    if not item.get("data_paths") or item.get("offset_end") is None:
        return spark.createDataFrame([], struct)
    df = spark.read.schema(struct).parquet(*item["data_paths"])
    offset = F.col(quote_identifier(vocab.offset))
    return df.filter(offset.between(item["offset_start"], item["offset_end"])).orderBy(offset)


def _check_output(df: DataFrame, vocab: Vocabulary) -> DataFrame:
    for name in (vocab.offset, vocab.system_time):
        if name in df.columns:
            raise EngineInputError(
                "bad-schema",
                f"the transform's result has a column '{name}': the engine adds the system columns, "
                "leave it out of the query's select list",
            )
    if vocab.event_time not in df.columns:
        raise EngineInputError(
            "bad-schema",
            f"the transform's result has no event-time column '{vocab.event_time}' (columns: "
            f"{', '.join(df.columns)}); select one of date or timestamp type",
        )
    found = df.schema[vocab.event_time].dataType
    if not isinstance(found, T.DateType | T.TimestampType | T.TimestampNTZType):
        raise EngineInputError(
            "bad-schema",
            f"the event-time column '{vocab.event_time}' has type {found.simpleString()}, "
            "expected date or timestamp",
        )
    if vocab.op in df.columns:
        if not isinstance(df.schema[vocab.op].dataType, T.ByteType | T.ShortType | T.IntegerType):
            raise EngineInputError(
                "bad-schema", f"the operation-type column '{vocab.op}' must be an integer (Int32)"
            )
        return df
    return df.withColumn(vocab.op, F.lit(0).cast("int"))


def transform(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    """Runs one transform request; raises EngineInputError on bad queries or output."""
    vocab = Vocabulary.from_request(request.get("vocab", {}))
    views = {item["alias"]: _input_view(spark, item) for item in request["inputs"]}
    result = run_sql(spark, views, request["queries"], "transform")
    output = _check_output(normalize_timestamps(result), vocab)
    data = output.withColumn(_ROW, F.monotonically_increasing_id())
    ordered = [c for c in output.columns if c not in (vocab.op, vocab.event_time)]
    data = data.select(vocab.op, vocab.event_time, *[quote_identifier(c) for c in ordered], _ROW)
    final = with_system_columns(
        data,
        [F.col(_ROW)],
        vocab=vocab,
        system_time=parse_time(request["system_time"]),
        next_offset=request["next_offset"],
        drop_columns=(_ROW,),
    )
    slices, schema_file = write_slices(final, request["out_dir"], vocab=vocab, max_records_per_slice=None)
    schema = pq.read_schema(schema_file).remove_metadata()
    return {
        "output_schema": base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"),
        "slices": [s.__dict__ for s in slices],
        "max_event_time": slices[0].max_event_time if slices else None,
    }

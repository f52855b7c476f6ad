"""The engine's `infer` request: the schema the first ingest of a sample would record, without writing.

The sample is read and preprocessed by the ingest job's own code, then taken through the same steps as an
ingest's output (input validation, timestamp normalisation, event time, merge against no previous state,
system columns); the result's Spark schema is turned into the Arrow schema Spark would write
(`spark_to_arrow`, exact for the ODF session conf). Spark only plans this: no data is written, and the
records are not checked (the ingest checks them). Widenings of the declared read schema, or of the
columns of Parquet sample files, are reported naming the column.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import os
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.ingest_job import arrow_schema, ingest_output, read_inputs
from airflow_odf.engine.remote_files import is_uri, parquet_footer_schema
from airflow_odf.engine.spark_types import arrow_to_spark, spark_to_arrow
from airflow_odf.utils.engine_json import TypeWidening, Vocab

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # the system time does not change the schema


def infer(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    """Answers an InferRequest: `output_schema` (Arrow IPC, base64) and the `widenings` met."""

    vocab = Vocab.from_json(request.get("vocab", {}))
    read_schema = arrow_schema(request.get("read_schema"))
    widenings = _source_widenings(spark, request, read_schema)
    new, _ = read_inputs(spark, request, vocab)
    if new is None:
        paths = ", ".join(item["path"] for item in request["inputs"]) or "no files"
        raise EngineInputError(
            "no-data",
            f"{paths}: the sample holds no records and the source declares no read schema; "
            "nothing to infer the schema from",
        )
    # as the first ingest: no previous state, no dataset schema; gathered (no partition count planned)
    output = ingest_output(new, None, request, vocab, system_time=_EPOCH, next_offset=0, gather=True)
    schema = spark_to_arrow(output.schema)
    return {
        "output_schema": base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"),
        "widenings": [dataclasses.asdict(w) for w in widenings],
    }


def _source_widenings(
    spark: SparkSession, request: dict[str, Any], read_schema: pa.Schema | None
) -> list[TypeWidening]:
    """What Spark holds coarser than declared: the read schema's columns, else a Parquet sample's."""
    widenings: list[TypeWidening] = []
    if read_schema is not None:
        arrow_to_spark(read_schema, widenings)
    elif request["read"].get("kind") == "Parquet":
        seen: set[str] = set()
        for item in request["inputs"]:
            for w in _file_widenings(spark, item["path"]):
                if w.column not in seen:
                    seen.add(w.column)
                    widenings.append(w)
    return widenings


def _file_widenings(spark: SparkSession, path: str) -> list[TypeWidening]:
    """The widenings of a Parquet sample's columns, from its footer: a file on this disk, or one in the
    bucket (staged there for a cluster that shares no disk with the core), read by an executor."""
    widenings: list[TypeWidening] = []
    try:
        if is_uri(path):
            schema = parquet_footer_schema(spark, path)
        elif os.path.isfile(path) and os.path.getsize(path) > 0:
            schema = pq.read_schema(path)
        else:
            return []
    except (OSError, pa.ArrowException):
        schema = None
    if schema is None:
        return []  # the read reports an unreadable file
    for field in schema:
        with contextlib.suppress(EngineInputError):  # Spark's reader reports it, naming the file
            arrow_to_spark(pa.schema([field]), widenings)
    return widenings

"""The transform job on the shared local SparkSession: views by alias, offset ranges, output rules."""

from __future__ import annotations

import base64
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from airflow_odf.engine.job import run_request

UTC = timezone.utc
SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("op", pa.int32(), nullable=False),
        pa.field("system_time", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("event_time", pa.timestamp("ms", tz="UTC")),
        pa.field("symbol", pa.string()),
        pa.field("price", pa.float64()),
    ]
)


def _slice(path: Path, start: int, rows: list[tuple[str, float]]) -> str:
    n = len(rows)
    table = pa.table(
        {
            "offset": list(range(start, start + n)),
            "op": [0] * n,
            "system_time": [datetime(2024, 1, 1, tzinfo=UTC)] * n,
            "event_time": [datetime(2024, 1, 1, 10, i, tzinfo=UTC) for i in range(start, start + n)],
            "symbol": [r[0] for r in rows],
            "price": [r[1] for r in rows],
        },
        schema=SCHEMA,
    )
    pq.write_table(table, path)
    return str(path)


def _request(tmp_path: Path, queries: list[dict[str, Any]], inputs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": 1,
        "kind": "transform",
        "operation_id": "t",
        "dataset_id": "did:odf:x",
        "dataset_alias": "out",
        "system_time": "2024-02-01T00:00:00.123456Z",
        "next_offset": 10,
        "vocab": {},
        "queries": queries,
        "inputs": inputs,
        "out_dir": str(tmp_path / "out"),
    }


def _input(alias: str, paths: list[str], start: int | None, end: int | None) -> dict[str, Any]:
    schema = base64.b64encode(SCHEMA.serialize().to_pybytes()).decode()
    return {
        "alias": alias,
        "dataset_id": "did:odf:in",
        "data_paths": paths,
        "offset_start": start,
        "offset_end": end,
        "schema": schema,
        "vocab": {},
    }


def test_views_by_alias_in_offset_range_and_output_rules(spark: SparkSession, tmp_path: Path) -> None:
    first = _slice(tmp_path / "a.parquet", 0, [("A", 1.0), ("B", 2.0), ("A", 3.0)])
    second = _slice(tmp_path / "b.parquet", 3, [("B", 4.0), ("A", 5.0)])
    queries = [
        {
            "alias": "doubled",
            "query": "SELECT event_time, symbol, price * 2 AS price FROM `com.example.trades`",
        },
        {"query": "SELECT * FROM doubled WHERE symbol = 'A'"},
    ]
    response = run_request(
        spark, _request(tmp_path, queries, [_input("com.example.trades", [first, second], 1, 4)])
    )
    assert response.get("error") is None, response
    [written] = response["slices"]
    assert (written["offset_start"], written["offset_end"], written["num_records"]) == (10, 11, 2)
    table = pq.read_table(written["path"])
    assert table.schema.names == ["offset", "op", "system_time", "event_time", "symbol", "price"]
    assert table.schema.field("op").type == pa.int32()
    rows = table.to_pylist()
    # offsets 1..4 only: the A at offset 0 is outside the range; those at offsets 2 and 4 are in it
    assert [(r["offset"], r["op"], r["symbol"], r["price"]) for r in rows] == [
        (10, 0, "A", 6.0),
        (11, 0, "A", 10.0),
    ]
    row = rows[0]
    assert row["system_time"] == datetime(2024, 2, 1, 0, 0, 0, 123000, tzinfo=UTC)
    assert response["max_event_time"] == "2024-01-01T10:04:00.000Z"


def test_offsets_follow_the_query_output_order(spark: SparkSession, tmp_path: Path) -> None:
    data = _slice(tmp_path / "a.parquet", 0, [(s, float(i)) for i, s in enumerate("DBECA")])
    queries = [{"query": "SELECT event_time, symbol, price FROM input ORDER BY symbol DESC"}]
    response = run_request(spark, _request(tmp_path, queries, [_input("input", [data], 0, 4)]))
    rows = pq.read_table(response["slices"][0]["path"]).to_pylist()
    assert [(r["offset"], r["symbol"]) for r in rows] == [
        (10, "E"),
        (11, "D"),
        (12, "C"),
        (13, "B"),
        (14, "A"),
    ]


def test_empty_input_still_gives_the_output_schema(spark: SparkSession, tmp_path: Path) -> None:
    queries = [{"query": "SELECT event_time, symbol, CAST(price AS DECIMAL(10, 2)) AS price FROM t"}]
    response = run_request(spark, _request(tmp_path, queries, [_input("t", [], None, None)]))
    assert response.get("error") is None and response["slices"] == []
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(response["output_schema"])))
    assert schema.names == ["offset", "op", "system_time", "event_time", "symbol", "price"]
    assert schema.field("price").type == pa.decimal128(10, 2)


@pytest.mark.parametrize(
    ("query", "kind", "fragment"),
    [
        ("SELECT offset, event_time FROM t", "bad-schema", "'offset'"),
        ("SELECT symbol FROM t", "bad-schema", "no event-time column"),
        ("SELECT symbol AS event_time FROM t", "bad-schema", "expected date or timestamp"),
        ("SELECT nope FROM t", "sql", "transform step 1 of 1 failed"),
    ],
)
def test_bad_queries_are_named(
    spark: SparkSession, tmp_path: Path, query: str, kind: str, fragment: str
) -> None:
    data = _slice(tmp_path / "a.parquet", 0, [("A", 1.0)])
    response = run_request(spark, _request(tmp_path, [{"query": query}], [_input("t", [data], 0, 0)]))
    assert response["error"]["kind"] == kind
    assert fragment in response["error"]["message"]

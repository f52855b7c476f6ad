"""Query commitments without Spark: kamu's JSON encoding of each value type we carry, its test vectors
(an output hash, a signature), and the strict reading of kamu's request shapes."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pyarrow as pa
import pytest

from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.identity.canonical import canonical_hash
from airflow_odf.odf.query.commitment import node_did, sign_commitment
from airflow_odf.odf.query.data_json import DataEncodingError, arrow_json_schema, encode_data
from airflow_odf.odf.query.request import MAX_LIMIT, QueryInput, RequestError

UTC = dt.timezone.utc
# kamu's own test (src/adapter/http/tests/tests/test_data_query.rs, test_data_verify_handler)
KAMU_OUTPUT = {
    "data": [{"city": "B", "offset": 1, "population": 200}, {"city": "A", "offset": 0, "population": 100}],
    "dataFormat": "JsonAoS",
}
KAMU_OUTPUT_HASH = "f1620ff7f5beaf16900218a3ac4aae82cdccf764816986c7c739c716cf7dc03112a2c"
KAMU_COMMITMENT = {
    "inputHash": "f162022d6314a38b9b816309b470408e6d25fd8b91b7e6cf596c391d82e8ca5e4d515",
    "outputHash": KAMU_OUTPUT_HASH,
    "subQueriesHash": "f1620ca4510738395af1429224dd785675309c344b2b549632e20275c69b15ed1d210",
}
KAMU_PROOF_VALUE = "uDxDvHwRohhOwQMKpRpQ5RZsRQIjWNupGLqFKzXL18JtqUJ_qz5RxpE8Fr4cmMQCzq2SxBX4pyF333Lh4f11MAA"
KAMU_NODE_DID = "did:key:z6Mko2nqhQ9wYSTS5Giab2j1aHzGnxHimqwmFeEVY8aNsVnN"


def test_kamus_vectors() -> None:
    assert canonical_hash(KAMU_OUTPUT) == KAMU_OUTPUT_HASH
    assert canonical_hash([]) == KAMU_COMMITMENT["subQueriesHash"]
    key = bytes([123] * 32)
    assert node_did(key) == KAMU_NODE_DID
    assert sign_commitment(key, KAMU_COMMITMENT) == {
        "type": "Ed25519Signature2020",
        "verificationMethod": KAMU_NODE_DID,
        "proofValue": KAMU_PROOF_VALUE,
    }


def _ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


TYPED = pa.table(
    {
        "offset": pa.array([0, 2**62], pa.int64()),
        "op": pa.array([0, None], pa.int32()),
        "system_time": pa.array(
            [_ms("2050-01-01T12:00:00"), _ms("2024-10-22T11:54:24.234")], pa.timestamp("ms", "UTC")
        ),
        "micros": pa.array([1_500_000, 1_000_001], pa.timestamp("us", "UTC")),
        "naive": pa.array([1_500_000_000, None], pa.timestamp("ns")),
        "day": pa.array([dt.date(2024, 1, 2), None], pa.date32()),
        "symbol": pa.array(['quo"te\n', None], pa.string()),
        "price": pa.array([10.5, float("nan")], pa.float64()),
        "ratio": pa.array([0.1, None], pa.float32()),
        "amount": pa.array([decimal.Decimal("1.50"), decimal.Decimal("-0.05")], pa.decimal128(10, 2)),
        "whole": pa.array([decimal.Decimal("12"), None], pa.decimal128(5, 0)),
        "flag": pa.array([True, None]),
        "raw": pa.array([b"foo", None], pa.binary()),
        "tags": pa.array([["a", None], None], pa.list_(pa.string())),
        "pair": pa.array([{"a": 1, "b": "x"}, None], pa.struct([("a", pa.int64()), ("b", pa.string())])),
    }
)
ROW0: dict[str, Any] = {
    "offset": 0,
    "op": 0,
    "system_time": "2050-01-01T12:00:00Z",
    "micros": "1970-01-01T00:00:01.500Z",
    "naive": "1970-01-01T00:00:01.500",
    "day": "2024-01-02",
    "symbol": 'quo"te\n',
    "price": 10.5,
    "ratio": 0.1,
    "amount": "1.50",
    "whole": "12",
    "flag": True,
    "raw": "666f6f",
    "tags": ["a", None],
    "pair": {"a": 1, "b": "x"},
}
ROW1: dict[str, Any] = {
    "offset": 2**62,
    "op": None,
    "system_time": "2024-10-22T11:54:24.234Z",
    "micros": "1970-01-01T00:00:01.000001Z",
    "naive": None,
    "day": None,
    "symbol": None,
    "price": None,  # NaN: null, as serde_json writes it
    "ratio": None,
    "amount": "-0.05",
    "whole": None,
    "flag": None,
    "raw": None,
    "tags": None,
    "pair": None,
}


def test_each_type_as_kamus_encoder_writes_it() -> None:
    assert encode_data(TYPED, "JsonAoS") == [ROW0, ROW1]
    assert encode_data(TYPED, "JsonAoA")[0][-1] == [1, "x"]  # a struct is an array too
    assert encode_data(TYPED.drop_columns(["pair"]), "JsonSoA")["offset"] == [0, 2**62]
    assert encode_data(TYPED.slice(1), "JsonAoS") == [ROW1]  # a sliced table: lists and structs too
    with pytest.raises(DataEncodingError, match="JsonSoA cannot hold a struct"):
        encode_data(TYPED, "JsonSoA")
    empty = TYPED.slice(0, 0)
    assert encode_data(empty, "JsonAoS") == []
    assert encode_data(empty.drop_columns(["pair"]), "JsonSoA") == {n: [] for n in TYPED.column_names[:-1]}


def test_what_kamu_cannot_encode_is_refused() -> None:
    maps = pa.table({"m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64()))})
    with pytest.raises(DataEncodingError, match="map_entries"):
        encode_data(maps, "JsonAoS")


def test_the_arrow_json_schema() -> None:
    schema = pa.schema(
        [pa.field("offset", pa.int64(), nullable=False), pa.field("t", pa.timestamp("ms", "UTC"))]
    )
    assert arrow_json_schema(schema) == {
        "fields": [
            {
                "name": "offset",
                "data_type": "Int64",
                "nullable": False,
                "dict_id": 0,
                "dict_is_ordered": False,
                "metadata": {},
            },
            {
                "name": "t",
                "data_type": {"Timestamp": ["Millisecond", "UTC"]},
                "nullable": True,
                "dict_id": 0,
                "dict_is_ordered": False,
                "metadata": {},
            },
        ],
        "metadata": {},
    }


DID = DatasetId(bytes(range(32))).to_did_odf()
BLOCK = "f1620" + "ab" * 32


def test_a_request_reads_as_kamu_writes_it() -> None:
    request = QueryInput.from_json(
        {
            "query": "SELECT 1",
            "include": ["proof", "Schema"],
            "dataFormat": "json-aoa",
            "datasets": [{"id": DID, "alias": "t", "blockHash": BLOCK}],
            "limit": 3,
        }
    )
    assert request.to_json() == {
        "query": "SELECT 1",
        "queryDialect": "SqlSpark",
        "dataFormat": "JsonAoA",
        "include": ["Proof", "Schema"],
        "datasets": [{"id": DID, "alias": "t", "blockHash": BLOCK}],
        "skip": 0,
        "limit": 3,
    }
    normalized = request.normalized().to_json()
    assert normalized["include"] == ["Input", "Proof", "Schema"]
    assert normalized["schemaFormat"] == "ArrowJson"
    params = QueryInput.from_params(
        {"query": "SELECT 1", "include": "proof", "format": "jsonsoa", "skip": "2"}
    )
    assert (params.include, params.data_format, params.skip) == (frozenset({"Proof"}), "JsonSoA", 2)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "missing field 'query'"),
        ({"query": "x", "sql": "y"}, "unknown field 'sql'"),
        ({"query": 1}, "query: expected a string"),
        ({"query": "x", "limit": MAX_LIMIT + 1}, f"limit {MAX_LIMIT + 1}: expected a whole number from 0"),
        ({"query": "x", "skip": -1}, "skip -1"),
        ({"query": "x", "limit": True}, "limit True"),
        ({"query": "x", "include": ["everything"]}, "include 'everything': expected one of Input, Proof"),
        ({"query": "x", "dataFormat": "csv"}, "dataFormat 'csv'"),
        ({"query": "x", "queryDialect": "Cobol"}, "queryDialect 'Cobol'"),
        ({"query": "x", "datasets": [{"id": "did:odf:nope", "alias": "t"}]}, "datasets[0].id"),
        ({"query": "x", "datasets": [{"id": DID, "alias": "t", "blockHash": "zz"}]}, "datasets[0].blockHash"),
        ({"query": "x", "datasets": [{"id": DID, "alias": "t"}, {"id": DID, "alias": "u"}]}, "listed twice"),
        ({"query": "x" * 100_001}, "more than the 100000 allowed"),
    ],
)
def test_a_bad_request_is_one_clear_error(body: dict[str, Any], message: str) -> None:
    with pytest.raises(RequestError, match=message.replace("[", r"\[").replace("]", r"\]")):
        QueryInput.from_json(body)


def test_bad_parameters() -> None:
    with pytest.raises(RequestError, match="parameter 'sql' is unknown"):
        QueryInput.from_params({"query": "x", "sql": "y"})
    with pytest.raises(RequestError, match="parameter 'query' is missing"):
        QueryInput.from_params({})
    with pytest.raises(RequestError, match="limit '1e3'"):
        QueryInput.from_params({"query": "x", "limit": "1e3"})

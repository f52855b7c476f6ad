"""Thrift's compact protocol as Parquet footers use it: every footer reads and writes back byte for byte."""

from __future__ import annotations

import struct
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_odf.engine import thrift_compact as tc


def _footer(path: Path) -> bytes:
    data = path.read_bytes()
    length = struct.unpack("<I", data[-8:-4])[0]
    return data[-8 - length : -8]


def test_parquet_footers_round_trip_byte_for_byte(tmp_path: Path) -> None:
    table = pa.table(
        {
            "t": pa.array([datetime(2024, 1, 1, tzinfo=timezone.utc)] * 3, pa.timestamp("ms", tz="UTC")),
            "s": ["a", None, "c"],
            "d": [1.5, -2.25, None],
            "dec": pa.array([Decimal("1.23"), None, Decimal("-4.56")], pa.decimal128(10, 2)),
            "l": [[1, 2], [], None],
            "st": [{"x": 1, "y": "p"}, None, {"x": 3, "y": None}],
            "m": pa.array([[("k", 1)], [], None], pa.map_(pa.string(), pa.int64())),
            "b": [True, False, None],
        }
    )
    path = tmp_path / "all.parquet"
    pq.write_table(table, path, row_group_size=2, write_page_index=True, write_statistics=True)
    raw = _footer(path)
    footer, end = tc.decode(raw)
    assert end == len(raw)
    assert tc.encode(footer) == raw
    assert footer.get(3) == 3  # num_rows
    row_groups = footer.get(4)
    assert isinstance(row_groups, tc.ThriftList) and len(row_groups.items) == 2
    assert [rg.get(3) for rg in row_groups.items] == [2, 1]  # type: ignore[attr-defined]
    assert footer.get(6) == f"parquet-cpp-arrow version {pa.__version__}".encode()


def test_every_wire_type_and_field_id_gap() -> None:
    nested = tc.Struct([tc.Field(1, tc.BINARY, b"")])
    struct_ = tc.Struct(
        [
            tc.Field(1, tc.BOOL_TRUE, True),
            tc.Field(2, tc.BOOL_FALSE, False),
            tc.Field(3, tc.BYTE, -7),
            tc.Field(4, tc.I16, -300),
            tc.Field(5, tc.I32, 2**31 - 1),
            tc.Field(6, tc.I64, -(2**63)),
            tc.Field(7, tc.DOUBLE, -0.5),
            tc.Field(8, tc.BINARY, bytes(range(256))),
            tc.Field(40, tc.LIST, tc.ThriftList(tc.I32, list(range(-20, 20)))),  # a gap of 32 ids, 40 items
            tc.Field(41, tc.SET, tc.ThriftList(tc.BOOL_TRUE, [True, False, True])),
            tc.Field(42, tc.LIST, tc.ThriftList(tc.STRUCT, [nested, tc.Struct()])),
            tc.Field(43, tc.STRUCT, tc.Struct()),
        ]
    )
    raw = tc.encode(struct_)
    decoded, end = tc.decode(raw)
    assert end == len(raw)
    assert [(f.id, f.type) for f in decoded.fields] == [(f.id, f.type) for f in struct_.fields]
    values = [f.value for f in decoded.fields]
    assert values[:8] == [True, False, -7, -300, 2**31 - 1, -(2**63), -0.5, bytes(range(256))]
    assert decoded.get(40) == tc.ThriftList(tc.I32, list(range(-20, 20)))
    assert decoded.get(41) == tc.ThriftList(tc.BOOL_TRUE, [True, False, True])
    assert tc.encode(decoded) == raw


def test_edits_keep_ids_in_order() -> None:
    struct_ = tc.Struct([tc.Field(1, tc.I32, 1), tc.Field(9, tc.I64, 2)])
    struct_.set(4, tc.I64, 5)
    struct_.set(9, tc.I64, 10)
    struct_.drop(1)
    decoded, _ = tc.decode(tc.encode(struct_))
    assert [(f.id, f.value) for f in decoded.fields] == [(4, 5), (9, 10)]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x15", "runs past the end"),  # an i32 field without its value
        (b"\x18\x05ab", "runs past the end"),  # a 5-byte binary with 2 bytes
        (b"\x1b\x00", "wire type 11"),  # a map
        (b"\x15" + b"\xff" * 11, "longer than 10 bytes"),
    ],
)
def test_malformed_bytes_are_named(raw: bytes, message: str) -> None:
    with pytest.raises(tc.ThriftError, match=message):
        tc.decode(raw)

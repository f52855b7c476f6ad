"""The ODF <-> Arrow half of the type table (docs/schemas.md), row by row and both ways.

Every ODF DataType appears with its default Arrow type and with each Arrow encoding that needs a RFC-016
hint. Each row is checked ODF -> Arrow (the hint selects the layout), Arrow -> ODF (the hint is written
back), the logical form SetDataSchema records (hints stripped), and the FlatBuffers codec. The Spark half
is tests/engine/test_spark_type_table.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format import model as m
from airflow_odf.odf.format.fields import union_spec
from airflow_odf.odf.format.flatbuffers_codec import decode_table, encode_table
from airflow_odf.odf.schema.data_schema import (
    BUFFER_ENCODING,
    DATE_ENCODING,
    DECIMAL_ENCODING,
    data_schema_from_arrow,
    data_schema_to_arrow,
    strip_encoding,
)
from tests.paths import REPO

DOC = REPO / "docs" / "schemas.md"
S, MS, US, NS = m.TimeUnit.SECOND, m.TimeUnit.MILLISECOND, m.TimeUnit.MICROSECOND, m.TimeUnit.NANOSECOND


def _opt(t: Any) -> m.DataTypeOption:
    return m.DataTypeOption(inner=t)


def _buffer(kind: str, bits: int) -> dict[str, Any]:
    key = "runEndsBitWidth" if kind == "RunEnd" else "offsetBitWidth"
    return {BUFFER_ENCODING: {"kind": kind, key: bits}}


def _decimal(bits: int) -> dict[str, Any]:
    return {DECIMAL_ENCODING: {"bitWidth": bits}}


@dataclass(frozen=True)
class Row:
    """One line of the table: an ODF column type (with its hint) and the Arrow field it is."""

    odf: Any
    arrow: pa.DataType
    nullable: bool = False
    hint: dict[str, Any] | None = None
    back: Any = None  # the ODF type the Arrow type reads back as, where the round trip differs

    @property
    def id(self) -> str:
        return f"{self.arrow}{'?' if self.nullable else ''}{' +hint' if self.hint else ''}"


INT_ITEM = pa.field("item", pa.int32(), nullable=False)
STRUCT = m.DataTypeStruct(
    fields=[
        m.DataField(name="a", type=m.DataTypeInt32()),
        m.DataField(name="b", type=_opt(m.DataTypeString())),
    ]
)

ROWS = [
    # String and Binary: one logical type, the layouts travel as bufferEncoding
    Row(m.DataTypeString(), pa.utf8()),
    Row(m.DataTypeString(), pa.large_utf8(), hint=_buffer("Contiguous", 64)),
    Row(m.DataTypeString(), pa.string_view(), hint=_buffer("View", 32)),
    Row(m.DataTypeString(), pa.run_end_encoded(pa.int32(), pa.utf8()), hint=_buffer("RunEnd", 32)),
    Row(m.DataTypeBinary(), pa.binary()),
    Row(m.DataTypeBinary(), pa.large_binary(), hint=_buffer("Contiguous", 64)),
    Row(m.DataTypeBinary(), pa.binary_view(), hint=_buffer("View", 32)),
    Row(m.DataTypeBinary(fixed_length=16), pa.binary(16)),
    Row(m.DataTypeBool(), pa.bool_()),
    # integers and floats map one to one
    Row(m.DataTypeInt8(), pa.int8()),
    Row(m.DataTypeInt16(), pa.int16()),
    Row(m.DataTypeInt32(), pa.int32()),
    Row(m.DataTypeInt64(), pa.int64()),
    Row(m.DataTypeUInt8(), pa.uint8()),
    Row(m.DataTypeUInt16(), pa.uint16()),
    Row(m.DataTypeUInt32(), pa.uint32()),
    Row(m.DataTypeUInt64(), pa.uint64()),
    Row(m.DataTypeFloat16(), pa.float16()),
    Row(m.DataTypeFloat32(), pa.float32()),
    Row(m.DataTypeFloat64(), pa.float64()),
    # decimals: the width is an encoding (absent, it follows the precision)
    Row(m.DataTypeDecimal(precision=9, scale=2), pa.decimal32(9, 2), hint=_decimal(32)),
    Row(m.DataTypeDecimal(precision=18, scale=4), pa.decimal64(18, 4), hint=_decimal(64)),
    Row(m.DataTypeDecimal(precision=10, scale=2), pa.decimal128(10, 2), hint=_decimal(128)),
    Row(m.DataTypeDecimal(precision=50, scale=10), pa.decimal256(50, 10), hint=_decimal(256)),
    # dates, times, timestamps, durations
    Row(m.DataTypeDate(), pa.date32()),
    Row(m.DataTypeDate(), pa.date64(), hint={DATE_ENCODING: {"unit": "Millisecond"}}),
    Row(m.DataTypeTime(unit=S), pa.time32("s")),
    Row(m.DataTypeTime(unit=MS), pa.time32("ms")),
    Row(m.DataTypeTime(unit=US), pa.time64("us")),
    Row(m.DataTypeTime(unit=NS), pa.time64("ns")),
    Row(m.DataTypeTimestamp(unit=S, timezone="UTC"), pa.timestamp("s", tz="UTC")),
    Row(m.DataTypeTimestamp(unit=MS, timezone="UTC"), pa.timestamp("ms", tz="UTC")),
    Row(m.DataTypeTimestamp(unit=US, timezone="UTC"), pa.timestamp("us", tz="UTC")),
    Row(m.DataTypeTimestamp(unit=NS, timezone="UTC"), pa.timestamp("ns", tz="UTC")),
    Row(m.DataTypeTimestamp(unit=US, timezone="Europe/Paris"), pa.timestamp("us", tz="Europe/Paris")),
    Row(m.DataTypeTimestamp(unit=MS, timezone="+07:30"), pa.timestamp("ms", tz="+07:30")),
    Row(m.DataTypeDuration(unit=S), pa.duration("s")),
    Row(m.DataTypeDuration(unit=MS), pa.duration("ms")),
    Row(m.DataTypeDuration(unit=US), pa.duration("us")),
    Row(m.DataTypeDuration(unit=NS), pa.duration("ns")),
    # nested types; nullability is Option at every level
    Row(m.DataTypeList(item_type=m.DataTypeInt32()), pa.list_(INT_ITEM)),
    Row(m.DataTypeList(item_type=_opt(m.DataTypeInt32())), pa.list_(pa.int32())),
    Row(m.DataTypeList(item_type=m.DataTypeInt32()), pa.large_list(INT_ITEM), hint=_buffer("Contiguous", 64)),
    Row(m.DataTypeList(item_type=m.DataTypeInt32()), pa.list_view(INT_ITEM), hint=_buffer("View", 32)),
    Row(m.DataTypeList(item_type=m.DataTypeInt32()), pa.large_list_view(INT_ITEM), hint=_buffer("View", 64)),
    Row(m.DataTypeList(item_type=_opt(m.DataTypeInt8()), fixed_length=3), pa.list_(pa.int8(), 3)),
    Row(
        m.DataTypeMap(key_type=m.DataTypeString(), value_type=_opt(m.DataTypeInt64()), keys_sorted=False),
        pa.map_(pa.utf8(), pa.int64()),
    ),
    Row(
        m.DataTypeMap(key_type=m.DataTypeInt32(), value_type=m.DataTypeString(), keys_sorted=True),
        pa.map_(pa.int32(), pa.field("value", pa.utf8(), nullable=False), keys_sorted=True),
    ),
    Row(STRUCT, pa.struct([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.utf8())])),
    Row(_opt(m.DataTypeInt32()), pa.int32(), nullable=True),
    Row(
        _opt(STRUCT), pa.struct([pa.field("a", pa.int32(), nullable=False), ("b", pa.utf8())]), nullable=True
    ),
    Row(_opt(m.DataTypeString()), pa.large_utf8(), nullable=True, hint=_buffer("Contiguous", 64)),
    # Null: pyarrow's Null field is always nullable, so the bare ODF Null reads back as Option<Null>
    Row(_opt(m.DataTypeNull()), pa.null(), nullable=True),
    Row(m.DataTypeNull(), pa.null(), nullable=True, back=_opt(m.DataTypeNull())),
]


def _field(row: Row) -> pa.Schema:
    return pa.schema([pa.field("c", row.arrow, nullable=row.nullable)])


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_odf_to_arrow(row: Row) -> None:
    odf = m.DataSchema(fields=[m.DataField(name="c", type=row.odf, extra=row.hint)])
    arrow = data_schema_to_arrow(odf)
    assert arrow.equals(_field(row), check_metadata=True), f"{arrow} != {_field(row)}"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_arrow_to_odf_writes_the_hint_back(row: Row) -> None:
    odf = data_schema_from_arrow(_field(row))
    assert odf == m.DataSchema(fields=[m.DataField(name="c", type=row.back or row.odf, extra=row.hint)])
    assert data_schema_to_arrow(odf).equals(_field(row), check_metadata=True)  # and it is lossless


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_the_recorded_schema_is_the_logical_type_and_encodes(row: Row) -> None:
    """SetDataSchema keeps the logical type only; without hints, Arrow gets the default layout."""
    logical = strip_encoding(data_schema_from_arrow(_field(row)))
    assert logical == m.DataSchema(fields=[m.DataField(name="c", type=row.back or row.odf)])
    default = data_schema_to_arrow(logical).field("c").type
    assert default == row.arrow or row.hint is not None  # only a hint selects another layout
    event = m.SetDataSchema(schema=logical)
    assert decode_table(encode_table(event), m.SetDataSchema) == event


def test_decimal_width_follows_the_precision_without_a_hint() -> None:
    def arrow(precision: int) -> pa.DataType:
        t = m.DataTypeDecimal(precision=precision, scale=0)
        return data_schema_to_arrow(m.DataSchema(fields=[m.DataField(name="d", type=t)])).field("d").type

    assert (arrow(1), arrow(38), arrow(39), arrow(76)) == (
        pa.decimal128(1, 0),
        pa.decimal128(38, 0),
        pa.decimal256(39, 0),
        pa.decimal256(76, 0),
    )


def test_defaults_of_unset_parameters() -> None:
    """Timestamp/Time/Duration without unit are milliseconds; a Timestamp without zone is UTC (spec)."""
    schema = m.DataSchema(
        fields=[
            m.DataField(name="ts", type=m.DataTypeTimestamp()),
            m.DataField(name="t", type=m.DataTypeTime()),
            m.DataField(name="d", type=m.DataTypeDuration()),
        ]
    )
    assert data_schema_to_arrow(schema).types == [
        pa.timestamp("ms", tz="UTC"),
        pa.time32("ms"),
        pa.duration("ms"),
    ]
    # an Arrow timestamp without zone reads as timezone None, as the reference (= UTC)
    naive = data_schema_from_arrow(pa.schema([pa.field("ts", pa.timestamp("us"), nullable=False)]))
    assert naive.fields[0].type == m.DataTypeTimestamp(unit=US, timezone=None)


@pytest.mark.parametrize(
    "t, message",
    [
        (_opt(_opt(m.DataTypeInt8())), "columns.c: Option of Option cannot be expressed in Arrow"),
        (
            m.DataTypeMap(key_type=_opt(m.DataTypeString()), value_type=m.DataTypeInt8()),
            "columns.c.key: Arrow map keys cannot be nullable",
        ),
        (m.DataTypeDecimal(precision=77, scale=0), "columns.c: decimal precision 77 exceeds Arrow's maximum"),
    ],
)
def test_odf_types_arrow_cannot_hold_are_errors_naming_the_column(t: Any, message: str) -> None:
    with pytest.raises(OdfFormatError, match=re.escape(message)):
        data_schema_to_arrow(m.DataSchema(fields=[m.DataField(name="c", type=t)]))


@pytest.mark.parametrize(
    "arrow, message",
    [
        (pa.month_day_nano_interval(), "cannot be expressed in an ODF schema"),
        (pa.dictionary(pa.int8(), pa.utf8()), "cannot be expressed in an ODF schema"),
        (pa.list_(pa.large_utf8()), "columns.c.item: Arrow type large_string needs encoding attributes"),
    ],
)
def test_arrow_types_odf_cannot_hold_are_errors_naming_the_column(arrow: pa.DataType, message: str) -> None:
    with pytest.raises(OdfFormatError, match=re.escape(message)):
        data_schema_from_arrow(pa.schema([pa.field("c", arrow)]))


def _doc_table_kinds() -> list[str]:
    """The ODF kinds in the first column of the type table of docs/schemas.md."""
    text = DOC.read_text()
    section = text[text.index("## Type table") :]
    section = section[: section.index("\n#", 1)]  # up to the next heading
    kinds = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.match(r"`(\w+)", cells[0]) if line.startswith("|") else None
        if match:
            kinds.append(match.group(1))
    return kinds


def test_the_documented_table_covers_every_odf_type() -> None:
    spec = union_spec(m.DataType)
    every = {spec.tag(cls) for cls in spec.members}
    documented = set(_doc_table_kinds())
    assert documented == every, f"missing: {every - documented}, unknown: {documented - every}"
    assert {type(r.odf.inner if isinstance(r.odf, m.DataTypeOption) else r.odf) for r in ROWS} | {
        m.DataTypeOption
    } == set(spec.members)

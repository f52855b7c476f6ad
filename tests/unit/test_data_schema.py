"""RFC-016 data schemas: ODF <-> Arrow mapping, encoding attributes, stripping, and the FlatBuffers form."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format import model as m
from airflow_odf.odf.format.flatbuffers_codec import decode_table, encode_table
from airflow_odf.odf.schema.data_schema import (
    BUFFER_ENCODING,
    DATE_ENCODING,
    DECIMAL_ENCODING,
    data_schema_from_arrow,
    data_schema_to_arrow,
    strip_encoding,
)

MS = m.TimeUnit.MILLISECOND
LARGE = {BUFFER_ENCODING: {"kind": "Contiguous", "offsetBitWidth": 64}}
VIEW = {BUFFER_ENCODING: {"kind": "View", "offsetBitWidth": 32}}

#: Every Arrow type the mapping supports, nullable and not, nested in every way (Arrow default names).
ALL_TYPES = pa.schema(
    [
        pa.field("null", pa.null()),
        pa.field("bool", pa.bool_(), nullable=False),
        *(pa.field(str(t), t) for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64())),
        *(pa.field(str(t), t, nullable=False) for t in (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())),
        pa.field("float16", pa.float16()),
        pa.field("float32", pa.float32(), nullable=False),
        pa.field("float64", pa.float64()),
        pa.field("utf8", pa.utf8(), nullable=False),
        pa.field("large_utf8", pa.large_utf8()),
        pa.field("utf8_view", pa.string_view()),
        pa.field("binary", pa.binary()),
        pa.field("large_binary", pa.large_binary(), nullable=False),
        pa.field("binary_view", pa.binary_view()),
        pa.field("fixed_binary", pa.binary(16)),
        pa.field("date32", pa.date32()),
        pa.field("date64", pa.date64(), nullable=False),
        *(pa.field(f"time_{u}", pa.time32(u)) for u in ("s", "ms")),
        *(pa.field(f"time_{u}", pa.time64(u)) for u in ("us", "ns")),
        *(pa.field(f"ts_{u}", pa.timestamp(u, tz="UTC")) for u in ("s", "ms", "us", "ns")),
        pa.field("ts_zone", pa.timestamp("ms", tz="America/New_York")),
        pa.field("ts_offset", pa.timestamp("us", tz="+07:30"), nullable=False),
        *(pa.field(f"duration_{u}", pa.duration(u)) for u in ("s", "ms", "us", "ns")),
        pa.field("decimal32", pa.decimal32(9, 2)),
        pa.field("decimal64", pa.decimal64(18, 4)),
        pa.field("decimal128", pa.decimal128(38, 10)),
        pa.field("decimal128_small", pa.decimal128(5, 0)),
        pa.field("decimal256", pa.decimal256(76, 20)),
        pa.field("decimal256_small", pa.decimal256(20, 5)),
        pa.field("list", pa.list_(pa.int32())),
        pa.field(
            "list_required_items", pa.list_(pa.field("item", pa.utf8(), nullable=False)), nullable=False
        ),
        pa.field("large_list", pa.large_list(pa.float64())),
        pa.field("list_view", pa.list_view(pa.utf8())),
        pa.field("large_list_view", pa.large_list_view(pa.int64())),
        pa.field("fixed_list", pa.list_(pa.int8(), 3)),
        pa.field("list_of_decimals", pa.list_(pa.decimal128(10, 2))),
        pa.field("list_of_lists", pa.list_(pa.list_(pa.date32()))),
        pa.field(
            "struct",
            pa.struct(
                [
                    pa.field("a", pa.int32(), nullable=False),
                    pa.field("b", pa.large_utf8()),
                    pa.field("c", pa.struct([pa.field("d", pa.date64(), nullable=False)])),
                ]
            ),
        ),
        pa.field("list_of_structs", pa.list_(pa.struct([("s", pa.string_view()), ("n", pa.uint8())]))),
        pa.field("empty_struct", pa.struct([]), nullable=False),
        pa.field("map", pa.map_(pa.utf8(), pa.int64())),
        pa.field("map_sorted", pa.map_(pa.int32(), pa.field("value", pa.utf8(), nullable=False), True)),
        pa.field("map_of_structs", pa.map_(pa.utf8(), pa.struct([("x", pa.large_binary())]))),
        pa.field("ree", pa.run_end_encoded(pa.int32(), pa.utf8())),
        pa.field("ree16_date64", pa.run_end_encoded(pa.int16(), pa.date64()), nullable=False),
        pa.field("ree64_decimal", pa.run_end_encoded(pa.int64(), pa.decimal256(10, 1))),
    ]
)

SYSTEM_COLUMNS = pa.schema(
    [
        ("offset", pa.int64(), False),
        ("op", pa.int32(), False),
        ("system_time", pa.timestamp("ms", tz="UTC"), False),
        ("event_time", pa.timestamp("ms", tz="UTC")),
        ("name", pa.large_utf8()),
    ]
)


def test_known_arrow_schema_has_the_expected_odf_form() -> None:
    assert data_schema_from_arrow(SYSTEM_COLUMNS) == m.DataSchema(
        fields=[
            m.DataField(name="offset", type=m.DataTypeInt64()),
            m.DataField(name="op", type=m.DataTypeInt32()),
            m.DataField(name="system_time", type=m.DataTypeTimestamp(unit=MS, timezone="UTC")),
            m.DataField(
                name="event_time",
                type=m.DataTypeOption(inner=m.DataTypeTimestamp(unit=MS, timezone="UTC")),
            ),
            m.DataField(name="name", type=m.DataTypeOption(inner=m.DataTypeString()), extra=LARGE),
        ]
    )


def _odf_field(arrow_type: pa.DataType) -> m.DataField:
    return data_schema_from_arrow(pa.schema([pa.field("f", arrow_type, nullable=False)])).fields[0]


@pytest.mark.parametrize(
    "arrow_type, odf_type, extra",
    [
        # the RFC-016 examples
        (pa.large_utf8(), m.DataTypeString(), LARGE),
        (pa.string_view(), m.DataTypeString(), VIEW),
        (pa.date64(), m.DataTypeDate(), {DATE_ENCODING: {"unit": "Millisecond"}}),
        (
            pa.decimal128(20, 5),
            m.DataTypeDecimal(precision=20, scale=5),
            {DECIMAL_ENCODING: {"bitWidth": 128}},
        ),
        (
            pa.decimal256(20, 5),
            m.DataTypeDecimal(precision=20, scale=5),
            {DECIMAL_ENCODING: {"bitWidth": 256}},
        ),
        # analogous layouts
        (pa.large_binary(), m.DataTypeBinary(), LARGE),
        (pa.binary_view(), m.DataTypeBinary(), VIEW),
        (pa.large_list(pa.int8()), m.DataTypeList(item_type=m.DataTypeOption(inner=m.DataTypeInt8())), LARGE),
        (pa.list_view(pa.int8()), m.DataTypeList(item_type=m.DataTypeOption(inner=m.DataTypeInt8())), VIEW),
        (
            pa.large_list_view(pa.int8()),
            m.DataTypeList(item_type=m.DataTypeOption(inner=m.DataTypeInt8())),
            {BUFFER_ENCODING: {"kind": "View", "offsetBitWidth": 64}},
        ),
        (
            pa.run_end_encoded(pa.int16(), pa.utf8()),
            m.DataTypeString(),
            {BUFFER_ENCODING: {"kind": "RunEnd", "runEndsBitWidth": 16}},
        ),
        # default layouts carry no attribute
        (pa.utf8(), m.DataTypeString(), None),
        (pa.binary(), m.DataTypeBinary(), None),
        (pa.date32(), m.DataTypeDate(), None),
        (pa.list_(pa.field("item", pa.bool_(), False)), m.DataTypeList(item_type=m.DataTypeBool()), None),
        # parameters
        (pa.binary(8), m.DataTypeBinary(fixed_length=8), None),
        (
            pa.list_(pa.int8(), 4),
            m.DataTypeList(item_type=m.DataTypeOption(inner=m.DataTypeInt8()), fixed_length=4),
            None,
        ),
        (pa.time64("us"), m.DataTypeTime(unit=m.TimeUnit.MICROSECOND), None),
        (pa.duration("s"), m.DataTypeDuration(unit=m.TimeUnit.SECOND), None),
        (
            pa.timestamp("ns", tz="+01:00"),
            m.DataTypeTimestamp(unit=m.TimeUnit.NANOSECOND, timezone="+01:00"),
            None,
        ),
        (
            pa.map_(pa.utf8(), pa.field("value", pa.int32(), False), keys_sorted=True),
            m.DataTypeMap(key_type=m.DataTypeString(), value_type=m.DataTypeInt32(), keys_sorted=True),
            None,
        ),
        (
            pa.map_(pa.utf8(), pa.int32()),
            m.DataTypeMap(
                key_type=m.DataTypeString(),
                value_type=m.DataTypeOption(inner=m.DataTypeInt32()),
                keys_sorted=False,
            ),
            None,
        ),
        (
            pa.struct([("a", pa.large_utf8()), pa.field("b", pa.float32(), False)]),
            m.DataTypeStruct(
                fields=[
                    m.DataField(name="a", type=m.DataTypeOption(inner=m.DataTypeString()), extra=LARGE),
                    m.DataField(name="b", type=m.DataTypeFloat32()),
                ]
            ),
            None,
        ),
    ],
)
def test_odf_form_of_arrow_types(
    arrow_type: pa.DataType, odf_type: Any, extra: dict[str, Any] | None
) -> None:
    assert _odf_field(arrow_type) == m.DataField(name="f", type=odf_type, extra=extra)


def test_every_supported_type_round_trips_arrow_odf_arrow() -> None:
    back = data_schema_to_arrow(data_schema_from_arrow(ALL_TYPES))
    assert back.equals(ALL_TYPES, check_metadata=True), f"{back}\n!=\n{ALL_TYPES}"


@pytest.mark.parametrize("field", list(ALL_TYPES), ids=lambda f: f.name)
def test_each_field_round_trips(field: pa.Field) -> None:
    schema = pa.schema([field])
    assert data_schema_to_arrow(data_schema_from_arrow(schema)).equals(schema, check_metadata=True)


def test_every_supported_type_round_trips_odf_arrow_odf() -> None:
    odf = data_schema_from_arrow(ALL_TYPES)
    assert data_schema_from_arrow(data_schema_to_arrow(odf)) == odf


@pytest.mark.parametrize(
    "odf_type, arrow_type",
    [
        (m.DataTypeString(), pa.utf8()),
        (m.DataTypeBinary(), pa.binary()),
        (m.DataTypeDate(), pa.date32()),
        (m.DataTypeDecimal(precision=38, scale=2), pa.decimal128(38, 2)),
        (m.DataTypeDecimal(precision=39, scale=2), pa.decimal256(39, 2)),
        (m.DataTypeTimestamp(), pa.timestamp("ms", tz="UTC")),
        (m.DataTypeTimestamp(unit=m.TimeUnit.MICROSECOND), pa.timestamp("us", tz="UTC")),
        (m.DataTypeTimestamp(timezone="Europe/Paris"), pa.timestamp("ms", tz="Europe/Paris")),
        (m.DataTypeTime(), pa.time32("ms")),
        (m.DataTypeTime(unit=m.TimeUnit.NANOSECOND), pa.time64("ns")),
        (m.DataTypeDuration(), pa.duration("ms")),
        (m.DataTypeList(item_type=m.DataTypeInt16()), pa.list_(pa.field("item", pa.int16(), False))),
        (
            m.DataTypeMap(key_type=m.DataTypeUInt8(), value_type=m.DataTypeNull()),
            pa.map_(pa.uint8(), pa.null()),
        ),
        (m.DataTypeNull(), pa.null()),
    ],
)
def test_odf_types_without_attributes_map_to_default_encodings(
    odf_type: Any, arrow_type: pa.DataType
) -> None:
    schema = data_schema_to_arrow(m.DataSchema(fields=[m.DataField(name="f", type=odf_type)]))
    nullable = isinstance(odf_type, m.DataTypeNull)  # Arrow's Null is always nullable
    assert schema.equals(pa.schema([pa.field("f", arrow_type, nullable=nullable)]), check_metadata=True)


def test_option_decides_nullability_at_every_level() -> None:
    odf = m.DataSchema(
        fields=[
            m.DataField(name="a", type=m.DataTypeOption(inner=m.DataTypeList(item_type=m.DataTypeInt32()))),
            m.DataField(
                name="b",
                type=m.DataTypeStruct(
                    fields=[m.DataField(name="c", type=m.DataTypeOption(inner=m.DataTypeString()))]
                ),
            ),
        ]
    )
    expected = pa.schema(
        [
            pa.field("a", pa.list_(pa.field("item", pa.int32(), nullable=False))),
            pa.field("b", pa.struct([pa.field("c", pa.utf8())]), nullable=False),
        ]
    )
    assert data_schema_to_arrow(odf).equals(expected, check_metadata=True)


def test_attribute_spellings_of_the_reference_are_accepted() -> None:
    odf = m.DataSchema(
        fields=[
            m.DataField(
                name="s",
                type=m.DataTypeString(),
                extra={BUFFER_ENCODING: {"kind": "contiguous", "offsetBitWidth": 64}, "a.com/x": 1},
            ),
            m.DataField(name="d", type=m.DataTypeDate(), extra={DATE_ENCODING: {"unit": "millisecond"}}),
            m.DataField(name="v", type=m.DataTypeBinary(), extra={BUFFER_ENCODING: {"kind": "View"}}),
            m.DataField(name="r", type=m.DataTypeInt8(), extra={BUFFER_ENCODING: {"kind": "runEnd"}}),
        ]
    )
    assert data_schema_to_arrow(odf).types == [
        pa.large_utf8(),
        pa.date64(),
        pa.binary_view(),
        pa.run_end_encoded(pa.int32(), pa.int8()),
    ]


def test_timestamp_without_timezone_reads_as_the_spec_default() -> None:
    odf = data_schema_from_arrow(pa.schema([pa.field("t", pa.timestamp("us"), nullable=False)]))
    assert odf.fields[0].type == m.DataTypeTimestamp(unit=m.TimeUnit.MICROSECOND, timezone=None)
    assert data_schema_to_arrow(odf).field("t").type == pa.timestamp("us", tz="UTC")


def test_arrow_metadata_is_not_carried() -> None:
    schema = pa.schema([pa.field("a", pa.int32(), metadata={"k": "v"})], metadata={"pandas": "{}"})
    odf = data_schema_from_arrow(schema)
    assert odf == m.DataSchema(fields=[m.DataField(name="a", type=m.DataTypeOption(inner=m.DataTypeInt32()))])
    assert data_schema_to_arrow(odf).equals(schema)  # equal apart from the metadata


def test_strip_encoding_keeps_only_logical_attributes_at_every_level() -> None:
    odf = data_schema_from_arrow(
        pa.schema(
            [
                pa.field("s", pa.large_utf8()),
                ("st", pa.struct([("a", pa.string_view()), ("b", pa.date64()), ("c", pa.int8())])),
                ("l", pa.list_(pa.struct([("d", pa.decimal128(5, 1))]))),
                ("m", pa.map_(pa.utf8(), pa.struct([("e", pa.large_binary())]))),
            ]
        )
    )
    described = m.DataField(
        name="x",
        type=m.DataTypeString(),
        extra={BUFFER_ENCODING: {"kind": "View"}, "opendatafabric.org/description": "kept"},
    )
    odf = m.DataSchema(fields=[*odf.fields, described], extra={"kamu.dev/archetype": "Collection"})
    opt = m.DataTypeOption
    assert strip_encoding(odf) == m.DataSchema(
        fields=[
            m.DataField(name="s", type=opt(inner=m.DataTypeString())),
            m.DataField(
                name="st",
                type=opt(
                    inner=m.DataTypeStruct(
                        fields=[
                            m.DataField(name="a", type=opt(inner=m.DataTypeString())),
                            m.DataField(name="b", type=opt(inner=m.DataTypeDate())),
                            m.DataField(name="c", type=opt(inner=m.DataTypeInt8())),
                        ]
                    )
                ),
            ),
            m.DataField(
                name="l",
                type=opt(
                    inner=m.DataTypeList(
                        item_type=opt(
                            inner=m.DataTypeStruct(
                                fields=[
                                    m.DataField(
                                        name="d", type=opt(inner=m.DataTypeDecimal(precision=5, scale=1))
                                    )
                                ]
                            )
                        )
                    )
                ),
            ),
            m.DataField(
                name="m",
                type=opt(
                    inner=m.DataTypeMap(
                        key_type=m.DataTypeString(),
                        value_type=opt(
                            inner=m.DataTypeStruct(
                                fields=[m.DataField(name="e", type=opt(inner=m.DataTypeBinary()))]
                            )
                        ),
                        keys_sorted=False,
                    )
                ),
            ),
            m.DataField(name="x", type=m.DataTypeString(), extra={"opendatafabric.org/description": "kept"}),
        ],
        extra={"kamu.dev/archetype": "Collection"},
    )
    assert strip_encoding(strip_encoding(odf)) == strip_encoding(odf)


@pytest.mark.parametrize(
    "arrow_type, message",
    [
        (pa.dictionary(pa.int32(), pa.utf8()), r"columns\.f: Arrow type dictionary"),
        (pa.union([pa.field("a", pa.int8())], "sparse"), r"columns\.f: Arrow type sparse_union"),
        (pa.month_day_nano_interval(), r"columns\.f: Arrow type month_day_nano_interval"),
        (pa.uuid(), r"columns\.f: Arrow type extension<arrow.uuid>"),
        (pa.list_(pa.large_utf8()), r"columns\.f\.item: Arrow type large_string needs encoding attributes"),
        (pa.list_(pa.list_(pa.string_view())), r"columns\.f\.item\.item: Arrow type string_view"),
        (pa.map_(pa.utf8(), pa.date64()), r"columns\.f\.value: Arrow type date64"),
        (pa.map_(pa.large_utf8(), pa.int8()), r"columns\.f\.key: Arrow type large_string"),
        (pa.list_(pa.decimal256(10, 2)), r"columns\.f\.item: Arrow type decimal256\(10, 2\)"),
        (
            pa.struct([("g", pa.list_(pa.dictionary(pa.int8(), pa.utf8())))]),
            r"columns\.f\.g\.item: Arrow type dict",
        ),
        (pa.run_end_encoded(pa.int32(), pa.large_utf8()), r"columns\.f: run-end encoded large_string"),
    ],
)
def test_arrow_types_odf_cannot_express_are_rejected(arrow_type: pa.DataType, message: str) -> None:
    with pytest.raises(OdfFormatError, match=message):
        data_schema_from_arrow(pa.schema([pa.field("f", arrow_type)]))


def _field(t: Any, extra: dict[str, Any] | None = None) -> m.DataSchema:
    return m.DataSchema(fields=[m.DataField(name="a", type=t, extra=extra)])


@pytest.mark.parametrize(
    "schema, message",
    [
        (
            _field(m.DataTypeOption(inner=m.DataTypeOption(inner=m.DataTypeInt8()))),
            r"columns\.a: Option of Option",
        ),
        (
            _field(
                m.DataTypeList(item_type=m.DataTypeOption(inner=m.DataTypeOption(inner=m.DataTypeInt8())))
            ),
            r"columns\.a\.item: Option of Option",
        ),
        (
            _field(
                m.DataTypeMap(
                    key_type=m.DataTypeOption(inner=m.DataTypeString()), value_type=m.DataTypeInt8()
                )
            ),
            r"columns\.a\.key: Arrow map keys cannot be nullable",
        ),
        (
            _field(
                m.DataTypeStruct(
                    fields=[m.DataField(name="b", type=m.DataTypeDecimal(precision=77, scale=0))]
                )
            ),
            r"columns\.a\.b: decimal precision 77 exceeds",
        ),
        (
            _field(m.DataTypeDecimal(precision=50, scale=0), {DECIMAL_ENCODING: {"bitWidth": 128}}),
            r"columns\.a: .*precision",
        ),
        (_field(m.DataTypeBinary(fixed_length=2**40)), r"columns\.a: "),
        (
            _field(m.DataTypeString(), {DATE_ENCODING: {"unit": "Day"}}),
            r"dateEncoding: does not apply to type",
        ),
        (_field(m.DataTypeDate(), {DECIMAL_ENCODING: {"bitWidth": 128}}), r"decimalEncoding: does not apply"),
        (
            _field(m.DataTypeBinary(fixed_length=4), {BUFFER_ENCODING: {"kind": "View"}}),
            r"bufferEncoding: does not apply to type DataTypeBinary",
        ),
        (
            _field(m.DataTypeString(), {BUFFER_ENCODING: {"kind": "View", "offsetBitWidth": 64}}),
            r"Arrow has no DataTypeString with \('View', 64\)",
        ),
        (
            _field(m.DataTypeString(), {BUFFER_ENCODING: {"kind": "Contiguous", "offsetBitWidth": 16}}),
            r"offsetBitWidth must be one of 32, 64, got 16",
        ),
        (
            _field(m.DataTypeString(), {BUFFER_ENCODING: {"kind": "Contiguous", "offsetBitWidth": True}}),
            r"offsetBitWidth must be one of",
        ),
        (_field(m.DataTypeString(), {BUFFER_ENCODING: {"kind": "Packed"}}), r"kind must be one of"),
        (
            _field(m.DataTypeString(), {BUFFER_ENCODING: {"kind": "View", "runEndsBitWidth": 32}}),
            r"View encoding takes only kind and offsetBitWidth",
        ),
        (_field(m.DataTypeString(), {BUFFER_ENCODING: "View"}), r"columns\.a\.extra\..*expected an object"),
        (
            _field(m.DataTypeDate(), {DATE_ENCODING: {"unit": "Week"}}),
            r"unit must be one of Day, Millisecond",
        ),
    ],
)
def test_odf_schemas_arrow_cannot_express_are_rejected(schema: m.DataSchema, message: str) -> None:
    with pytest.raises(OdfFormatError, match=message):
        data_schema_to_arrow(schema)


def test_odf_schema_encodes_through_the_flatbuffers_codec() -> None:
    odf = data_schema_from_arrow(ALL_TYPES)
    for schema in (odf, strip_encoding(odf)):
        event = m.SetDataSchema(schema=schema)
        data = encode_table(event)
        back = decode_table(data, m.SetDataSchema)
        assert back == event
        assert encode_table(back) == data


# --------------------------------------------------------------------------------------------------
# Properties over generated Arrow schemas
# --------------------------------------------------------------------------------------------------

_LEAVES = st.sampled_from(
    [
        pa.null(),
        pa.bool_(),
        pa.int8(),
        pa.uint64(),
        pa.float16(),
        pa.float64(),
        pa.utf8(),
        pa.binary(),
        pa.binary(3),
        pa.date32(),
        pa.time32("s"),
        pa.time64("ns"),
        pa.timestamp("ms", tz="UTC"),
        pa.timestamp("ns", tz="Asia/Tokyo"),
        pa.duration("us"),
        pa.decimal128(12, 3),
        pa.decimal256(60, 10),
    ]
)
_FIELD_ONLY = st.sampled_from(
    [
        pa.large_utf8(),
        pa.string_view(),
        pa.large_binary(),
        pa.binary_view(),
        pa.date64(),
        pa.decimal128(30, 1),
        pa.decimal256(10, 2),
        pa.run_end_encoded(pa.int64(), pa.utf8()),
    ]
)
_NAMES = st.text(min_size=1, max_size=8)


def _fields(types: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[list[pa.Field]]:
    return st.lists(
        st.builds(
            lambda n, t, nullable: pa.field(n, t, nullable or t == pa.null()), _NAMES, types, st.booleans()
        ),
        max_size=4,
    )


def _items(types: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.Field]:
    return st.builds(
        lambda t, nullable: pa.field("item", t, nullable or t == pa.null()), types, st.booleans()
    )


def _at_field(types: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    """Types for a field: also the layouts only a field's attributes can record."""
    items = _items(types)
    return st.one_of(types, _FIELD_ONLY, items.map(pa.large_list), items.map(pa.list_view))


def _nested(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    """Containers in their default layout: they may be list items or map values themselves."""
    items = _items(children)
    return st.one_of(
        items.map(pa.list_),
        st.builds(pa.list_, items, st.integers(1, 4)),
        _fields(_at_field(children)).map(pa.struct),
        st.builds(
            lambda k, v, nullable, s: pa.map_(k, pa.field("value", v, nullable or v == pa.null()), s),
            _LEAVES.filter(lambda t: t != pa.null()),
            children,
            st.booleans(),
            st.booleans(),
        ),
    )


_TYPES = st.recursive(_LEAVES, _nested, max_leaves=8)
_SCHEMAS = _fields(_at_field(_TYPES)).map(pa.schema)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(schema=_SCHEMAS)
def test_generated_schemas_round_trip_and_encode(schema: pa.Schema) -> None:
    odf = data_schema_from_arrow(schema)
    assert data_schema_to_arrow(odf).equals(schema, check_metadata=True)
    event = m.SetDataSchema(schema=strip_encoding(odf))
    assert decode_table(encode_table(event), m.SetDataSchema) == event

"""The deprecated `ddlSchema` (Spark SQL DDL columns) parsed into ODF `DataSchema`s."""

from __future__ import annotations

import pyarrow as pa
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format import model as m
from airflow_odf.odf.schema.data_schema import data_schema_to_arrow
from airflow_odf.odf.schema.ddl import DESCRIPTION, parse_ddl_schema, parse_ddl_type
from tests.paths import CONFORMANCE_BLOCKS as CONFORMANCE

MS = m.TimeUnit.MILLISECOND
UTC_TS = m.DataTypeTimestamp(unit=MS, timezone="UTC")


def opt(t: m.DataType) -> m.DataTypeOption:
    return m.DataTypeOption(inner=t)


def field(name: str, t: m.DataType, extra: dict | None = None) -> m.DataField:
    return m.DataField(name=name, type=t, extra=extra)


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [
        ("STRING", m.DataTypeString()),
        ("TEXT", m.DataTypeString()),
        ("VARCHAR(10)", m.DataTypeString()),
        ("CHAR(3)", m.DataTypeString()),
        ("BOOLEAN", m.DataTypeBool()),
        ("BOOL", m.DataTypeBool()),
        ("TINYINT", m.DataTypeInt8()),
        ("BYTE", m.DataTypeInt8()),
        ("SMALLINT", m.DataTypeInt16()),
        ("SHORT", m.DataTypeInt16()),
        ("INT", m.DataTypeInt32()),
        ("INTEGER", m.DataTypeInt32()),
        ("BIGINT", m.DataTypeInt64()),
        ("LONG", m.DataTypeInt64()),
        ("FLOAT", m.DataTypeFloat32()),
        ("REAL", m.DataTypeFloat32()),
        ("DOUBLE", m.DataTypeFloat64()),
        ("DECIMAL", m.DataTypeDecimal(precision=10, scale=0)),
        ("DECIMAL(12,3)", m.DataTypeDecimal(precision=12, scale=3)),
        ("DECIMAL( 7 )", m.DataTypeDecimal(precision=7, scale=0)),
        ("NUMERIC(38, 18)", m.DataTypeDecimal(precision=38, scale=18)),
        ("DATE", m.DataTypeDate()),
        ("TIMESTAMP", UTC_TS),
        ("TIMESTAMP_LTZ", UTC_TS),
        ("TIMESTAMP_NTZ", m.DataTypeTimestamp(unit=MS, timezone=None)),
        ("BINARY", m.DataTypeBinary()),
        ("ARRAY<STRING>", m.DataTypeList(item_type=opt(m.DataTypeString()))),
        (
            "ARRAY<ARRAY<INT>>",
            m.DataTypeList(item_type=opt(m.DataTypeList(item_type=opt(m.DataTypeInt32())))),
        ),
        (
            "MAP<STRING, DOUBLE>",
            m.DataTypeMap(key_type=m.DataTypeString(), value_type=opt(m.DataTypeFloat64())),
        ),
        (
            "MAP<STRING,ARRAY<BIGINT>>",
            m.DataTypeMap(
                key_type=m.DataTypeString(),
                value_type=opt(m.DataTypeList(item_type=opt(m.DataTypeInt64()))),
            ),
        ),
        (
            "STRUCT<a: INT, b STRING NOT NULL>",
            m.DataTypeStruct(fields=[field("a", opt(m.DataTypeInt32())), field("b", m.DataTypeString())]),
        ),
        ("STRUCT<>", m.DataTypeStruct(fields=[])),
        (
            "STRUCT<p: STRUCT<`x y`: DOUBLE COMMENT 'east'>>",
            m.DataTypeStruct(
                fields=[
                    field(
                        "p",
                        opt(
                            m.DataTypeStruct(
                                fields=[field("x y", opt(m.DataTypeFloat64()), {DESCRIPTION: "east"})]
                            )
                        ),
                    )
                ]
            ),
        ),
    ],
)
def test_every_type(ddl: str, expected: m.DataType) -> None:
    assert parse_ddl_type(ddl) == expected
    assert parse_ddl_type(ddl.lower()) == expected  # type names are case-insensitive
    assert parse_ddl_schema([f"c {ddl}"]).fields == [field("c", opt(expected))]
    assert parse_ddl_schema([f"c {ddl} NOT NULL"]).fields == [field("c", expected)]


def test_brief_example_and_arrow() -> None:
    schema = parse_ddl_schema(
        [
            "date TIMESTAMP",
            "FXAUDCAD DOUBLE NOT NULL",
            "tags ARRAY<STRING>",
            "pos STRUCT<x: DOUBLE, y: DOUBLE>",
        ]
    )
    assert schema == m.DataSchema(
        fields=[
            field("date", opt(UTC_TS)),
            field("FXAUDCAD", m.DataTypeFloat64()),
            field("tags", opt(m.DataTypeList(item_type=opt(m.DataTypeString())))),
            field(
                "pos",
                opt(
                    m.DataTypeStruct(
                        fields=[field("x", opt(m.DataTypeFloat64())), field("y", opt(m.DataTypeFloat64()))]
                    )
                ),
            ),
        ]
    )
    assert data_schema_to_arrow(schema) == pa.schema(
        [
            pa.field("date", pa.timestamp("ms", tz="UTC"), nullable=True),
            pa.field("FXAUDCAD", pa.float64(), nullable=False),
            pa.field("tags", pa.list_(pa.field("item", pa.string(), nullable=True)), nullable=True),
            pa.field("pos", pa.struct([("x", pa.float64()), ("y", pa.float64())]), nullable=True),
        ]
    )


def test_arrow_conversion_of_every_kind() -> None:
    schema = parse_ddl_schema(
        "id BIGINT NOT NULL, amount DECIMAL(12,2), day DATE, ntz TIMESTAMP_NTZ, raw BINARY, "
        "attrs MAP<STRING, INT>, s STRUCT<a: INT NOT NULL, b: STRING>, flag BOOLEAN COMMENT 'f'"
    )
    arrow = data_schema_to_arrow(schema)
    assert arrow.field("id").type == pa.int64() and not arrow.field("id").nullable
    assert arrow.field("amount").type == pa.decimal128(12, 2) and arrow.field("amount").nullable
    assert arrow.field("day").type == pa.date32()
    # ODF has no naive timestamps: an absent timezone means the spec's default "UTC" (FORMAT-NOTES.md).
    assert arrow.field("ntz").type == pa.timestamp("ms", tz="UTC")
    assert arrow.field("raw").type == pa.binary()
    assert arrow.field("attrs").type == pa.map_(pa.string(), pa.int32())
    assert arrow.field("attrs").type.item_field.nullable
    assert not arrow.field("attrs").type.key_field.nullable
    s = arrow.field("s").type
    assert not s.field("a").nullable and s.field("b").nullable
    assert arrow.field("flag").type == pa.bool_()


def test_nullability() -> None:
    schema = parse_ddl_schema(["a INT", "b INT NOT NULL", "c INT not null", "d INT  NOT   NULL  "])
    assert [f.type for f in schema.fields] == [opt(m.DataTypeInt32())] + [m.DataTypeInt32()] * 3


def test_backquoted_names() -> None:
    schema = parse_ddl_schema(["`my col` STRING", "`a``b` INT", "`x,y` INT", "`NOT` INT NOT NULL"])
    assert [f.name for f in schema.fields] == ["my col", "a`b", "x,y", "NOT"]
    assert schema.fields[3].type == m.DataTypeInt32()
    assert [f.name for f in parse_ddl_schema("`a, b` INT, `c` STRING").fields] == ["a, b", "c"]


def test_colon_form() -> None:
    assert parse_ddl_schema(["a: INT", "b:STRING", "`c d` : DOUBLE NOT NULL"]).fields == [
        field("a", opt(m.DataTypeInt32())),
        field("b", opt(m.DataTypeString())),
        field("c d", m.DataTypeFloat64()),
    ]


def test_comments() -> None:
    schema = parse_ddl_schema(
        [
            "a INT COMMENT 'the a'",
            'b INT NOT NULL COMMENT "it\'s b"',
            "c INT COMMENT 'it\\'s, <c>' NOT NULL",
            "d INT COMMENT 'x''y'",
        ]
    )
    assert [f.extra for f in schema.fields] == [
        {DESCRIPTION: "the a"},
        {DESCRIPTION: "it's b"},
        {DESCRIPTION: "it's, <c>"},
        {DESCRIPTION: "x'y"},
    ]
    assert [f.type for f in schema.fields] == [
        opt(m.DataTypeInt32()),
        m.DataTypeInt32(),
        m.DataTypeInt32(),
        opt(m.DataTypeInt32()),
    ]
    assert parse_ddl_schema("a INT COMMENT 'x, y', b STRING").fields[1].name == "b"


def test_single_comma_separated_string() -> None:
    schema = parse_ddl_schema(
        "a INT, b STRING NOT NULL, m MAP<STRING, ARRAY<INT>>, s STRUCT<x: INT, y: INT>,"
    )
    assert [f.name for f in schema.fields] == ["a", "b", "m", "s"]
    assert schema.fields[1].type == m.DataTypeString()
    assert parse_ddl_schema("") == m.DataSchema(fields=[])
    assert parse_ddl_schema([]) == m.DataSchema(fields=[])


def test_conformance_vector() -> None:
    block = yaml.safe_load((CONFORMANCE / "stability_4_setpollingsource_ddl.yaml").read_text())
    ddl = block["content"]["event"]["read"]["ddlSchema"]
    assert ddl == ["a: INT", "b: INT"]
    schema = parse_ddl_schema(ddl)
    assert schema.fields == [field("a", opt(m.DataTypeInt32())), field("b", opt(m.DataTypeInt32()))]
    assert data_schema_to_arrow(schema) == pa.schema([("a", pa.int32()), ("b", pa.int32())])


def test_all_conformance_ddl_schemas_parse() -> None:
    found = 0
    for path in sorted(CONFORMANCE.glob("*.yaml")):
        text = path.read_text()
        if "ddlSchema" not in text:
            continue
        for doc in yaml.safe_load_all(text):
            for ddl in _ddl_schemas(doc):
                found += 1
                data_schema_to_arrow(parse_ddl_schema(ddl))
    assert found >= 1


def _ddl_schemas(node: object) -> list[list[str]]:
    if isinstance(node, dict):
        out = [node["ddlSchema"]] if isinstance(node.get("ddlSchema"), list) else []
        for v in node.values():
            out += _ddl_schemas(v)
        return out
    if isinstance(node, list):
        return [d for v in node for d in _ddl_schemas(v)]
    return []


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (["a INT", "b FOO"], "ddlSchema[1] 'b FOO': unknown type FOO (expected STRING, "),
        (
            ["a ARRAY<INT"],
            "ddlSchema[0] 'a ARRAY<INT': unbalanced brackets: '<' at position 7 is never closed",
        ),
        (["a INT>"], "ddlSchema[0] 'a INT>': unbalanced brackets: '>' at position 5 has no opening bracket"),
        (["a DECIMAL(10,2>"], "unbalanced brackets: '(' at position 9 closed by '>'"),
        (["a"], "ddlSchema[0] 'a': missing type of column 'a'"),
        (["a:"], "ddlSchema[0] 'a:': missing type of column 'a'"),
        (["`` INT"], "ddlSchema[0] '`` INT': empty column name ``"),
        ([": INT"], "ddlSchema[0] ': INT': expected a column name, found ':"),
        (["x INT", ""], "ddlSchema[1] '': empty column definition"),
        ("a INT,, b INT", "ddlSchema[1] '': empty column definition"),
        (["`a INT"], "unterminated backquoted column name"),
        (["a INT COMMENT 'x"], "unterminated comment string"),
        (["a INT COMMENT"], "expected a quoted comment string, found end of text"),
        (["a INT NOT"], "expected NULL after NOT"),
        (["a INT NULL"], "unexpected 'NULL' at position 6 (expected NOT NULL, COMMENT"),
        (["a INT b INT"], "unexpected 'b INT' at position 6"),
        (["a INT", "a STRING"], "ddlSchema[1] 'a STRING': duplicate column name 'a'"),
        (["s STRUCT<x INT, x INT>"], "duplicate struct field name 'x'"),
        (["s STRUCT<x INT y INT>"], "expected ',' or '>' in STRUCT<"),
        (["s STRUCT<x>"], "missing type of struct field 'x'"),
        (["m MAP<STRING>"], "expected ',' between MAP key and value types"),
        (["l ARRAY<>"], "expected a type (STRING"),
        (["l ARRAY INT"], "expected '<' after ARRAY"),
        (["v VARCHAR"], "expected '(' and a length after VARCHAR"),
        (["i INT(3)"], "INT takes no parameters"),
        (["d DECIMAL(0,0)"], "invalid DECIMAL(0,0)"),
        (["d DECIMAL(5,6)"], "invalid DECIMAL(5,6)"),
        (["d DECIMAL(x)"], "expected DECIMAL precision (an integer)"),
        (["d DECIMAL(99999999999)"], "too large"),
        (["a " + "ARRAY<" * 100 + "INT" + ">" * 100], "nested deeper than 64 levels"),
        ([1], "ddlSchema[0]: expected a string, got int"),
        (None, "ddlSchema: expected a list of column definitions, got NoneType"),
    ],
)
def test_errors(columns: object, message: str) -> None:
    with pytest.raises(OdfFormatError) as info:
        parse_ddl_schema(columns)  # type: ignore[arg-type]
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("FOO", "DDL type 'FOO': unknown type FOO"),
        ("", "DDL type '': expected a type"),
        ("INT NOT NULL", "unexpected 'NOT NULL' at position 4 after the type"),
        ("ARRAY<INT", "never closed"),
    ],
)
def test_type_errors(text: str, message: str) -> None:
    with pytest.raises(OdfFormatError) as info:
        parse_ddl_type(text)
    assert message in str(info.value)


_DDL_ALPHABET = st.sampled_from(
    [
        *"abcxyz019 _:,<>()`'\"\\\n\t",
        "INT",
        "STRING",
        "ARRAY",
        "MAP",
        "STRUCT",
        "DECIMAL",
        "NOT",
        "NULL",
        "COMMENT",
        "VARCHAR",
        " ",
    ]
)
_DDL_TEXT = st.one_of(st.text(max_size=60), st.lists(_DDL_ALPHABET, max_size=30).map("".join))


@settings(max_examples=400, deadline=None)
@given(st.one_of(_DDL_TEXT, st.lists(_DDL_TEXT, max_size=4)))
def test_random_text_only_raises_format_error(columns: str | list[str]) -> None:
    try:
        schema = parse_ddl_schema(columns)
    except OdfFormatError as e:
        assert str(e).startswith("ddlSchema")
        return
    assert isinstance(schema, m.DataSchema)


@settings(max_examples=300, deadline=None)
@given(_DDL_TEXT)
def test_random_type_text_only_raises_format_error(text: str) -> None:
    try:
        parse_ddl_type(text)
    except OdfFormatError as e:
        assert str(e).startswith("DDL type")


_SIMPLE_TYPES = [
    "STRING",
    "INT",
    "BIGINT",
    "DOUBLE",
    "BOOLEAN",
    "DATE",
    "TIMESTAMP",
    "DECIMAL(9,2)",
    "BINARY",
]


@st.composite
def _ddl_types(draw: st.DrawFn, depth: int = 0) -> str:
    if depth >= 3 or draw(st.booleans()):
        return draw(st.sampled_from(_SIMPLE_TYPES))
    kind = draw(st.sampled_from(["ARRAY", "MAP", "STRUCT"]))
    if kind == "ARRAY":
        return f"ARRAY<{draw(_ddl_types(depth + 1))}>"
    if kind == "MAP":
        return f"MAP<STRING, {draw(_ddl_types(depth + 1))}>"
    n = draw(st.integers(1, 3))
    parts = [
        f"f{i}: {draw(_ddl_types(depth + 1))}{draw(st.sampled_from(['', ' NOT NULL']))}" for i in range(n)
    ]
    return f"STRUCT<{', '.join(parts)}>"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_ddl_types(), st.booleans()), min_size=1, max_size=5))
def test_generated_valid_ddl_converts_to_arrow(columns: list[tuple[str, bool]]) -> None:
    ddl = [f"c{i} {t}{' NOT NULL' if nn else ''}" for i, (t, nn) in enumerate(columns)]
    schema = parse_ddl_schema(ddl)
    assert parse_ddl_schema(", ".join(ddl)) == schema  # the single-string form is the same
    arrow = data_schema_to_arrow(schema)
    assert [f.nullable for f in arrow] == [not nn for _, nn in columns]

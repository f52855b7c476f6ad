"""The read step on real files of every format, written by the tests."""

from __future__ import annotations

import datetime as dt
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.readers import QUARANTINE_FILE, ReadResult, read_input

UTC = dt.timezone.utc


def _write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


def _rows(result: ReadResult) -> list[tuple[Any, ...]]:
    assert result.df is not None
    return [tuple(r) for r in result.df.collect()]


def _types(result: ReadResult) -> list[tuple[str, str]]:
    assert result.df is not None
    return [(f.name, f.dataType.simpleString()) for f in result.df.schema.fields]


def _bad_input(
    spark: SparkSession, read: dict[str, Any], paths: list[str], schema: pa.Schema | None = None
) -> str:
    with pytest.raises(EngineInputError) as e:
        result = read_input(spark, read, paths, schema)
        assert result.df is not None
        result.df.collect()
    assert e.value.kind == "bad-input"
    assert "JVM" not in e.value.message and "at org.apache" not in e.value.message
    return e.value.message


# --- Csv ----------------------------------------------------------------------------------------------------


def test_csv_defaults_read_every_column_as_string_without_header(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(tmp_path, "a.csv", "1,x\n2,\n")
    result = read_input(spark, {"kind": "Csv"}, [path], None)
    assert _types(result) == [("_c0", "string"), ("_c1", "string")]
    assert _rows(result) == [("1", "x"), ("2", None)]
    assert result.num_quarantined == 0 and result.quarantine_path is None


def test_csv_options_map_to_spark(spark: SparkSession, tmp_path: Path) -> None:
    content = "id;name;score\n1;'Zoë; \"Z\"';1.5\n2;NA;2\n".encode("latin-1", errors="replace")
    content = content.replace(b"?", "ë".encode("latin-1"))
    path = _write(tmp_path, "opts.csv", content)
    read = {
        "kind": "Csv",
        "separator": ";",
        "encoding": "ISO-8859-1",
        "quote": "'",
        "header": True,
        "inferSchema": True,
        "nullValue": "NA",
    }
    result = read_input(spark, read, [path], None)
    assert _types(result) == [("id", "int"), ("name", "string"), ("score", "double")]
    assert _rows(result) == [(1, 'Zoë; "Z"', 1.5), (2, None, 2.0)]


def test_csv_empty_escape_and_quoted_newline_is_a_broken_record(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(tmp_path, "esc.csv", 'k,v\n2,"C:\\dir\\"\n')
    result = read_input(spark, {"kind": "Csv", "header": True, "escape": ""}, [path], None)
    assert _rows(result) == [("2", "C:\\dir\\")]
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    nl = _write(tmp_path, "nl.csv", 'k,v\n1,"two\nlines"\n')
    with pytest.raises(EngineInputError, match=r"nl\.csv, line [23]"):
        read_input(spark, {"kind": "Csv", "header": True}, [nl], schema)


def test_csv_schema_with_default_rfc3339_and_custom_formats(spark: SparkSession, tmp_path: Path) -> None:
    schema = pa.schema([("n", pa.int64()), ("d", pa.date32()), ("t", pa.timestamp("ms", tz="UTC"))])
    iso = _write(
        tmp_path, "iso.csv", "1,2024-02-29,2024-01-01T10:00:00+02:00\n2,2024-03-01,2024-01-01T10:00:00.5Z\n"
    )
    result = read_input(spark, {"kind": "Csv"}, [iso], schema)
    assert _types(result) == [("n", "bigint"), ("d", "date"), ("t", "timestamp")]
    assert _rows(result) == [
        (1, dt.date(2024, 2, 29), dt.datetime(2024, 1, 1, 8, 0)),
        (2, dt.date(2024, 3, 1), dt.datetime(2024, 1, 1, 10, 0, 0, 500000)),
    ]
    custom = _write(tmp_path, "custom.csv", "3,29.02.2024,01/01/2024 10:30\n")
    read = {"kind": "Csv", "dateFormat": "dd.MM.yyyy", "timestampFormat": "MM/dd/yyyy HH:mm"}
    assert _rows(read_input(spark, read, [custom], schema)) == [
        (3, dt.date(2024, 2, 29), dt.datetime(2024, 1, 1, 10, 30))
    ]


def test_csv_wrong_column_count_fails_with_file_line_and_text(spark: SparkSession, tmp_path: Path) -> None:
    good = _write(tmp_path, "good.csv", "a,b\n1,2\n")
    bad = _write(tmp_path, "bad.csv", "a,b\n1,2\n3,4\n4,5,6\n7\n")
    message = _bad_input(spark, {"kind": "Csv", "header": True}, [good, bad])
    assert message.startswith(f"{bad}, line 4: ")
    assert "'4,5,6'" in message and "2 broken record(s)" in message and "struct<a:string,b:string>" in message


def test_csv_unparseable_value_under_schema_names_the_line(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(tmp_path, "v.csv", "1,a\n2,b\nthree,c\n")
    schema = pa.schema([("n", pa.int32()), ("s", pa.string())])
    message = _bad_input(spark, {"kind": "Csv"}, [path], schema)
    assert message.startswith(f"{path}, line 3: ") and "'three,c'" in message


def test_csv_quarantine_keeps_good_rows_and_records_bad_ones(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(tmp_path, "q.csv", "n,s\n1,a\nx,b\n2,c\n1,a,extra\nx,b\n")
    schema = pa.schema([("n", pa.int32()), ("s", pa.string())])
    quarantine = tmp_path / "quarantine"
    result = read_input(
        spark,
        {"kind": "Csv", "header": True},
        [path],
        schema,
        bad_records="quarantine",
        quarantine_dir=str(quarantine),
    )
    assert sorted(_rows(result)) == [(1, "a"), (2, "c")]
    assert result.num_quarantined == 3
    assert result.quarantine_path == str(quarantine / QUARANTINE_FILE)
    lines = [json.loads(line) for line in Path(result.quarantine_path).read_text().splitlines()]
    assert sorted((r["file"], r["line"], r["record"]) for r in lines) == [
        (path, 3, "x,b"),
        (path, 5, "1,a,extra"),
        (path, 6, "x,b"),
    ]


# --- Json, NdJson -------------------------------------------------------------------------------------------


def test_ndjson_infers_types_and_applies_schema(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(
        tmp_path, "a.ndjson", '{"id": 1, "tag": {"k": "x"}, "t": "2024-01-01T00:00:00Z"}\n\n{"id": 2}\n'
    )
    inferred = read_input(spark, {"kind": "NdJson"}, [path], None)
    assert _types(inferred) == [("id", "bigint"), ("t", "string"), ("tag", "struct<k:string>")]
    assert _rows(inferred) == [(1, "2024-01-01T00:00:00Z", ("x",)), (2, None, None)]
    schema = pa.schema([("t", pa.timestamp("ms", tz="UTC")), ("id", pa.int16())])
    assert _rows(read_input(spark, {"kind": "NdJson"}, [path], schema)) == [
        (dt.datetime(2024, 1, 1), 1),
        (None, 2),
    ]


def test_ndjson_broken_line_is_named(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(tmp_path, "b.ndjson", '{"id": 1}\n{"id": 2}\n{"id": 3,\n{"id": 4}\n')
    message = _bad_input(spark, {"kind": "NdJson"}, [path])
    assert message.startswith(f"{path}, line 3: ") and "'{\"id\": 3,'" in message


def test_json_root_array(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(tmp_path, "a.json", '[\n {"a": 1, "b": "x"},\n {"a": 2, "b": "y"}\n]\n')
    assert _rows(read_input(spark, {"kind": "Json"}, [path], None)) == [(1, "x"), (2, "y")]


def test_json_sub_path_with_and_without_schema(spark: SparkSession, tmp_path: Path) -> None:
    doc = {"meta": {"n": 2}, "data": {"items": [{"v": 1.5, "k": "a"}, {"v": 2, "k": "b"}]}}
    path = _write(tmp_path, "doc.json", json.dumps(doc, indent=2))
    read = {"kind": "Json", "subPath": "data.items"}
    result = read_input(spark, read, [path], None)
    assert _types(result) == [("k", "string"), ("v", "double")]
    assert _rows(result) == [("a", 1.5), ("b", 2.0)]
    schema = pa.schema([("v", pa.float32()), ("k", pa.string())])
    assert _rows(read_input(spark, read, [path], schema)) == [(1.5, "a"), (2.0, "b")]


def test_json_sub_path_errors(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(tmp_path, "doc.json", '{"data": {"items": [1, 2]}}')
    assert "subPath 'data.nope' not found" in _bad_input(
        spark, {"kind": "Json", "subPath": "data.nope"}, [path]
    )
    message = _bad_input(spark, {"kind": "Json", "subPath": "data.items"}, [path])
    assert "is array<bigint>, expected an array of objects" in message
    empty = _write(tmp_path, "empty.json", '{"data": {"items": []}}')
    assert read_input(spark, {"kind": "Json", "subPath": "data.items"}, [empty], None).df is None


def test_json_malformed_document_names_file_and_position(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(tmp_path, "bad.json", '[\n {"a": 1},\n {"a": 2\n]\n')
    message = _bad_input(spark, {"kind": "Json"}, [path])
    assert message.startswith(f"{path}, line 4: malformed JSON document") and "expected records of" in message


# --- GeoJson, NdGeoJson -------------------------------------------------------------------------------------

POINT = {"type": "Point", "coordinates": [1.5, 2.0]}
POLYGON = {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 0]]]}
FEATURES = [
    {"type": "Feature", "properties": {"name": "p", "pop": 10}, "geometry": POINT},
    {"type": "Feature", "properties": {"name": "q", "pop": None}, "geometry": POLYGON},
]


def test_geojson_feature_collection_gives_a_row_per_feature(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(
        tmp_path, "a.geojson", json.dumps({"type": "FeatureCollection", "features": FEATURES}, indent=1)
    )
    result = read_input(spark, {"kind": "GeoJson"}, [path], None)
    assert _types(result) == [("name", "string"), ("pop", "bigint"), ("geometry", "string")]
    rows = _rows(result)
    assert [(name, pop) for name, pop, _ in rows] == [("p", 10), ("q", None)]
    assert [json.loads(g) for _, _, g in rows] == [POINT, POLYGON]
    assert rows[0][2] == '{"type":"Point","coordinates":[1.5,2.0]}'


def test_ndgeojson_gives_the_same_records_and_takes_a_schema(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(tmp_path, "a.ndgeojson", "".join(json.dumps(f) + "\n" for f in FEATURES))
    rows = _rows(read_input(spark, {"kind": "NdGeoJson"}, [path], None))
    assert [(n, p, json.loads(g)) for n, p, g in rows] == [("p", 10, POINT), ("q", None, POLYGON)]
    schema = pa.schema([("geometry", pa.string()), ("pop", pa.int32())])
    for kind, file in [
        ("NdGeoJson", path),
        ("GeoJson", _write(tmp_path, "b.geojson", json.dumps({"features": FEATURES}))),
    ]:
        result = read_input(spark, {"kind": kind}, [file], schema)
        assert _types(result) == [("geometry", "string"), ("pop", "int")]
        assert [(json.loads(g), p) for g, p in _rows(result)] == [(POINT, 10), (POLYGON, None)]


def test_geojson_that_is_not_a_feature_collection(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(tmp_path, "x.geojson", json.dumps(POINT))
    assert "expected a GeoJSON FeatureCollection" in _bad_input(spark, {"kind": "GeoJson"}, [path])


# --- Parquet ------------------------------------------------------------------------------------------------


def test_parquet_as_is_and_selected_by_name_with_a_schema(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "a.parquet")
    pq.write_table(pa.table({"a": pa.array([1, 2], pa.int32()), "b": ["x", "y"], "c.d": [True, False]}), path)
    assert _types(read_input(spark, {"kind": "Parquet"}, [path], None)) == [
        ("a", "int"),
        ("b", "string"),
        ("c.d", "boolean"),
    ]
    schema = pa.schema([("c.d", pa.bool_()), ("a", pa.int64())])
    result = read_input(spark, {"kind": "Parquet"}, [path], schema)
    assert _types(result) == [("c.d", "boolean"), ("a", "bigint")]
    assert _rows(result) == [(True, 1), (False, 2)]


def test_parquet_missing_column_names_file_and_column(spark: SparkSession, tmp_path: Path) -> None:
    full, partial = str(tmp_path / "full.parquet"), str(tmp_path / "partial.parquet")
    pq.write_table(pa.table({"a": [1], "b": [2]}), full)
    pq.write_table(pa.table({"a": [1]}), partial)
    with pytest.raises(EngineInputError) as e:
        read_input(
            spark, {"kind": "Parquet"}, [full, partial], pa.schema([("a", pa.int64()), ("b", pa.int64())])
        )
    assert e.value.kind == "missing-column"
    assert e.value.message.startswith(f"{partial}: column 'b' of the read schema is missing")


def test_parquet_spark_cannot_read_is_unsupported_not_a_traceback(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "ns.parquet")
    pq.write_table(pa.table({"t": pa.array([0], pa.timestamp("ns", tz="UTC"))}), path)
    with pytest.raises(EngineInputError) as e:
        read_input(spark, {"kind": "Parquet"}, [path], None)
    assert e.value.kind == "unsupported" and path in e.value.message and "TIMESTAMP(NANOS" in e.value.message
    garbage = _write(tmp_path, "garbage.parquet", "not parquet")
    assert garbage in _bad_input(spark, {"kind": "Parquet"}, [garbage])


# --- empty input, errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["Csv", "Json", "NdJson", "GeoJson", "NdGeoJson", "Parquet", "EsriShapefile"]
)
def test_missing_or_empty_files_give_the_declared_schema_or_nothing(
    spark: SparkSession, tmp_path: Path, kind: str
) -> None:
    paths = [_write(tmp_path, "empty", ""), str(tmp_path / "missing")]
    schema = pa.schema([("a", pa.int64()), ("t", pa.timestamp("ms", tz="UTC"))])
    result = read_input(spark, {"kind": kind}, paths, schema)
    assert result.df is not None and result.df.schema == T.StructType(
        [T.StructField("a", T.LongType()), T.StructField("t", T.TimestampType())]
    )
    assert result.df.isEmpty()
    assert read_input(spark, {"kind": kind}, paths, None) == ReadResult(None)


def test_empty_files_are_skipped_among_others(spark: SparkSession, tmp_path: Path) -> None:
    paths = [_write(tmp_path, "empty.csv", ""), _write(tmp_path, "one.csv", "1\n")]
    assert _rows(read_input(spark, {"kind": "Csv"}, paths, None)) == [("1",)]


def test_unknown_kind_and_bad_policy(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(
        EngineInputError, match="unknown read step kind 'Xml'; expected one of: Csv, Json"
    ) as e:
        read_input(spark, {"kind": "Xml"}, [], None)
    assert e.value.kind == "unsupported"
    with pytest.raises(EngineInputError, match="bad_records must be"):
        read_input(spark, {"kind": "Csv"}, [], None, bad_records="ignore")


# --- EsriShapefile ------------------------------------------------------------------------------------------


def _write_shapefile(base: Path) -> None:
    shapefile = pytest.importorskip("shapefile")
    base.parent.mkdir(parents=True, exist_ok=True)
    with shapefile.Writer(str(base), shapeType=shapefile.POINT) as w:
        w.field("name", "C", size=20)
        w.field("count", "N", size=10, decimal=0)
        w.field("ratio", "N", size=10, decimal=2)
        w.field("day", "D")
        w.point(1.5, 2.5)
        w.record("a", 3, 0.25, dt.date(2024, 5, 1))
        w.point(-1, 0)
        w.record("b", None, 1.5, None)


def test_shapefile_from_a_file_a_directory_and_a_zip(spark: SparkSession, tmp_path: Path) -> None:
    _write_shapefile(tmp_path / "dir" / "sub" / "places")
    _write_shapefile(tmp_path / "dir" / "other" / "places")
    expected = [
        ("a", 3, 0.25, dt.date(2024, 5, 1), {"type": "Point", "coordinates": [1.5, 2.5]}),
        ("b", None, 1.5, None, {"type": "Point", "coordinates": [-1.0, 0.0]}),
    ]
    archive = tmp_path / "places.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in (tmp_path / "dir").rglob("*.*"):
            z.write(f, str(f.relative_to(tmp_path / "dir")))
    for path, sub_path in [
        (tmp_path / "dir" / "sub" / "places.shp", None),
        (tmp_path / "dir", "sub/*.shp"),
        (archive, "sub/places.shp"),
    ]:
        result = read_input(spark, {"kind": "EsriShapefile", "subPath": sub_path}, [str(path)], None)
        assert _types(result) == [
            ("name", "string"),
            ("count", "bigint"),
            ("ratio", "double"),
            ("day", "date"),
            ("geometry", "string"),
        ]
        assert [(*r[:4], json.loads(r[4])) for r in _rows(result)] == expected
    message = _bad_input(spark, {"kind": "EsriShapefile"}, [str(archive)])
    assert "several .shp files (other/places.shp, sub/places.shp) (set subPath to choose one)" in message


def test_shapefile_without_pyshp_is_unsupported_with_a_hint(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "shapefile", None)
    with pytest.raises(EngineInputError, match="pip install pyshp") as e:
        read_input(spark, {"kind": "EsriShapefile"}, [_write(tmp_path, "x.shp", b"\x00")], None)
    assert e.value.kind == "unsupported"


def test_json_documents_are_broken_or_kept_whole(spark: SparkSession, tmp_path: Path) -> None:
    good = _write(tmp_path, "good.json", '[{"n": 1}, {"n": 2}]')
    mismatch = _write(tmp_path, "mismatch.json", '[{"n": 3}, {"n": "four"}]')
    malformed = _write(tmp_path, "malformed.json", '[{"n": 5},\n{"n": ')
    quarantine = tmp_path / "q"
    result = read_input(
        spark,
        {"kind": "Json"},
        [good, mismatch, malformed],
        pa.schema([("n", pa.int64())]),
        bad_records="quarantine",
        quarantine_dir=str(quarantine),
    )
    assert sorted(_rows(result)) == [(1,), (2,)]
    assert result.num_quarantined == 2
    records = [json.loads(line) for line in (quarantine / QUARANTINE_FILE).read_text().splitlines()]
    assert sorted((r["file"], r["line"], r["problem"][:25]) for r in records) == [
        (malformed, 2, "malformed JSON document ("),
        (mismatch, None, "JSON document does not ma"),
    ]


def test_ndjson_quarantine_and_malformed_geojson(spark: SparkSession, tmp_path: Path) -> None:
    path = _write(tmp_path, "q.ndjson", '{"id": 1}\nnot json\n{"id": 2}\n')
    result = read_input(
        spark, {"kind": "NdJson"}, [path], None, bad_records="quarantine", quarantine_dir=str(tmp_path)
    )
    assert _types(result) == [("id", "bigint")] and _rows(result) == [(1,), (2,)]
    assert json.loads(Path(str(result.quarantine_path)).read_text())["line"] == 2
    broken = _write(tmp_path, "broken.geojson", '{"type": "FeatureCollection",\n "features": [}')
    assert _bad_input(spark, {"kind": "GeoJson"}, [broken]).startswith(
        f"{broken}, line 2: malformed JSON document"
    )


def test_unreadable_shapefile_is_bad_input(spark: SparkSession, tmp_path: Path) -> None:
    pytest.importorskip("shapefile")
    junk = _write(tmp_path, "junk.shp", b"not a shapefile at all")
    assert _bad_input(spark, {"kind": "EsriShapefile"}, [junk]).startswith(
        f"{junk}: not a readable ESRI shapefile"
    )

"""The ODF read step on Spark: the input files of one ingest turned into one DataFrame (docs/formats.md).

The semantics are the reference's (kamu): `inferSchema` defaults to false so CSV columns are strings, a
declared schema is the reader schema, missing or empty files give an empty frame with the declared schema
or no frame at all. Where the reference is weak this reader does better: a JSON
`subPath` resolved by Spark instead of loading the document in memory, and broken records named by file
and line (or skipped into a quarantine file) instead of a parser error without a position. CSV records are
one per line, as in the reference, so that large files are parsed in parallel splits.

Text formats are read PERMISSIVE with a corrupt-record column. The ingest job defers the check: a broken
record raises an error as the job consumes it (no extra pass), and only then are the inputs read again
with the full check — the parsed frame persisted and its broken rows counted — and the files scanned in
Python to give each broken record its line number. Quarantine always takes the full check. A deferred
CSV read is FAILFAST, each row's width checked against every declared column: it fails on the records
the corrupt-record column would flag, without carrying that column through the job (a twentieth of a
CSV -> Parquet job's time); a value is parsed where a query uses it.
"""

from __future__ import annotations

import codecs
import fnmatch
import io
import json
import os
import zipfile
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from struct import error as StructError
from typing import Any
from urllib.parse import quote, unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.py4j_errors import Py4JJavaError
from airflow_odf.engine.session import persist_for_request
from airflow_odf.engine.spark_errors import spark_error_condition, spark_error_summary
from airflow_odf.engine.spark_types import arrow_to_spark, quote_identifier

BAD_RECORDS_FAIL = "fail"
BAD_RECORDS_QUARANTINE = "quarantine"
QUARANTINE_FILE = "bad-records.jsonl"
BAD_RECORD_MARK = "ODF_BROKEN_INPUT_RECORD"  # in the error of a job that met a broken record (defer_check)
_FAILFAST_MARK = "MALFORMED_RECORD_IN_PARSING"  # Spark's error condition for the same, from a FAILFAST read
CORRUPT_COLUMN = "__odf_corrupt_record"
_FILE_COLUMN = "__odf_file"
_PLACEHOLDER = "__odf_placeholder"
_INTERNAL_COLUMNS = (CORRUPT_COLUMN, _FILE_COLUMN, _PLACEHOLDER)
LINE_FORMATS = ("Csv", "NdJson")  # a record is a line: the file of each record is known after the read
_PERMISSIVE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}  # keep broken rows
# fail at the first broken record; each row's width checked even where a later projection drops columns
_FAILFAST = {"mode": "FAILFAST", "columnPruning": False}
_GEOMETRY = "geometry"
_ERROR_SAMPLE = 100  # broken records located to name the first one in an error
_SHOWN_CHARS = 200
_RFC3339 = "rfc3339"
# Python's canonical codec names -> the charset names Spark 4's CSV and JSON readers accept.
_SPARK_CHARSETS = {
    "iso8859-1": "iso-8859-1",
    "ascii": "us-ascii",
    "utf-16-be": "utf-16be",
    "utf-16-le": "utf-16le",
}


@dataclass(frozen=True)
class ReadResult:
    """The records read (None: no input and no declared schema) and the broken ones set aside."""

    df: DataFrame | None
    num_quarantined: int = 0
    quarantine_path: str | None = None


@dataclass(frozen=True)
class _Parsed:
    """A reader's output before the broken-record check.

    `df` may hold CORRUPT_COLUMN and _FILE_COLUMN; `finish` turns its good rows into the records;
    `documents` says a broken row is a whole JSON document rather than one line; `encoding` is the files'.
    """

    df: DataFrame
    finish: Callable[[DataFrame], DataFrame | None] = lambda df: df
    documents: bool = False
    encoding: str = "utf-8"


def read_input(
    spark: SparkSession,
    read: dict[str, Any],
    paths: list[str],
    schema: pa.Schema | None,
    *,
    bad_records: str = BAD_RECORDS_FAIL,
    quarantine_dir: str | None = None,
    file_column: str | None = None,
    defer_check: bool = False,
) -> ReadResult:
    """Reads `paths` as the ODF ReadStep `read` (manifest JSON form), applying the declared `schema`.

    `file_column` (line formats only: Csv, NdJson) keeps each record's file in that column as Spark
    spells it (`_metadata.file_path`, a URI), so that one read of many files still knows which file a
    record came from (`file_index` looks it up, with no work per row).

    `defer_check` (with `bad_records="fail"`) skips the separate pass that looks for broken records: the
    records are checked as the job consumes them, and the first broken one fails the job with an error
    that `met_broken_record` recognises; the caller then reads again without deferring to name file and
    line.
    """
    if bad_records not in (BAD_RECORDS_FAIL, BAD_RECORDS_QUARANTINE):
        raise EngineInputError(
            "unsupported", f"bad_records must be 'fail' or 'quarantine', not {bad_records!r}"
        )
    if bad_records == BAD_RECORDS_QUARANTINE and not quarantine_dir:
        raise ValueError("bad_records='quarantine' needs a quarantine_dir")
    kind = read.get("kind")
    reader = _READERS.get(str(kind))
    if reader is None:
        raise EngineInputError(
            "unsupported", f"unknown read step kind {kind!r}; expected one of: {', '.join(_READERS)}"
        )
    if file_column is not None and kind not in LINE_FORMATS:
        raise ValueError(f"file_column is only available for {', '.join(LINE_FORMATS)}")
    struct = arrow_to_spark(schema) if schema is not None else None
    present = [p for p in paths if not _is_empty(p)]
    if not present:
        return ReadResult(spark.createDataFrame([], struct) if struct is not None else None)
    deferred = defer_check and bad_records == BAD_RECORDS_FAIL
    try:
        if deferred and kind == "Csv":
            parsed = _read_csv(spark, read, present, struct, fail_fast=True)
        else:
            parsed = reader(spark, read, present, struct)
        if file_column is not None or (CORRUPT_COLUMN in parsed.df.columns and not deferred):
            parsed = replace(parsed, df=_with_file(parsed.df))
        if deferred and CORRUPT_COLUMN in parsed.df.columns:
            broken = F.col(CORRUPT_COLUMN).isNotNull()
            check = F.when(broken, F.raise_error(F.lit(BAD_RECORD_MARK))).otherwise(F.lit(True))
            df = parsed.df.filter(check)
            df, num_bad, quarantine_path = df.drop(CORRUPT_COLUMN, _PLACEHOLDER), 0, None
        else:
            df, num_bad, quarantine_path = _set_aside_bad_records(parsed, bad_records, quarantine_dir, paths)
        if file_column is not None:
            df = df.withColumn(file_column, F.col(_FILE_COLUMN))
        df = df.drop(_FILE_COLUMN)
        records = parsed.finish(df) if df.columns else None  # no columns: every document was set aside
    except (PySparkException, Py4JJavaError) as e:
        condition = spark_error_condition(e) or ""
        error_kind = (
            "unsupported" if condition.startswith(("PARQUET_TYPE_ILLEGAL", "UNSUPPORTED")) else "bad-input"
        )
        raise EngineInputError(
            error_kind, f"cannot read {', '.join(present)} as {kind}: {spark_error_summary(e)}"
        ) from None
    if records is None and struct is not None:
        records = spark.createDataFrame([], struct)
    return ReadResult(records, num_bad, quarantine_path)


# --- text formats -------------------------------------------------------------------------------------------


def met_broken_record(error: BaseException) -> bool:
    """Whether a job over a deferred-check read failed at a broken input record."""
    text = str(error)
    return BAD_RECORD_MARK in text or _FAILFAST_MARK in text


def _read_csv(
    spark: SparkSession,
    read: dict[str, Any],
    paths: list[str],
    struct: T.StructType | None,
    *,
    fail_fast: bool = False,
) -> _Parsed:
    """CSV per ReadStep::Csv. One record per line (as the reference), so that a file is parsed in parallel
    splits; a quoted newline makes a broken record, named by file and line. `fail_fast`: no
    corrupt-record column, the first broken record fails the job (a deferred check)."""
    options = {
        "sep": _opt(read, "separator", ","),
        "encoding": _charset(read),
        "quote": _opt(read, "quote", '"'),
        "escape": _opt(read, "escape", "\\"),
        "header": bool(_opt(read, "header", False)),
        "inferSchema": bool(_opt(read, "inferSchema", False)),
        "nullValue": _opt(read, "nullValue", ""),
        "multiLine": False,
        **(_FAILFAST if fail_fast else _PERMISSIVE),
        **_datetime_options(read),
    }
    reader = spark.read.options(**options)
    df = _read_text(reader, "csv", paths, struct, corrupt_column=not fail_fast)
    return _Parsed(df, encoding=options["encoding"])


def _read_ndjson(
    spark: SparkSession, read: dict[str, Any], paths: list[str], struct: T.StructType | None
) -> _Parsed:
    reader = spark.read.options(**_json_options(read, multi_line=False))
    return _Parsed(_read_text(reader, "json", paths, struct), encoding=_charset(read))


def _read_json(
    spark: SparkSession, read: dict[str, Any], paths: list[str], struct: T.StructType | None
) -> _Parsed:
    """A JSON document per file: its root array, or the array at the dotted `subPath`, holds the records."""
    sub_path = [p for p in (_opt(read, "subPath", "") or "").split(".") if p]
    document: T.StructType | None = None
    if struct is not None:
        document = _nest(T.ArrayType(struct), sub_path) if sub_path else struct
    reader = spark.read.options(**_json_options(read, multi_line=True))
    df = _read_text(reader, "json", paths, document)
    if not sub_path:
        return _Parsed(df, documents=True, encoding=_charset(read))
    return _Parsed(
        df, lambda good: _records_at(good, sub_path, paths), documents=True, encoding=_charset(read)
    )


def _read_geojson(
    spark: SparkSession, read: dict[str, Any], paths: list[str], struct: T.StructType | None
) -> _Parsed:
    """A FeatureCollection per file: a record per feature, `properties` as columns, `geometry` as text."""
    reader = spark.read.options(**_json_options(read, multi_line=True))
    encoding = _charset(read)
    if struct is None:
        inferred = reader.json(paths).schema
        features = inferred["features"].dataType if "features" in inferred.fieldNames() else None
        if not isinstance(features, T.ArrayType) or not isinstance(features.elementType, T.StructType):
            if CORRUPT_COLUMN in inferred.fieldNames():  # malformed JSON: reported with its position
                return _Parsed(_read_text(reader, "json", paths, inferred), documents=True, encoding=encoding)
            raise EngineInputError(
                "bad-input",
                f"{', '.join(paths)}: expected a GeoJSON FeatureCollection (an object with 'features')",
            )
        document = T.StructType(
            [T.StructField("features", T.ArrayType(_feature_struct(features.elementType)))]
        )
    else:
        document = T.StructType([T.StructField("features", T.ArrayType(_feature_struct_for(struct)))])
    df = _read_text(reader, "json", paths, document)
    return _Parsed(
        df,
        lambda good: _feature_rows(good.select(F.explode("features").alias("f")), struct),
        documents=True,
        encoding=encoding,
    )


def _read_ndgeojson(
    spark: SparkSession, read: dict[str, Any], paths: list[str], struct: T.StructType | None
) -> _Parsed:
    """One GeoJSON Feature per line, giving the same records as GeoJson."""
    reader = spark.read.options(**_json_options(read, multi_line=False))
    feature = _feature_struct(reader.json(paths).schema) if struct is None else _feature_struct_for(struct)
    df = _read_text(reader, "json", paths, feature)
    return _Parsed(df, lambda good: _feature_rows(good.select(F.struct(*good.columns).alias("f")), struct))


def _read_text(
    reader: Any, fmt: str, paths: list[str], struct: T.StructType | None, *, corrupt_column: bool = True
) -> DataFrame:
    """Reads with the corrupt-record column, unless `corrupt_column` is off (`_with_file` adds each row's
    file).

    The schema is always declared (inferred first if need be, as Spark would anyway): only then does Spark
    flag CSV rows of the wrong width instead of padding or cutting them silently.
    """
    reader = reader.format(fmt)
    if struct is None:
        struct = reader.load(paths).schema
    if not corrupt_column:
        return reader.schema(struct).load(paths)
    # Spark refuses to scan for the corrupt-record column alone: a document that is all broken needs company.
    fields = [f for f in struct.fields if f.name != CORRUPT_COLUMN] or [
        T.StructField(_PLACEHOLDER, T.StringType())
    ]
    return reader.schema(T.StructType([*fields, T.StructField(CORRUPT_COLUMN, T.StringType())])).load(paths)


def _with_file(scan: DataFrame) -> DataFrame:
    """A text scan plus each row's file (`_metadata.file_path`), for naming where a broken record is.

    Only where it is used: a deferred check that fails reads again with it, and Spark builds the
    metadata struct for every row even when a later projection drops the column (a tenth of a CSV
    read's time)."""
    return scan.select("*", F.col("_metadata.file_path").alias(_FILE_COLUMN))


def _json_options(read: dict[str, Any], *, multi_line: bool) -> dict[str, Any]:
    options: dict[str, Any] = {"multiLine": multi_line, **_PERMISSIVE, **_datetime_options(read)}
    encoding = _charset(read)
    if encoding != "utf-8":
        options["encoding"] = encoding
        options["lineSep"] = "\n"  # Spark needs it to split lines in an encoding it does not detect
    return options


def _datetime_options(read: dict[str, Any]) -> dict[str, str]:
    """Spark's default parser reads RFC 3339 / ISO 8601; any other format is a Spark datetime pattern."""
    options = {}
    date_format = _opt(read, "dateFormat", _RFC3339)
    if date_format.lower() != _RFC3339:
        options["dateFormat"] = date_format
    timestamp_format = _opt(read, "timestampFormat", _RFC3339)
    if timestamp_format.lower() != _RFC3339:
        options["timestampFormat"] = timestamp_format
        options["timestampNTZFormat"] = timestamp_format
    return options


def _nest(inner: T.DataType, path: list[str]) -> T.StructType:
    """The document schema that holds `inner` at `path` (a.b.c)."""
    document = T.StructType([T.StructField(path[-1], inner)])
    for name in reversed(path[:-1]):
        document = T.StructType([T.StructField(name, document)])
    return document


def _records_at(df: DataFrame, sub_path: list[str], paths: list[str]) -> DataFrame | None:
    """The records of the array (or the one object) at `sub_path` of each document."""
    column, data_type = F.col(sub_path[0]), df.schema
    for i, name in enumerate(sub_path):
        if not isinstance(data_type, T.StructType) or name not in data_type.fieldNames():
            raise EngineInputError(
                "bad-input",
                f"{', '.join(paths)}: subPath '{'.'.join(sub_path)}' not found in the JSON document",
            )
        data_type = data_type[name].dataType
        column = column if i == 0 else column.getField(name)
    if isinstance(data_type, T.StructType):
        return df.select(column.alias("r")).select("r.*")
    if isinstance(data_type, T.ArrayType):
        exploded = df.select(F.explode(column).alias("r"))
        if isinstance(data_type.elementType, T.StructType):
            return exploded.select("r.*")
        if exploded.isEmpty():  # an empty array infers as array<string>: no records, no columns
            return None
    raise EngineInputError(
        "bad-input",
        f"{', '.join(paths)}: subPath '{'.'.join(sub_path)}' is {data_type.simpleString()}, "
        "expected an array of objects",
    )


def _feature_struct(inferred: T.StructType) -> T.StructType:
    """A Feature's schema with `geometry` as a string: Spark then keeps the geometry's JSON text verbatim."""
    properties = inferred["properties"].dataType if "properties" in inferred.fieldNames() else T.StructType()
    return T.StructType([T.StructField("properties", properties), T.StructField(_GEOMETRY, T.StringType())])


def _feature_struct_for(struct: T.StructType) -> T.StructType:
    """The Feature schema giving the declared record schema (every column but `geometry` is a property)."""
    return _feature_struct(
        T.StructType(
            [T.StructField("properties", T.StructType([f for f in struct.fields if f.name != _GEOMETRY]))]
        )
    )


def _feature_rows(features: DataFrame, struct: T.StructType | None) -> DataFrame:
    """Rows of a column `f` of features turned into records: the properties, then `geometry`."""
    properties: T.StructType = features.schema["f"].dataType["properties"].dataType  # type: ignore[index]
    columns = [F.col("f.properties").getField(p.name).alias(p.name) for p in properties.fields]
    # The geometry's JSON text as in the file; `$` re-serializes it compactly, keeping key order and numbers.
    geometry = F.get_json_object(F.col(f"f.{_GEOMETRY}"), "$").alias(_GEOMETRY)
    records = features.select(*columns, geometry)
    if struct is None:
        return records
    return _cast_to(records, struct)


# --- Parquet and shapefiles ---------------------------------------------------------------------------------


def _read_parquet(
    spark: SparkSession, read: dict[str, Any], paths: list[str], struct: T.StructType | None
) -> _Parsed:
    """Parquet; a declared schema selects and casts the columns by name, each file must have them all."""
    if struct is not None:
        for path in paths:
            if _is_local(path) and os.path.isfile(_local_path(path)):
                _check_columns(pq.read_schema(_local_path(path)).names, struct, path)
    df = spark.read.parquet(*paths)
    return _Parsed(df if struct is None else _select_by_name(df, struct, ", ".join(paths)))


def _read_shapefile(
    spark: SparkSession, read: dict[str, Any], paths: list[str], struct: T.StructType | None
) -> _Parsed:
    """ESRI Shapefile via the optional `pyshp` package: attributes as columns, `geometry` as GeoJSON text."""
    try:
        import shapefile  # optional dependency, imported only for this format
    except ImportError:
        raise EngineInputError(
            "unsupported", "reading EsriShapefile needs the optional package pyshp: pip install pyshp"
        ) from None
    tables = []
    for path in paths:
        try:
            tables.append(_shapefile_table(shapefile, path, _opt(read, "subPath", "")))
        except (shapefile.ShapefileException, zipfile.BadZipFile, OSError, StructError, ValueError) as e:
            raise EngineInputError("bad-input", f"{path}: not a readable ESRI shapefile: {e}") from None
    table = pa.concat_tables(tables, promote_options="permissive")
    df = spark.createDataFrame(table, schema=arrow_to_spark(table.schema))
    return _Parsed(df if struct is None else _select_by_name(df, struct, ", ".join(paths)))


_DBF_TYPES = {"C": pa.string(), "M": pa.string(), "F": pa.float64(), "L": pa.bool_(), "D": pa.date32()}


def _shapefile_table(shapefile: Any, path: str, sub_path: str) -> pa.Table:
    """One shapefile (a .shp, or the one in a directory or zip that `sub_path` selects) as an Arrow table."""
    reader, name = _open_shapefile(shapefile, _local_path(path), sub_path)
    with reader:
        fields = reader.fields[1:]  # the first is the DBF deletion flag
        columns: list[list[Any]] = [[] for _ in fields]
        geometries: list[str | None] = []
        for shape_record in reader.iterShapeRecords():
            for column, value in zip(columns, shape_record.record, strict=True):
                column.append(value)
            shape = shape_record.shape
            geometries.append(
                None if shape.shapeType == shapefile.NULL else json.dumps(shape.__geo_interface__)
            )
    arrays = {}
    for (field_name, code, _size, decimals), values in zip(fields, columns, strict=True):
        numeric = pa.float64() if decimals else pa.int64()
        try:
            arrays[field_name] = pa.array(
                values, _DBF_TYPES.get(code, numeric if code == "N" else pa.string())
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise EngineInputError("bad-input", f"{name}: field '{field_name}': {e}") from None
    arrays[_GEOMETRY] = pa.array(geometries, pa.string())
    return pa.table(arrays)


def _open_shapefile(shapefile: Any, path: str, sub_path: str) -> tuple[Any, str]:
    if path.lower().endswith(".zip"):
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            shp = _pick_shp(names, sub_path, path)
            stem, by_lower = shp[:-4], {n.lower(): n for n in names}
            parts = {
                ext: io.BytesIO(archive.read(by_lower[f"{stem}.{ext}".lower()]))
                for ext in ("shp", "dbf", "shx")
                if f"{stem}.{ext}".lower() in by_lower
            }
        return shapefile.Reader(**parts), f"{path}/{shp}"
    if os.path.isdir(path):
        names = [str(p.relative_to(path)) for p in Path(path).rglob("*") if p.suffix.lower() == ".shp"]
        shp = os.path.join(path, _pick_shp(names, sub_path, path))
        return shapefile.Reader(shp), shp
    return shapefile.Reader(path), path


def _pick_shp(names: list[str], sub_path: str, container: str) -> str:
    candidates = sorted(
        n for n in names if n.lower().endswith(".shp") and (not sub_path or fnmatch.fnmatch(n, sub_path))
    )
    if len(candidates) != 1:
        found = "no .shp file" if not candidates else f"several .shp files ({', '.join(candidates)})"
        wanted = f"matching subPath '{sub_path}'" if sub_path else "(set subPath to choose one)"
        raise EngineInputError("bad-input", f"{container}: {found} {wanted}")
    return candidates[0]


def _check_columns(names: list[str], struct: T.StructType, source: str) -> None:
    missing = [f.name for f in struct.fields if f.name not in names]
    if missing:
        raise EngineInputError(
            "missing-column",
            f"{source}: column '{missing[0]}' of the read schema is missing (found: {', '.join(names)})",
        )


def _select_by_name(df: DataFrame, struct: T.StructType, source: str) -> DataFrame:
    _check_columns(df.columns, struct, source)
    return _cast_to(df, struct)


def _cast_to(df: DataFrame, struct: T.StructType) -> DataFrame:
    """The declared columns, by name, cast to their declared types where they have others. (A cast to
    the type a column has is no-op on a local session, but not on Spark Connect: there a string type
    arrives with an explicit collation, which Spark writes into the Parquet file's metadata.)"""
    found = {f.name: f.dataType for f in df.schema.fields}
    columns = [F.col(quote_identifier(f.name)) for f in struct.fields]
    return df.select(
        *[
            column if found.get(f.name) == f.dataType else column.cast(f.dataType).alias(f.name)
            for column, f in zip(columns, struct.fields, strict=True)
        ]
    )


# --- broken records -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _BadRecord:
    file: str
    line: int | None
    record: str
    problem: str


def _set_aside_bad_records(
    parsed: _Parsed, policy: str, quarantine_dir: str | None, paths: list[str]
) -> tuple[DataFrame, int, str | None]:
    """The good rows; broken ones fail the read (naming the first) or go to the quarantine file."""
    df = parsed.df
    if CORRUPT_COLUMN not in df.columns:
        return df, 0, None
    df = persist_for_request(df)
    bad = df.filter(F.col(CORRUPT_COLUMN).isNotNull()).select(_FILE_COLUMN, CORRUPT_COLUMN)
    good = df.filter(F.col(CORRUPT_COLUMN).isNull()).drop(CORRUPT_COLUMN, _PLACEHOLDER)
    num_bad = bad.count()
    if num_bad == 0:
        return good, 0, None
    expected = T.StructType([f for f in df.schema.fields if f.name not in _INTERNAL_COLUMNS])
    if policy == BAD_RECORDS_FAIL:
        located = _locate(bad.limit(_ERROR_SAMPLE).collect(), parsed)
        order = {_local_path(p): i for i, p in enumerate(paths)}
        first = min(located, key=lambda r: (order.get(r.file, len(order)), r.line or 0))
        where = f"{first.file}, line {first.line}" if first.line else first.file
        raise EngineInputError(
            "bad-input",
            f"{where}: {first.problem}: {_shorten(first.record)!r}; expected records of "
            f"{expected.simpleString()}. {num_bad} broken record(s) in total; fix the input, or set "
            "bad_records to 'quarantine' to ingest the good ones and set the broken ones aside.",
        )
    assert quarantine_dir is not None  # checked by read_input
    os.makedirs(quarantine_dir, exist_ok=True)
    quarantine_path = os.path.join(quarantine_dir, QUARANTINE_FILE)
    located = _locate(bad.toLocalIterator(), parsed)
    with open(quarantine_path, "a", encoding="utf-8") as out:  # one file for all the inputs of a job
        for r in located:
            out.write(
                json.dumps({"file": r.file, "line": r.line, "record": r.record, "problem": r.problem}) + "\n"
            )
    return good, len(located), quarantine_path


def _locate(rows: Iterable[Any], parsed: _Parsed) -> list[_BadRecord]:
    """Finds where each broken record is: by scanning its file (error path only)."""
    by_file: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        by_file[_local_path(row[_FILE_COLUMN])].append(row[CORRUPT_COLUMN])
    located = []
    for file, records in by_file.items():
        if parsed.documents:  # a file is one document, however many rows Spark flagged in it
            line, problem = _document_problem(file, parsed.encoding)
            located.append(_BadRecord(file, line, records[0], problem))
        else:
            lines = _line_numbers(file, records, parsed.encoding)
            problem = "malformed record (wrong number of fields, or a value that does not parse as its type)"
            located += [_BadRecord(file, n, r, problem) for r, n in zip(records, lines, strict=True)]
    return located


def _line_numbers(file: str, records: list[str], encoding: str) -> list[int | None]:
    """The 1-based line where each record starts; equal records get successive occurrences."""
    pending: dict[str, deque[int]] = defaultdict(deque)
    for i, record in enumerate(records):
        pending[record.split("\n", 1)[0].rstrip("\r")].append(i)
    found: list[int | None] = [None] * len(records)
    if not _is_local(file) or not os.path.isfile(file):
        return found
    with open(file, encoding=encoding, errors="replace", newline="") as f:
        for number, line in enumerate(f, start=1):
            waiting = pending.get(line.rstrip("\r\n"))
            if waiting:
                found[waiting.popleft()] = number
    return found


def _document_problem(file: str, encoding: str) -> tuple[int | None, str]:
    """Why a whole JSON document is broken, with the line of a syntax error."""
    try:
        with open(file, encoding=encoding, errors="replace") as f:
            json.load(f)
    except json.JSONDecodeError as e:
        return e.lineno, f"malformed JSON document ({e.msg} at line {e.lineno} column {e.colno})"
    except OSError:
        pass
    return None, "JSON document does not match the read schema"


# --- helpers ------------------------------------------------------------------------------------------------


def _charset(read: dict[str, Any]) -> str:
    """The read step's `encoding` as Spark 4 names it (`utf8` -> `utf-8`, `latin1` -> `iso-8859-1`)."""
    name = str(_opt(read, "encoding", "utf-8"))
    try:
        canonical = codecs.lookup(name).name
    except LookupError:
        return name  # Spark's error then lists what it supports
    return _SPARK_CHARSETS.get(canonical, canonical)


def _opt(read: dict[str, Any], key: str, default: Any) -> Any:
    value = read.get(key)
    return default if value is None else value


def _shorten(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


def _is_local(path: str) -> bool:
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or len(scheme) == 1  # one letter: a Windows drive


#: What java.net.URI leaves unescaped in a path (Hadoop's `Path.toUri`, so Spark's `_metadata.file_path`)
_URI_PATH_SAFE = "/!$&'()*+,;=:@~"


def file_index(file_uri: Column, paths: list[str]) -> Column:
    """The index in `paths` of each row's file, given as Spark spells it (the `file_column` of
    `read_input`): a lookup among the spellings Spark gives these paths (`file:/a%20b.csv`, as
    java.net.URI escapes an ASCII path; a remote URI as given), with no work per row; else, for a path
    Spark spells otherwise (it leaves non-ASCII characters unescaped), among the paths after a decode
    per row; else an error naming the file — never a row without its file."""
    spelled: dict[str, int] = {}
    local: dict[str, int] = {}
    for i, path in enumerate(paths):
        name = _local_path(path)
        spelled.setdefault("file:" + quote(name, safe=_URI_PATH_SAFE) if _is_local(path) else path, i)
        local.setdefault(name, i)
    decoded = F.url_decode(F.regexp_replace(F.regexp_replace(file_uri, "^file:(//)?", ""), r"\+", "%2B"))
    return F.coalesce(
        F.element_at(_literal_map(spelled), file_uri),
        F.element_at(_literal_map(local), decoded),
        F.raise_error(F.concat(F.lit("a record's file is none of the inputs: "), file_uri)),
    )


def _literal_map(values: dict[str, int]) -> Column:
    return F.create_map(*[x for key, value in values.items() for x in (F.lit(key), F.lit(value))])


def _local_path(path: str) -> str:
    """A local file name for a path or `file:` URI (Spark reports files as URIs); other URIs unchanged."""
    if path.startswith("file:"):
        return unquote(urlparse(path).path)
    return os.path.abspath(path) if _is_local(path) else path


def _is_empty(path: str) -> bool:
    """Missing or zero-size local file: the reference reads it as no data. Remote paths are left to Spark."""
    if not _is_local(path):
        return False
    local = _local_path(path)
    return not os.path.exists(local) or (os.path.isfile(local) and os.path.getsize(local) == 0)


_READERS: dict[str, Callable[[SparkSession, dict[str, Any], list[str], T.StructType | None], _Parsed]] = {
    "Csv": _read_csv,
    "Json": _read_json,
    "NdJson": _read_ndjson,
    "GeoJson": _read_geojson,
    "NdGeoJson": _read_ndgeojson,
    "Parquet": _read_parquet,
    "EsriShapefile": _read_shapefile,
}

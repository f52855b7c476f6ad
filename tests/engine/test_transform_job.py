"""The transform job on the shared local SparkSession: views by alias, offset ranges, output rules."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_odf.engine import transform_job, writer
from airflow_odf.engine.job import run_request
from airflow_odf.engine.partition_order import looks_row_by_row, output_scans
from airflow_odf.engine.spark_types import arrow_to_spark
from airflow_odf.engine.writer import normalize_timestamps, with_system_columns, write_slices
from airflow_odf.utils.engine_json import Vocab

UTC = timezone.utc
SYSTEM_TIME = datetime(2024, 2, 1, 0, 0, 0, 123000, tzinfo=UTC)  # the requests' time, in milliseconds
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
    assert row["system_time"] == SYSTEM_TIME
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


# --- Input order without a sort, output offsets by concatenation (issue 5) -------------------------------


def _numbered_slice(path: Path, start: int, n: int, *, shuffle: bool = False, row_group_size: int = 0) -> str:
    """Rows `start..start+n-1`, `price` = the offset (to follow each row), optionally stored out of order."""
    order = list(range(n))
    if shuffle:
        order = order[1::2] + order[::2]
    offsets = [start + i for i in order]
    table = pa.table(
        {
            "offset": offsets,
            "op": [0] * n,
            "system_time": [datetime(2024, 1, 1, tzinfo=UTC)] * n,
            "event_time": [datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=o) for o in offsets],
            "symbol": [f"S{o % 7}" for o in offsets],
            "price": [float(o) for o in offsets],
        },
        schema=SCHEMA,
    )
    pq.write_table(table, path, row_group_size=row_group_size or n)
    return str(path)


@pytest.fixture
def views(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """How the input views of each attempt at the query were made (the last attempt is the one written):
    "sorted", or "in place, N filtered, one read per file" / "..., one read of the whole files" (then
    put in offset order by the plan's partition keys), N being the reads filtered to the offset range."""
    attempts: list[list[str]] = []
    output, view = transform_job._output, transform_job._input_view

    def recording_output(*args: Any, **kwargs: Any) -> DataFrame:
        attempts.append([])
        return output(*args, **kwargs)

    def recording_view(spark: SparkSession, source: Any, *, file_by_file: bool) -> DataFrame:
        df = view(spark, source, file_by_file=file_by_file)
        plan = df._jdf.queryExecution().logical().toString()
        how = "one read per file" if file_by_file else "one read of the whole files"
        attempts[-1].append(
            "sorted" if "Sort [" in plan else f"in place, {plan.count('Filter ')} filtered, {how}"
        )
        return df

    monkeypatch.setattr(transform_job, "_output", recording_output)
    monkeypatch.setattr(transform_job, "_input_view", recording_view)
    return attempts


@pytest.fixture
def many_splits(spark: SparkSession) -> Iterator[None]:
    """Spark splits every file into many partitions (4 KiB splits, no open cost)."""
    keys = ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes")
    before = {k: spark.conf.get(k) for k in keys}
    spark.conf.set(keys[0], "4096")
    spark.conf.set(keys[1], "0")
    yield
    for k, v in before.items():
        spark.conf.set(k, v)


def _prices(response: dict[str, Any]) -> tuple[list[int], list[float]]:
    [written] = response["slices"]
    table = pq.read_table(written["path"])
    return table["offset"].to_pylist(), table["price"].to_pylist()


def test_slices_read_in_place_keep_offset_order_across_many_partitions(
    spark: SparkSession, tmp_path: Path, views: list[str], many_splits: None
) -> None:
    paths = [
        _numbered_slice(tmp_path / f"s{i}.parquet", i * 3000, 3000, row_group_size=250) for i in range(3)
    ]
    assert spark.read.schema(arrow_to_spark(SCHEMA)).parquet(paths[0]).rdd.getNumPartitions() > 4
    query = [{"query": "SELECT event_time, symbol, price FROM t WHERE symbol <> 'S3'"}]
    response = run_request(spark, _request(tmp_path, query, [_input("t", paths, 100, 8899)]))
    assert response.get("error") is None, response
    # every file's offsets checked first, then read without a sort; the middle file is wholly in range
    assert views == [["in place, 2 filtered, one read of the whole files"]]
    offsets, prices = _prices(response)
    expected = [float(o) for o in range(100, 8900) if o % 7 != 3]
    assert prices == expected  # the input's offset order, across files and splits
    assert offsets == list(range(10, 10 + len(expected)))


def _growing_slices(tmp_path: Path) -> list[str]:
    """Four slices, each larger than the one before: one Spark read of them puts the last one first."""
    paths, start = [], 0
    for i, rows in enumerate((500, 1000, 1500, 2000)):
        paths.append(_numbered_slice(tmp_path / f"g{i}.parquet", start, rows))
        start += rows
    return paths


def test_parts_for_the_coordinator_come_in_the_files_order_and_the_rests_share_a_partition(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the coordinator hashes the parts while Spark writes (`parts_ready_dir`), files of about one
    size are split as long as the smallest: Spark runs the splits longest first, keeping the files'
    order among equal lengths, so the first splits run in offset order; the files' rests, which hold
    no row group's middle, share the last partition and read no rows."""
    paths, start = [], 0
    for i, rows in enumerate((1000, 1100, 1200, 1300)):
        paths.append(_numbered_slice(tmp_path / f"f{i}.parquet", start, rows))
        start += rows
    found: list[Any] = []
    keys = transform_job.partition_keys
    monkeypatch.setattr(
        transform_job, "partition_keys", lambda scans, firsts: found.append(keys(scans, firsts)) or found[-1]
    )
    query = [{"query": "SELECT event_time, symbol, price FROM t WHERE symbol <> 'S3'"}]
    ready = tmp_path / "ready"
    request = {**_request(tmp_path, query, [_input("t", paths, 0, start - 1)]), "parts_ready_dir": str(ready)}
    response = run_request(spark, request)
    assert response.get("error") is None, response
    split = Path(paths[0]).stat().st_size  # the smallest file's size
    assert found == [[(0, 0, split), (1000, 0, split), (2100, 0, split), (3300, 0, split), None]]
    assert _prices(response)[1] == [float(o) for o in range(start) if o % 7 != 3]
    # what was published (when depends on the tasks' timing) is each file's part in its place
    for part in ready.glob("*.parquet"):
        place = int(part.name.split("-")[0])
        rows = pq.read_table(paths[place]).column("price").to_pylist()
        assert pq.read_table(part).column("price").to_pylist() == [p for p in rows if int(p) % 7 != 3]


@pytest.mark.parametrize(("start", "end", "filtered"), [(0, 4999, 0), (100, 4899, 2)])
def test_whole_files_read_at_once_keep_offset_order(
    spark: SparkSession, tmp_path: Path, views: list[list[str]], start: int, end: int, filtered: int
) -> None:
    paths = _growing_slices(tmp_path)
    first_read = spark.read.schema(arrow_to_spark(SCHEMA)).parquet(*paths).select("offset").first()
    assert first_read is not None and first_read[0] == 3000  # Spark on its own: the largest file first
    query = [{"query": "SELECT event_time, symbol, price FROM t WHERE symbol <> 'S3'"}]
    response = run_request(spark, _request(tmp_path, query, [_input("t", paths, start, end)]))
    assert response.get("error") is None, response
    # with a narrower range, the first and last files are read filtered, the middle two at once
    assert views == [[f"in place, {filtered} filtered, one read of the whole files"]]
    offsets, prices = _prices(response)
    expected = [float(o) for o in range(start, end + 1) if o % 7 != 3]
    assert prices == expected
    assert offsets == list(range(10, 10 + len(expected)))


def test_whole_files_read_at_once_in_a_union_of_inputs(
    spark: SparkSession, tmp_path: Path, views: list[list[str]]
) -> None:
    paths = _growing_slices(tmp_path)
    other = [_numbered_slice(tmp_path / "o.parquet", 0, 300)]
    union = "SELECT event_time, symbol, price FROM t UNION ALL SELECT event_time, symbol, -price FROM u"
    query = [{"query": union}]
    inputs = [_input("t", paths, 0, 4999), _input("u", other, 0, 299)]
    response = run_request(spark, _request(tmp_path, query, inputs))
    assert response.get("error") is None, response
    assert views == [["in place, 0 filtered, one read of the whole files"] * 2]
    # the union's branches one after the other, each in its input's offset order
    assert _prices(response)[1] == [float(o) for o in range(5000)] + [-float(o) for o in range(300)]


def test_splits_found_unusable_while_spark_writes_fall_back_to_a_read_per_file(
    spark: SparkSession, tmp_path: Path, views: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scans' splits are read while the job runs; when they turn out not to map partitions to files
    (two splits in one partition), that job's parts are dropped and the query runs again file by file."""
    monkeypatch.setattr(transform_job, "partition_keys", lambda scans, first_offsets: None)
    paths = _growing_slices(tmp_path)
    query = [{"query": "SELECT event_time, symbol, price FROM t WHERE symbol <> 'S3'"}]
    response = run_request(spark, _request(tmp_path, query, [_input("t", paths, 0, 4999)]))
    assert response.get("error") is None, response
    assert views == [
        ["in place, 0 filtered, one read of the whole files"],
        ["in place, 0 filtered, one read per file"],
    ]
    offsets, prices = _prices(response)
    expected = [float(o) for o in range(5000) if o % 7 != 3]
    assert prices == expected
    assert offsets == list(range(10, 10 + len(expected)))
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["data"]  # no parts left behind


@pytest.mark.parametrize(
    ("query", "planned_in"),
    [
        # a plain filter: its analyzed plan says row by row, so Spark plans it while the job runs
        ("SELECT event_time, symbol, price FROM t WHERE symbol <> 'S3'", "odf-plan-helper"),
        # a CTE: its analyzed plan does not, so it is planned first; the optimizer inlines it
        ("WITH c AS (SELECT * FROM t WHERE symbol <> 'S3') SELECT event_time, symbol, price FROM c", "main"),
    ],
)
def test_row_by_row_queries_are_planned_while_spark_writes_when_their_analyzed_plan_shows_it(
    spark: SparkSession,
    tmp_path: Path,
    views: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
    query: str,
    planned_in: str,
) -> None:
    planned: list[str] = []
    scans = transform_job.output_scans
    monkeypatch.setattr(transform_job, "output_scans", lambda df: planned.append(_thread_kind()) or scans(df))
    paths = _growing_slices(tmp_path)
    response = run_request(spark, _request(tmp_path, [{"query": query}], [_input("t", paths, 0, 4999)]))
    assert response.get("error") is None, response
    assert planned == [planned_in]
    assert views == [["in place, 0 filtered, one read of the whole files"]]
    expected = [float(o) for o in range(5000) if o % 7 != 3]
    assert _prices(response) == (list(range(10, 10 + len(expected))), expected)


def _thread_kind() -> str:
    name = threading.current_thread().name
    return "main" if threading.current_thread() is threading.main_thread() else name.split("_")[0]


@pytest.mark.parametrize(
    ("query", "row_by_row"),
    [
        ("SELECT id, v * 2 AS w FROM a WHERE v > 3", True),
        ("SELECT id FROM a UNION ALL SELECT id FROM b", True),
        ("SELECT id FROM step", True),  # a query step's view over a filter
        ("SELECT id FROM a WHERE id IN (SELECT id FROM b)", False),  # becomes a join
        ("SELECT id, (SELECT max(id) FROM b) AS m FROM a", False),
        ("SELECT DISTINCT id FROM a", False),
        ("SELECT id FROM a ORDER BY id", False),
        ("SELECT id FROM a LIMIT 3", False),
        ("SELECT explode(array(id, v)) AS e FROM a", False),
        ("SELECT max(id) FROM a", False),
        ("WITH c AS (SELECT id FROM a) SELECT id FROM c", False),  # planned first instead
    ],
)
def test_looks_row_by_row_from_the_analyzed_plan_only_where_the_physical_plan_is(
    spark: SparkSession, tmp_path: Path, query: str, row_by_row: bool
) -> None:
    spark.range(20).selectExpr("id", "id * 2 AS v").write.parquet(str(tmp_path / "a"))
    for view in ("a", "b"):
        spark.read.parquet(str(tmp_path / "a")).createOrReplaceTempView(view)
    spark.sql("SELECT id, v FROM a WHERE v > 3").createOrReplaceTempView("step")
    df = spark.sql(query)
    assert looks_row_by_row(df) is row_by_row
    if row_by_row:  # never a query whose job would have to run again file by file
        assert output_scans(df) is not None


@pytest.mark.parametrize(
    "query",
    [
        "SELECT event_time, symbol, sum(price) OVER (ORDER BY offset) AS price FROM t",
        "SELECT max(event_time) AS event_time, symbol, count(*) AS price FROM t GROUP BY symbol",
    ],
)
def test_queries_that_exchange_rows_read_file_by_file(
    spark: SparkSession, tmp_path: Path, views: list[list[str]], query: str
) -> None:
    paths = _growing_slices(tmp_path)
    response = run_request(spark, _request(tmp_path, [{"query": query}], [_input("t", paths, 0, 4999)]))
    assert response.get("error") is None, response
    # the plan of the one read is not row by row: the query is planned again over a read per file
    assert views == [
        ["in place, 0 filtered, one read of the whole files"],
        ["in place, 0 filtered, one read per file"],
    ]
    prices = _prices(response)[1]
    if "OVER" in query:
        assert prices == [float(sum(range(o + 1))) for o in range(5000)]
    else:
        assert sorted(prices) == sorted(float(sum(1 for o in range(5000) if o % 7 == k)) for k in range(7))


def test_identical_requests_give_identical_slices(
    spark: SparkSession, tmp_path: Path, many_splits: None
) -> None:
    paths = [
        _numbered_slice(tmp_path / f"s{i}.parquet", i * 2000, 2000, row_group_size=300) for i in range(2)
    ]
    query = [{"query": "SELECT event_time, symbol, price * 2 AS price FROM t WHERE price > 100"}]
    files = []
    for run in range(2):
        request = _request(tmp_path / f"run{run}", query, [_input("t", paths, 0, 3999)])
        [written] = run_request(spark, request)["slices"]
        files.append(Path(written["path"]).read_bytes())
    assert files[0] == files[1]  # same rows, same order, same bytes: the same logical and physical hash


def test_a_slice_stored_out_of_order_is_sorted(spark: SparkSession, tmp_path: Path, views: list[str]) -> None:
    first = _numbered_slice(tmp_path / "a.parquet", 0, 50)
    second = _numbered_slice(tmp_path / "b.parquet", 50, 50, shuffle=True)  # footer fine, rows not
    query = [{"query": "SELECT event_time, symbol, price FROM t"}]
    response = run_request(spark, _request(tmp_path, query, [_input("t", [first, second], 10, 89)]))
    assert response.get("error") is None, response
    # planned over the files in place while their offsets were read; the check found the second file out
    # of order, so the query ran over the sorted input
    assert views == [["in place, 2 filtered, one read of the whole files"], ["sorted"]]
    offsets, prices = _prices(response)
    assert prices == [float(o) for o in range(10, 90)]
    assert offsets == list(range(10, 90))


def test_row_groups_stored_out_of_order_are_sorted(
    spark: SparkSession, tmp_path: Path, views: list[str]
) -> None:
    """Each row group counts up, the footer's min / max / rows fit, but the second row group comes first."""
    path = tmp_path / "a.parquet"
    table = pq.read_table(_numbered_slice(tmp_path / "in-order.parquet", 0, 100))
    pq.write_table(pa.concat_tables([table.slice(50), table.slice(0, 50)]), path, row_group_size=50)
    assert pq.ParquetFile(path).metadata.num_row_groups == 2
    query = [{"query": "SELECT event_time, symbol, price FROM t"}]
    response = run_request(spark, _request(tmp_path, query, [_input("t", [str(path)], 0, 99)]))
    assert views == [["in place, 0 filtered, one read of the whole files"], ["sorted"]]
    assert _prices(response) == (list(range(10, 110)), [float(o) for o in range(100)])


def test_slices_listed_out_of_order_are_sorted(spark: SparkSession, tmp_path: Path, views: list[str]) -> None:
    first = _numbered_slice(tmp_path / "a.parquet", 0, 20)
    second = _numbered_slice(tmp_path / "b.parquet", 20, 20)
    query = [{"query": "SELECT event_time, symbol, price FROM t"}]
    response = run_request(spark, _request(tmp_path, query, [_input("t", [second, first], 0, 39)]))
    assert views == [["sorted"]]  # the footers do not show the order the request lists them in
    assert _prices(response)[1] == [float(o) for o in range(40)]


def test_slice_file_types_and_metadata_as_spark_writes_them(spark: SparkSession, tmp_path: Path) -> None:
    data = _numbered_slice(tmp_path / "a.parquet", 0, 5)
    query = (
        "SELECT CAST(1 AS TINYINT) AS op, event_time, CAST(event_time AS DATE) AS day, "
        "CAST(price AS DECIMAL(10, 2)) AS amount, array(symbol, symbol) AS tags, "
        "named_struct('s', symbol, 'p', price) AS info, map(symbol, price) AS m, price > 2 AS big FROM t"
    )
    response = run_request(spark, _request(tmp_path, [{"query": query}], [_input("t", [data], 0, 4)]))
    assert response.get("error") is None, response
    [written] = response["slices"]
    ours = pq.read_table(written["path"])
    # the same rows as Spark's own writer writes them (the ingest's writer: sort, offsets, write_slices)
    spark.read.schema(arrow_to_spark(SCHEMA)).parquet(data).createOrReplaceTempView("t")
    result = normalize_timestamps(spark.sql(query)).withColumn("row", F.monotonically_increasing_id())
    system_time = datetime(2024, 2, 1, 0, 0, 0, 123000, tzinfo=UTC)
    final = with_system_columns(
        result,
        [F.col("row")],
        vocab=Vocab(),
        system_time=system_time,
        next_offset=10,
        drop_columns=("row",),
    )
    [reference], _ = write_slices(final, str(tmp_path / "spark"), vocab=Vocab(), max_records_per_slice=None)
    theirs = pq.read_table(reference.path)
    assert ours.schema.remove_metadata() == theirs.schema.remove_metadata()
    assert ours.to_pylist() == theirs.to_pylist()
    assert written == {**reference.__dict__, "path": written["path"]}
    frame = spark.read.parquet(written["path"])
    assert frame.schema == spark.read.parquet(reference.path).schema
    assert ours.schema.names[:4] == ["offset", "op", "system_time", "event_time"]
    assert ours["op"].to_pylist() == [1] * 5
    spark_row_schema = b"org.apache.spark.sql.parquet.row.metadata"
    row_schemas = [pq.read_metadata(p).metadata[spark_row_schema] for p in (written["path"], reference.path)]
    assert json.loads(row_schemas[0]) == json.loads(row_schemas[1])  # Spark reads it back the same way
    decimal = pq.ParquetFile(written["path"]).schema.column(ours.schema.names.index("amount"))
    assert decimal.physical_type == "INT64"  # as Spark stores DECIMAL(10, 2)


def test_all_rows_filtered_out_still_gives_the_schema(spark: SparkSession, tmp_path: Path) -> None:
    data = _numbered_slice(tmp_path / "a.parquet", 0, 5)
    query = [{"query": "SELECT event_time, symbol FROM t WHERE price > 100"}]
    response = run_request(spark, _request(tmp_path, query, [_input("t", [data], 0, 4)]))
    assert response.get("error") is None and response["slices"] == []
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(response["output_schema"])))
    assert schema.names == ["offset", "op", "system_time", "event_time", "symbol"]
    assert schema.field("op").type == pa.int32() and not schema.field("op").nullable


def test_slice_spliced_from_many_row_groups(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's column chunks go into the slice as they are, next to the system columns' chunks, row group
    by row group; the slice reads back the same in pyarrow and in Spark."""
    monkeypatch.setattr(writer, "_MAX_ROW_GROUP_ROWS", 700)  # Spark's parts: row groups of 700 rows
    paths = [_numbered_slice(tmp_path / f"s{i}.parquet", i * 2000, 2000) for i in range(2)]
    query = [{"query": "SELECT event_time, symbol, price, CAST(price AS INT) % 10 AS n FROM t"}]
    response = run_request(spark, _request(tmp_path, query, [_input("t", paths, 0, 3999)]))
    assert response.get("error") is None, response
    [written] = response["slices"]
    assert (written["offset_start"], written["offset_end"], written["num_records"]) == (10, 4009, 4000)
    metadata = pq.ParquetFile(written["path"]).metadata
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert sum(sizes) == 4000 and len(sizes) >= 6 and max(sizes) <= 700
    table = pq.read_table(written["path"])
    assert table["offset"].to_pylist() == list(range(10, 4010))
    assert table["price"].to_pylist() == [float(o) for o in range(4000)]
    assert table["n"].to_pylist() == [o % 10 for o in range(4000)]
    encodings = {
        metadata.row_group(0).column(i).path_in_schema: metadata.row_group(0).column(i).encodings
        for i in range(metadata.num_columns)
    }
    for name in ("offset", "op", "system_time"):  # the system columns: stepped sequences, built here
        assert encodings[name] == ("DELTA_BINARY_PACKED",)
    offsets = [metadata.row_group(i).column(0).statistics for i in range(len(sizes))]
    starts = [10 + sum(sizes[:i]) for i in range(len(sizes))]
    assert [(s.min, s.max, s.null_count) for s in offsets] == [
        (start, start + size - 1, 0) for start, size in zip(starts, sizes, strict=True)
    ]
    assert table["system_time"].unique().to_pylist() == [SYSTEM_TIME]
    assert any("DICTIONARY" in e for e in encodings["symbol"])  # Spark's chunks: strings and ints in
    assert any("DICTIONARY" in e for e in encodings["n"])  # dictionaries, 64-bit values plain
    assert not any("DICTIONARY" in e for e in encodings["price"] + encodings["event_time"])
    assert metadata.created_by.startswith("parquet-mr")
    rows = spark.read.parquet(written["path"]).orderBy("offset").collect()
    assert [(r["offset"], r["price"], r["symbol"], r["op"]) for r in rows[::997]] == [
        (10 + o, float(o), f"S{o % 7}", 0) for o in range(0, 4000, 997)
    ]
    assert {r["system_time"].timestamp() for r in rows} == {SYSTEM_TIME.timestamp()}


def test_event_time_moves_first_and_names_with_dots_and_backticks_are_kept(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = _numbered_slice(tmp_path / "a.parquet", 0, 3)
    query = "SELECT symbol AS `odd``name.x`, CAST(2 AS SMALLINT) AS op, price, event_time FROM t"
    response = run_request(spark, _request(tmp_path, [{"query": query}], [_input("t", [data], 0, 2)]))
    assert response.get("error") is None, response
    table = pq.read_table(response["slices"][0]["path"])
    assert table.schema.names == ["offset", "op", "system_time", "event_time", "odd`name.x", "price"]
    assert table.schema.field("op").type == pa.int32()
    source = pq.read_table(data)
    assert table["event_time"].to_pylist() == source["event_time"].to_pylist()
    assert table["odd`name.x"].to_pylist() == source["symbol"].to_pylist()
    assert table["price"].to_pylist() == source["price"].to_pylist()
    assert table["op"].to_pylist() == [2, 2, 2]
    assert table["offset"].to_pylist() == [10, 11, 12]

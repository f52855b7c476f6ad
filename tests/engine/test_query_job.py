"""`odf sql` and `odf export` end to end on local Spark (and one query on Spark Connect): rows of a root
with three slices and of a derivative, as of earlier blocks, the outputs read back, refusals — and the
repository byte-identical after every test."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from airflow_odf.cli.main import main
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.data_access import iter_slices, read_slice
from airflow_odf.odf.chain.summary import SUMMARY_KEY
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.query.output import OutputExistsError
from airflow_odf.odf.query.run import (
    QueryOptions,
    ResultTooLargeError,
    export_dataset,
    query_rows,
    query_to_file,
)
from airflow_odf.odf.query.tables import QueryError
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.execute import TransformOptions, run_transform

ROOT = "com.example.trades"
T0 = Timestamp.parse("2024-01-01T00:00:00Z")
RECORDS = """event_time,symbol,price
2024-01-01T10:00:00Z,ACME,10.0
2024-01-01T11:00:00Z,INIT,20.0
2024-01-02T10:00:00Z,ACME,11.0
2024-01-02T11:00:00Z,INIT,21.0
2024-01-03T10:00:00Z,ACME,12.5
"""


@dataclass
class Pipeline:
    repo: Repository
    runner: LocalSparkRunner
    heads: list[str]  # the root's AddData blocks, of 2, 2 and 1 records
    derivative_head: str
    files: dict[str, bytes]  # the repository's files, as the set-up left them

    def options(self, **as_of: str) -> QueryOptions:
        return QueryOptions(work_dir=self.repo.work_dir, as_of=as_of)

    def rows(self, sql: str, **as_of: str) -> list[dict[str, Any]]:
        return query_rows(self.repo, sql, self.runner, self.options(**as_of)).to_pylist()


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Pipeline:
    """A root (dotted name) with three slices, a derivative of its ACME records (one slice), and a root
    without data."""
    tmp = tmp_path_factory.mktemp("sql")
    repo = Repository.init(tmp / "repo")
    runner = LocalSparkRunner("local[2]")
    read = model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "symbol STRING", "price DOUBLE"]
    )
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(model.DatasetSnapshot(name=ROOT, kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0)
    repo.add(
        model.DatasetSnapshot(name="empty", kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
    )
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref=ROOT, alias="trades")],
        transform=model.TransformSql(
            engine="spark",
            query="SELECT event_time, symbol, price * 2 AS doubled FROM trades WHERE symbol = 'ACME'",
        ),
    )
    repo.add(
        model.DatasetSnapshot(name="acme", kind=model.DatasetKind.DERIVATIVE, metadata=[transform]),
        system_time=T0,
    )
    path = tmp / "trades.csv"
    path.write_text(RECORDS)
    options = IngestOptions(work_dir=repo.work_dir, max_records_per_slice=2)  # three slices, one job
    result = push_ingest(repo.dataset(ROOT), ROOT, runner, [path], options, system_time=T0)
    assert result.records == 5
    heads = result.new_blocks[-3:]  # the AddData blocks (after SetDataSchema)
    result = run_transform(repo, "acme", runner, TransformOptions(work_dir=repo.work_dir))
    assert result.new_head is not None and result.records == 3
    return Pipeline(repo, runner, heads, result.new_head, _files(repo.root))


@pytest.fixture(autouse=True)
def _repository_unchanged(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every test that used the pipeline, the repository's files are byte-identical."""
    yield
    if "pipeline" in request.fixturenames:
        pipeline: Pipeline = request.getfixturevalue("pipeline")
        assert _files(pipeline.repo.root) == pipeline.files


def _records(repo: Repository, name: str) -> list[dict[str, Any]]:
    dataset = repo.dataset(name)
    tables = [read_slice(dataset, s) for s in reversed(list(iter_slices(dataset)))]
    return pa.concat_tables(tables).to_pylist()


def test_a_query_reads_the_datasets_by_name(pipeline: Pipeline) -> None:
    sql = f"SELECT offset, symbol, price FROM `{ROOT}` WHERE price > 11 ORDER BY offset"
    assert pipeline.rows(sql) == [
        {"offset": 1, "symbol": "INIT", "price": 20.0},
        {"offset": 3, "symbol": "INIT", "price": 21.0},
        {"offset": 4, "symbol": "ACME", "price": 12.5},
    ]
    joined = (
        f"SELECT t.offset, a.doubled FROM `{ROOT}` t JOIN acme a ON a.event_time = t.event_time "
        "ORDER BY t.offset"
    )
    assert pipeline.rows(joined) == [
        {"offset": 0, "doubled": 20.0},
        {"offset": 2, "doubled": 22.0},
        {"offset": 4, "doubled": 25.0},
    ]
    assert pipeline.rows("SELECT count(*) AS n, sum(op) AS ops FROM ACME") == [{"n": 3, "ops": 0}]


def test_as_of_shows_the_slices_up_to_that_block(pipeline: Pipeline) -> None:
    sql = f"SELECT offset FROM `{ROOT}` ORDER BY offset"
    first, second, last = pipeline.heads
    assert [r["offset"] for r in pipeline.rows(sql, **{ROOT: first})] == [0, 1]
    assert [r["offset"] for r in pipeline.rows(sql, **{ROOT: second})] == [0, 1, 2, 3]
    assert [r["offset"] for r in pipeline.rows(sql, **{ROOT: last})] == [0, 1, 2, 3, 4]
    # the name in any case; another table of the query stays current
    both = f"SELECT (SELECT count(*) FROM `{ROOT}`) AS root, (SELECT count(*) FROM acme) AS acme"
    assert pipeline.rows(both, **{ROOT.upper(): first}) == [{"root": 2, "acme": 3}]


def test_as_of_a_block_of_another_chain_or_not_a_hash(pipeline: Pipeline) -> None:
    sql = f"SELECT * FROM `{ROOT}`"
    with pytest.raises(
        QueryError, match=f"as of {ROOT}={pipeline.derivative_head}: block .* is not in the chain"
    ):
        pipeline.rows(sql, **{ROOT: pipeline.derivative_head})
    with pytest.raises(QueryError, match=f"as of {ROOT}=nope: not a block hash"):
        pipeline.rows(sql, **{ROOT: "nope"})
    with pytest.raises(OdfError, match="no dataset named 'missing'"):
        pipeline.rows(sql, missing=pipeline.heads[0])


def test_a_stale_summary_is_read_and_left_as_it_is(pipeline: Pipeline, tmp_path: Path) -> None:
    root = tmp_path / "copy"
    shutil.copytree(pipeline.repo.root, root)
    repo = Repository.open(root)
    summary = repo.dataset(ROOT).store.local_path(SUMMARY_KEY)
    assert summary is not None
    summary.unlink()
    before = _files(root)
    options = QueryOptions(work_dir=tmp_path / "work", as_of={ROOT: pipeline.heads[1]})
    table = query_rows(repo, f"SELECT max(offset) AS last FROM `{ROOT}`", pipeline.runner, options)
    assert table.to_pylist() == [{"last": 3}]
    assert _files(root) == before


def test_outputs_to_files_read_back(pipeline: Pipeline, tmp_path: Path) -> None:
    sql = f"SELECT offset, symbol, price FROM `{ROOT}` ORDER BY offset DESC"
    expected = [(4, "ACME", 12.5), (3, "INIT", 21.0), (2, "ACME", 11.0), (1, "INIT", 20.0), (0, "ACME", 10.0)]
    options = pipeline.options()
    path = query_to_file(pipeline.repo, sql, pipeline.runner, options, tmp_path / "r.parquet")
    assert [tuple(r.values()) for r in pq.read_table(path).to_pylist()] == expected
    path = query_to_file(pipeline.repo, sql, pipeline.runner, options, tmp_path / "r.csv", "csv")
    with path.open() as f:
        assert [(int(r["offset"]), r["symbol"], float(r["price"])) for r in csv.DictReader(f)] == expected
    path = query_to_file(pipeline.repo, sql, pipeline.runner, options, tmp_path / "r.json", "json")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["offset"], r["symbol"], r["price"]) for r in lines] == expected
    with pytest.raises(OutputExistsError, match="exists and is not empty: give --force"):
        query_to_file(pipeline.repo, sql, pipeline.runner, options, path, "json")
    query_to_file(pipeline.repo, "SELECT 1 AS one", pipeline.runner, options, path, "json", force=True)
    assert path.read_text().strip() == '{"one":1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "r.json", "r.parquet"]


def test_export_writes_the_records_in_offset_order(pipeline: Pipeline, tmp_path: Path) -> None:
    repo, runner = pipeline.repo, pipeline.runner
    records = _records(repo, ROOT)
    files = export_dataset(repo, ROOT, runner, pipeline.options(), tmp_path / "pq")
    assert files and all(f.suffix == ".parquet" for f in files)
    assert pa.concat_tables([pq.read_table(f) for f in files]).to_pylist() == records
    assert list(records[0]) == ["offset", "op", "system_time", "event_time", "symbol", "price"]

    files = export_dataset(
        repo, ROOT, runner, pipeline.options(**{ROOT: pipeline.heads[1]}), tmp_path / "nd", "ndjson"
    )
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert [(r["offset"], r["op"], r["symbol"], r["price"]) for r in lines] == [
        (r["offset"], r["op"], r["symbol"], r["price"]) for r in records[:4]
    ]
    files = export_dataset(repo, "acme", runner, pipeline.options(), tmp_path / "csv", "csv")
    with files[0].open() as f:
        exported = [(int(r["offset"]), float(r["doubled"])) for f_ in [f] for r in csv.DictReader(f_)]
    assert exported == [(r["offset"], r["doubled"]) for r in _records(repo, "acme")]

    with pytest.raises(OutputExistsError, match="exists and is not empty"):
        export_dataset(repo, ROOT, runner, pipeline.options(), tmp_path / "pq")
    export_dataset(repo, "acme", runner, pipeline.options(), tmp_path / "pq", force=True)
    assert [r["doubled"] for r in pq.read_table(tmp_path / "pq").to_pylist()] == [20.0, 22.0, 25.0]
    with pytest.raises(QueryError, match="empty has no data yet: nothing to export"):
        export_dataset(repo, "empty", runner, pipeline.options(), tmp_path / "none")
    with pytest.raises(OutputExistsError, match="refusing to write into or over the repository"):
        export_dataset(repo, ROOT, runner, pipeline.options(), repo.root / "out", force=True)


@pytest.mark.parametrize(
    ("sql", "refused"),
    [
        (f"DROP VIEW `{ROOT}`", "statement DROP at line 1, column 1 is refused: only a query runs here"),
        ("/* a comment */ CREATE TABLE t USING parquet AS SELECT 1", "statement CREATE at line 1, column 17"),
        (
            f"INSERT OVERWRITE DIRECTORY '/tmp/odf-out' USING parquet SELECT * FROM `{ROOT}`",
            "the statement at line 1, column 47 is refused: it cannot be parsed as Spark SQL",
        ),
        (
            f"WITH x AS (SELECT * FROM `{ROOT}`) INSERT OVERWRITE DIRECTORY '/tmp/odf-out' USING parquet "
            "SELECT * FROM x",
            "it cannot be parsed as Spark SQL",
        ),
        (
            f"FROM `{ROOT}` INSERT OVERWRITE DIRECTORY '/tmp/odf-out' USING parquet SELECT *",
            "it cannot be parsed as Spark SQL",
        ),
        ("SET spark.sql.ansi.enabled=false", "statement SET at line 1, column 1 is refused"),
        (f"SELECT 1; DROP VIEW `{ROOT}`", "the text is refused: it holds 2 statements"),
        ("", "the query is empty"),
    ],
)
def test_only_queries_run(pipeline: Pipeline, sql: str, refused: str) -> None:
    with pytest.raises(QueryError) as e:
        pipeline.rows(sql)
    assert refused in str(e.value)
    assert not Path("/tmp/odf-out").exists()


def test_queries_that_begin_otherwise_run(pipeline: Pipeline) -> None:
    assert pipeline.rows("-- values\n(VALUES (1, 'a')) ") == [{"col1": 1, "col2": "a"}]
    assert pipeline.rows(f"WITH a AS (SELECT price FROM `{ROOT}`) SELECT max(price) AS top FROM a") == [
        {"top": 21.0}
    ]
    assert pipeline.rows("TABLE acme")[0]["doubled"] == 20.0
    assert pipeline.rows("SELECT count(*) AS n FROM empty") == [{"n": 0}]  # a dataset without data


def test_a_query_leaves_no_view_in_the_session(pipeline: Pipeline, spark: SparkSession) -> None:
    """The views of a request are dropped by their names (a quoted name would drop nothing): a later
    request on the same session sees only its own."""
    assert pipeline.rows(f"SELECT count(*) AS n FROM `{ROOT}` JOIN ACME USING (offset)") == [{"n": 3}]
    assert {ROOT, "acme"}.isdisjoint(t.name for t in spark.catalog.listTables())


def test_an_unknown_table_is_named_with_the_datasets(pipeline: Pipeline) -> None:
    with pytest.raises(QueryError) as e:
        pipeline.rows("SELECT * FROM com.example.trades")
    assert str(e.value) == (
        "the query: relation com.example.trades at line 1, column 15 is refused: it reads a path or a "
        "catalog table; a dotted dataset name is written in `backticks`"
    )


def test_a_table_that_is_no_dataset(pipeline: Pipeline) -> None:
    with pytest.raises(QueryError) as e:
        pipeline.rows("SELECT * FROM acme JOIN nothing USING (offset)")
    assert str(e.value) == (
        f"relation nothing at line 1, column 25 is no dataset here; the datasets: acme, {ROOT}, empty (quote "
        "names with dots in backticks: SELECT * FROM `com.example.trades`)"
    )


def test_a_result_above_the_cap_is_refused(pipeline: Pipeline) -> None:
    sql = f"SELECT * FROM `{ROOT}`"
    options = pipeline.options()
    assert query_rows(pipeline.repo, sql, pipeline.runner, options, max_rows=5).num_rows == 5
    with pytest.raises(ResultTooLargeError, match="more than 4 rows"):
        query_rows(pipeline.repo, sql, pipeline.runner, options, max_rows=4)


def test_the_commands(pipeline: Pipeline, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--repo", str(pipeline.repo.root)]
    sql = f"SELECT offset, symbol FROM `{ROOT}` ORDER BY offset LIMIT 2"
    assert main(["sql", sql, *base, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"offset": 0, "symbol": "ACME"},
        {"offset": 1, "symbol": "INIT"},
    ]
    assert main(["sql", sql, *base, "--as-of", f"{ROOT}={pipeline.heads[0]}", "--format", "csv"]) == 0
    assert capsys.readouterr().out == "offset,symbol\n0,ACME\n1,INIT\n"
    assert main(["sql", sql, *base]) == 0
    assert capsys.readouterr().out.splitlines() == ["offset  symbol", "0       ACME", "1       INIT"]
    assert main(["sql", sql, *base, "--output", str(tmp_path / "out.csv")]) == 0
    assert (tmp_path / "out.csv").read_text() == "offset,symbol\n0,ACME\n1,INIT\n"

    assert main(["sql", f"DELETE FROM `{ROOT}`", *base]) == 2
    assert (
        "statement DELETE at line 1, column 1 is refused: only a query runs here" in capsys.readouterr().err
    )
    assert main(["sql", sql, *base, "--format", "parquet"]) == 2
    assert "--format parquet needs --output PATH" in capsys.readouterr().err
    assert main(["sql", sql, *base, "--as-of", ROOT]) == 2
    assert "expected NAME=BLOCKHASH" in capsys.readouterr().err
    assert main(["sql", sql, *base, "--max-rows", "1"]) == 2
    assert "more than 1 rows" in capsys.readouterr().err

    assert main(["export", "acme", *base, "--to", str(tmp_path / "x"), "--format", "ndjson"]) == 0
    lines = (tmp_path / "x" / "part-00000.ndjson").read_text().splitlines()
    assert [json.loads(line)["offset"] for line in lines] == [0, 1, 2]
    assert main(["export", "acme", *base, "--to", str(tmp_path / "x")]) == 2
    assert "give --force" in capsys.readouterr().err
    assert main(["export", "acme", *base, "--to", str(tmp_path / "y"), "--as-of", pipeline.heads[0]]) == 2
    assert "is not in the chain" in capsys.readouterr().err


def test_a_query_on_spark_connect(pipeline: Pipeline, connect_url: str) -> None:
    from airflow_odf.engine.connect_runner import SparkConnectRunner

    runner = SparkConnectRunner(connect_url)
    options = pipeline.options(**{ROOT: pipeline.heads[1]})
    sql = f"SELECT symbol, count(*) AS n FROM `{ROOT}` GROUP BY symbol ORDER BY symbol"
    table = query_rows(pipeline.repo, sql, runner, options)
    assert table.to_pylist() == [{"symbol": "ACME", "n": 2}, {"symbol": "INIT", "n": 2}]
    with pytest.raises(
        QueryError, match="statement DROP at line 1, column 1 is refused: only a query runs here"
    ):
        query_rows(pipeline.repo, f"DROP VIEW `{ROOT}`", runner, options)


def test_the_real_manifests_datasets_answer_queries_and_compaction(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reference's real manifests, added (their sources are not reachable here, so they hold no
    data): every dataset is a table of no rows, and a compaction finds nothing to merge."""
    from tests.paths import skip_without_upstream, upstream_manifests

    skip_without_upstream()
    root = tmp_path / "upstream"
    assert main(["init", "--repo", str(root)]) == 0
    main(["add", *map(str, upstream_manifests()), "--repo", str(root)])  # those missing an input refused
    capsys.readouterr()
    repo = Repository.open(root)
    names = [name for name, _ in repo.list()]
    derivatives = [name for name in names if repo.dataset(name).state().transform is not None]
    roots = [name for name in names if name not in derivatives]
    assert roots and derivatives
    before = _files(root)
    counts = " UNION ALL ".join(f"SELECT '{name}' AS name, count(*) AS n FROM `{name}`" for name in names)
    assert main(["sql", counts, "--repo", str(root), "--format", "json", "--engine", "local"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"name": name, "n": 0} for name in names]
    assert _files(root) == before  # read-only
    assert main(["compact", roots[0], "--repo", str(root), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["up_to_date"] is True
    assert main(["compact", derivatives[0], "--keep-metadata-only", "--repo", str(root)]) == 0

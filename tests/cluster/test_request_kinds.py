"""Every request kind on the cluster that shares no disk with the coordinator (issue 37, item 1), on the
`s3://` repository with s3a that `s3_pipeline` built through the warm driver: ingest (polling and push),
transform and verify replay are the scenario's (test_standalone_cluster.py); here `odf sql` (printed and
to a file), `OdfSqlOperator`, a query proof and its re-execution, `odf export`, schema inference from a
sample on the coordinator's disk, and compaction. Each writes its output into the operation's staging
folder in the bucket, and each leaves neither a staged object there nor data in the coordinator's
scratch dir."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.storage.url import StoreCredentials, open_store
from tests.cluster.pipeline import S3Pipeline, airflow_connections, driver_errors
from tests.paths import REPO
from tests.sharing.conftest import ACCESS_KEY, REGION, SECRET_KEY

TRADES_BY_ID = "SELECT id, symbol, price FROM trades ORDER BY id"
TRADES_ROWS = [
    {"id": 1, "symbol": "SYMA", "price": 10.25},
    {"id": 2, "symbol": "SYMB", "price": 20.0},
    {"id": 3, "symbol": "SYMC", "price": 30.5},
    {"id": 4, "symbol": "SYMD", "price": 40.0},
]


def nothing_left(pipeline: S3Pipeline, s3_admin: Any) -> None:
    """No staged object in the bucket, no data in the coordinator's scratch dir."""
    assert pipeline.staged_keys(s3_admin) == []
    assert pipeline.scratch_data(b"SYMD") == []


def repository(pipeline: S3Pipeline, endpoint: str) -> Repository:
    credentials = StoreCredentials(
        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region=REGION, endpoint_url=endpoint
    )
    return Repository.in_store(open_store(pipeline.repo, credentials=credentials), pipeline.repo)


def test_sql_prints_rows_and_writes_files_through_the_bucket(s3_pipeline: S3Pipeline, s3_admin: Any) -> None:
    printed = s3_pipeline.run("sql", TRADES_BY_ID, "--format", "json")
    assert json.loads(printed.stdout) == TRADES_ROWS
    joined = s3_pipeline.run(
        "sql",
        "SELECT t.symbol, d.doubled FROM trades t JOIN `trades.by-symbol` d ON t.symbol = d.symbol "
        "WHERE t.id > 2 ORDER BY t.symbol",
        "--format",
        "csv",
    )
    assert joined.stdout.splitlines() == ["symbol,doubled", "SYMC,61.0", "SYMD,80.0"]
    too_many = s3_pipeline.run("sql", TRADES_BY_ID, "--max-rows", "2", ok=False)
    assert too_many.returncode != 0 and "the result has more than 2 rows" in too_many.stderr

    out = s3_pipeline.folder / "sql-out"
    s3_pipeline.run("sql", TRADES_BY_ID, "--output", str(out / "trades.csv"))
    with (out / "trades.csv").open() as f:
        assert [(r["id"], r["symbol"]) for r in csv.DictReader(f)] == [
            ("1", "SYMA"),
            ("2", "SYMB"),
            ("3", "SYMC"),
            ("4", "SYMD"),
        ]
    s3_pipeline.run("sql", TRADES_BY_ID, "--output", str(out / "trades.parquet"))
    assert pq.read_table(out / "trades.parquet").to_pylist() == TRADES_ROWS
    nothing_left(s3_pipeline, s3_admin)


def test_a_query_proof_is_signed_and_re_executed_on_the_cluster(
    s3_pipeline: S3Pipeline, s3_admin: Any
) -> None:
    proof = s3_pipeline.folder / "proof.json"
    s3_pipeline.run("sql", TRADES_BY_ID, "--proof", str(proof), "--limit", "3", "--skip", "1")
    document = json.loads(proof.read_text())
    assert document["output"]["data"] == TRADES_ROWS[1:4]
    assert set(document["commitment"]) == {"inputHash", "outputHash", "subQueriesHash"}
    checked = s3_pipeline.run("verify-query", str(proof))  # the query run again, its output hashed
    assert json.loads(checked.stdout) == {"ok": True}
    nothing_left(s3_pipeline, s3_admin)


def test_export_writes_the_records_in_offset_order_into_a_local_folder(
    s3_pipeline: S3Pipeline, s3_admin: Any
) -> None:
    to = s3_pipeline.folder / "export-trades"
    s3_pipeline.run("export", "trades", "--to", str(to), "--format", "csv")
    rows = []
    for part in sorted(to.glob("part-*.csv")):
        with part.open() as f:
            rows += list(csv.DictReader(f))
    assert [(r["offset"], r["id"], r["symbol"]) for r in rows] == [
        ("0", "1", "SYMA"),
        ("1", "2", "SYMB"),
        ("2", "3", "SYMC"),
        ("3", "4", "SYMD"),
    ]
    nothing_left(s3_pipeline, s3_admin)


# The operator in a child process, as an Airflow worker runs a task: its connections from the environment.
OPERATOR_CHILD = textwrap.dedent(
    """
    import json, sys

    from airflow_odf.operators.sql import OdfSqlOperator

    sql, output = sys.argv[1], sys.argv[2]
    rows = OdfSqlOperator(task_id="rows", sql=sql, engine="spark-connect").execute({})
    written = OdfSqlOperator(task_id="file", sql=sql, output_path=output, engine="spark-connect").execute({})
    print("RESULT " + json.dumps({"rows": rows, "written": written}))
    """
)


def test_the_sql_operator_returns_rows_and_writes_a_file(
    s3_pipeline: S3Pipeline, moto_endpoint: str, warm_engine: str, s3_admin: Any
) -> None:
    home = s3_pipeline.folder / "airflow-home"
    env = {
        **s3_pipeline.env,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        **airflow_connections(
            warm_engine, s3_pipeline.repo, moto_endpoint, s3_pipeline.scratch, spark_conn_id="spark_default"
        ),
    }
    output = s3_pipeline.folder / "operator" / "trades.json"
    done = subprocess.run(
        [sys.executable, "-c", OPERATOR_CHILD, TRADES_BY_ID, str(output)],
        env={k: v for k, v in env.items() if k not in ("ODF_ENGINE", "ODF_SPARK_REMOTE", "ODF_SPARK_S3A")},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, driver_errors(done.stderr)
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["rows"] == TRADES_ROWS
    assert result["written"] == {"path": str(output), "format": "json"}
    assert [json.loads(line) for line in output.read_text().splitlines()] == TRADES_ROWS
    nothing_left(s3_pipeline, s3_admin)


READINGS = """\
kind: DatasetSnapshot
version: 1
content:
  name: readings
  kind: Root
  metadata:
  - kind: AddPushSource
    sourceName: default
    read:
      kind: Parquet
    merge:
      kind: Append
"""


def test_schema_inference_reads_a_sample_on_the_coordinators_disk(
    s3_pipeline: S3Pipeline, moto_endpoint: str, s3_admin: Any
) -> None:
    """The sample, on the coordinator's disk only, is staged into the bucket for the executors; a Parquet
    sample's widenings are read from its footer there; `--commit` records the schema before any data."""
    manifest = s3_pipeline.folder / "readings.yaml"
    manifest.write_text(READINGS)
    s3_pipeline.run("add", str(manifest))
    sample = s3_pipeline.folder / "readings-sample.parquet"
    pq.write_table(
        pa.table(
            {
                "event_time": pa.array([1_704_067_200_000], pa.timestamp("ms", tz="UTC")),
                "sensor": pa.array(["SYMD-1"]),
                "level": pa.array([7], pa.uint8()),
            }
        ),
        sample,
    )
    inferred = s3_pipeline.run("schema", "infer", "readings", str(sample), "--format", "ddl", "--commit")
    ddl = inferred.stdout
    columns = ("offset BIGINT", "op INT", "system_time TIMESTAMP", "event_time TIMESTAMP", "sensor STRING")
    assert all(column in ddl for column in columns), ddl
    assert "level SMALLINT" in ddl, ddl
    assert "readings: widened in Spark: level: uint8 -> smallint" in inferred.stderr, inferred.stderr
    assert "schema committed before any data" in inferred.stderr

    dataset = repository(s3_pipeline, moto_endpoint).dataset("readings")
    assert isinstance(dataset.block(dataset.head()).event, model.SetDataSchema)
    nothing_left(s3_pipeline, s3_admin)


def test_compaction_merges_slices_in_the_bucket(
    s3_pipeline: S3Pipeline, moto_endpoint: str, s3_admin: Any
) -> None:
    """`odf compact` of the two-push `positions`: one slice of the same records, offsets and ops; verified."""
    before = s3_pipeline.table("positions")
    s3_pipeline.run("compact", "positions")
    assert s3_pipeline.table("positions") == before
    dataset = repository(s3_pipeline, moto_endpoint).dataset("positions")
    slices = [
        block.event.new_data
        for _, block in dataset.iter_blocks()
        if isinstance(block.event, model.AddData) and block.event.new_data is not None
    ]
    assert [(s.offset_interval.start, s.offset_interval.end) for s in slices] == [(0, len(before) - 1)]
    verified = s3_pipeline.run("verify", "positions")
    assert verified.stdout.startswith("positions: ok ("), verified.stdout
    nothing_left(s3_pipeline, s3_admin)

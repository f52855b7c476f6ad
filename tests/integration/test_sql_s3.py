"""`odf sql` and `odf export` on a repository in S3 (moto on 127.0.0.1) with the local Spark engine: the
slices are staged into the operation's folder for the engine, the bucket is left exactly as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.format import model
from airflow_odf.odf.query.run import QueryOptions, export_dataset, query_rows
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.data_schema import data_schema_from_arrow
from tests.engine.conftest import runner, spark  # noqa: F401  (fixtures)
from tests.sharing.conftest import _fake_aws_environment, moto_endpoint, s3_admin, s3_bucket  # noqa: F401
from tests.unit.test_query_tables import SCHEMA, _slice

NAME = "com.example.t"


def _objects(s3_admin: Any, bucket: str) -> dict[str, bytes]:  # noqa: F811
    listed = s3_admin.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: s3_admin.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def test_queries_over_a_repository_in_s3(
    moto_endpoint: str,  # noqa: F811
    s3_bucket: str,  # noqa: F811
    s3_admin: Any,  # noqa: F811
    runner: LocalSparkRunner,  # noqa: F811
    tmp_path: Path,
) -> None:
    repo = Repository.init(f"s3+{moto_endpoint}/{s3_bucket}/odf")
    schema = model.SetDataSchema(schema=data_schema_from_arrow(SCHEMA))
    repo.add(model.DatasetSnapshot(name=NAME, kind=model.DatasetKind.ROOT, metadata=[schema]))
    dataset = repo.dataset(NAME)
    heads = []
    for start, rows in ((0, 2), (2, 3)):
        event, staged = _slice(tmp_path, start, rows)
        heads.append(str(dataset.commit([event], objects=[staged]).new_head))
    before = _objects(s3_admin, s3_bucket)

    options = QueryOptions(work_dir=tmp_path / "work")
    sql = f"SELECT offset, v FROM `{NAME}` ORDER BY offset"
    assert [r["v"] for r in query_rows(repo, sql, runner, options).to_pylist()] == [
        "r0",
        "r1",
        "r2",
        "r3",
        "r4",
    ]
    first = QueryOptions(work_dir=tmp_path / "work", as_of={NAME: heads[0]})
    assert query_rows(repo, sql, runner, first).to_pylist() == [
        {"offset": 0, "v": "r0"},
        {"offset": 1, "v": "r1"},
    ]
    files = export_dataset(repo, NAME, runner, options, tmp_path / "export")
    assert [r["offset"] for f in files for r in pq.read_table(f).to_pylist()] == [0, 1, 2, 3, 4]

    assert _objects(s3_admin, s3_bucket) == before
    assert not list((tmp_path / "work" / "operations").iterdir())  # the staged copies are gone

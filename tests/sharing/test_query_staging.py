"""A query's staging folder in a repository's bucket (`cache/operations/<id>/` at its top level, where the
engine writes the result on a cluster that shares no disk with the core): emptied when the query ends,
whatever happened, and what a killed query left is removed by `odf gc` once old enough."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.query.run import collect_query_staging, query_operation
from airflow_odf.odf.repo.repository import Repository


@pytest.fixture
def s3a_repo(moto_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> Repository:
    monkeypatch.setenv("ODF_SPARK_S3A", "1")  # the engine writes into the bucket itself
    return Repository.init(f"s3+{moto_endpoint}/{s3_bucket}/odf")


def test_a_query_stages_in_the_bucket_and_leaves_nothing(s3a_repo: Repository, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), query_operation(s3a_repo, tmp_path) as operation:
        assert operation.staging is not None
        assert operation.out_dir == f"{operation.staging.uri}/out"
        assert operation.out_dir.startswith("s3a://") and "/odf/cache/operations/" in operation.out_dir
        written = f"{operation.out_dir}/result/part-00000.parquet"
        s3a_repo.store.put(operation.staging.key_of(written), b"PAR1 the result")
        [local] = operation.fetch(s3a_repo, [written])
        assert Path(local).read_bytes() == b"PAR1 the result"
        assert Path(local).parent == operation.op_dir / "result"
        raise RuntimeError("the query failed after the engine wrote")
    assert list(s3a_repo.store.list_tree("cache/operations")) == []


def test_gc_removes_what_a_killed_query_staged_once_old_enough(s3a_repo: Repository, s3_admin: Any) -> None:
    s3a_repo.store.put("cache/operations/dead/out/result/part-00000.csv", b"a,b\n")
    assert collect_query_staging(s3a_repo, 3600) == []  # a live query's, perhaps
    assert collect_query_staging(s3a_repo, 0) == ["cache/operations/dead/out/result/part-00000.csv"]
    assert list(s3a_repo.store.list_tree("cache/operations")) == []


def test_a_local_repository_stages_nothing_and_gc_leaves_its_operations(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "repo")
    with query_operation(repo, tmp_path / "work") as operation:
        assert operation.staging is None
        assert operation.out_dir == str(operation.op_dir / "out")
        assert operation.fetch(repo, ["/somewhere/part-0.csv"]) == ["/somewhere/part-0.csv"]
        assert collect_query_staging(repo, 0) == []  # a live operation folder is gc's by its lock

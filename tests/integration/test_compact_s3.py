"""`odf compact` of a root in an `s3://` repository (moto): on the in-process local Spark, which reads
copies of the slices and whose merged file the core uploads; and on spark-submit with `--spark-s3a`,
where the engine reads the slices in the bucket, writes the merged file into the operation's staging
folder there and hashes it in place, and the commit copies it inside the bucket. Records unchanged
(`--verify` too), the chain verifies, the staging folder is emptied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.chain.data_access import iter_slices, read_slice
from airflow_odf.odf.chain.dataset import STAGING_PREFIX, Dataset
from airflow_odf.odf.compaction.execute import run_compaction
from airflow_odf.odf.compaction.plan import CompactionOptions
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.storage.url import SPARK_S3A_ENV
from airflow_odf.utils.s3a import s3a_jars
from tests.engine.conftest import runner, spark  # noqa: F401  (the shared SparkSession)
from tests.sharing.conftest import _fake_aws_environment, moto_endpoint, s3_admin, s3_bucket  # noqa: F401
from tests.unit.test_compaction import build_root

ROOT = "cities"


def _records(dataset: Dataset) -> list[dict[str, Any]]:
    return [r for s in reversed(list(iter_slices(dataset))) for r in read_slice(dataset, s).to_pylist()]


@pytest.fixture
def s3_repo(moto_endpoint: str, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: F811
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("ODF_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv(SPARK_S3A_ENV, "0")
    url = f"s3://{s3_bucket}/odf"
    build_root(Repository.init(url), ROOT, [2, 3, 4])
    return url


def test_local_engine_compacts_a_root_in_s3(s3_repo: str, runner: Any) -> None:  # noqa: F811
    repo = Repository.open(s3_repo)
    dataset = repo.dataset(ROOT)
    before = _records(dataset)
    result = run_compaction(repo, ROOT, runner, CompactionOptions(verify=True))
    assert result.verified and (result.slices_before, result.slices_after) == (3, 1)
    assert _records(dataset) == before
    assert main(["verify", ROOT, "--repo", s3_repo, "--integrity"]) == 0


def test_spark_s3a_engine_merges_and_hashes_in_the_bucket(
    s3_repo: str,
    s3_bucket: str,  # noqa: F811
    s3_admin: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    try:
        s3a_jars()
    except ValueError as e:
        pytest.fail(str(e))
    dataset = Repository.open(s3_repo).dataset(ROOT)
    before = _records(dataset)
    engine = ["--repo", s3_repo, "--engine", "spark-submit", "--master", "local[2]", "--spark-s3a"]
    capsys.readouterr()
    assert main(["compact", ROOT, *engine, "--verify", "--format", "json"]) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert out["verified"] and (out["slices_before"], out["slices_after"]) == (3, 1)
    assert _records(dataset) == before
    assert main(["verify", ROOT, "--repo", s3_repo, "--integrity"]) == 0
    staged = s3_admin.list_objects_v2(Bucket=s3_bucket, Prefix="odf/").get("Contents", [])
    assert not [o["Key"] for o in staged if f"/{STAGING_PREFIX}/" in o["Key"]]

"""Hostile SQL on the query-commitment paths (issue 35, part 3): `GET/POST /query` and `POST /verify` of
`odf serve --query`, and `odf verify-query` of a commitment whose input query is hostile — validly
signed by the node itself, so that only the SQL policy stands between it and Spark.

Each of issue 34's constructs is refused with the policy's one line (HTTP 400 `{"message": …}`, or exit
code 2 and one line on stderr), and nothing runs: no Spark job, no file of the repository touched, the
canaries untouched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from pyspark.sql import SparkSession

from airflow_odf.cli.main import main
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.identity.canonical import canonical_hash
from airflow_odf.odf.query.commitment import sign_commitment
from airflow_odf.odf.query.endpoint import QueryEndpoint
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.sharing.serve import RepositoryServer
from tests.security import test_hostile_sql as hostile
from tests.security.test_hostile_sql import (
    CONSTRUCTS,
    ROOT,
    Canary,
    Construct,
    files_of,
    one_line,
    spark_jobs,
)

canary = hostile.canary  # the module's canaries and its repository with the root `trades` (no data)
cheap_repo = hostile.cheap_repo


@pytest.fixture(scope="module")
def node_url(cheap_repo: Path) -> Iterator[str]:
    """`odf serve --query` over the repository, in-process on the shared local session."""
    repo = Repository.open(cheap_repo)
    api = QueryEndpoint(
        repo, LocalSparkRunner("local[2]"), work_dir=repo.work_dir, node_key=repo.keys.node_secret()
    )
    server = RepositoryServer(repo, api=api)
    server.start_in_thread()
    yield server.url
    server.shutdown()
    server.server_close()


@pytest.fixture
def nothing_runs(spark: SparkSession, cheap_repo: Path, canary: Canary) -> Iterator[None]:
    jobs, before = spark_jobs(spark), files_of(cheap_repo)
    yield
    assert spark_jobs(spark) == jobs
    assert files_of(cheap_repo) == before
    canary.assert_untouched()


def signed_commitment(repo: Repository, sql: str) -> dict[str, object]:
    """A commitment of `sql` over the root pinned at its head, signed by the node's own key."""
    dataset = repo.dataset(ROOT)
    pin = {"id": str(repo.resolve(ROOT)), "alias": ROOT, "blockHash": str(dataset.head())}
    query_input = {
        "query": sql,
        "queryDialect": "SqlSpark",
        "dataFormat": "JsonAoS",
        "include": ["Input", "Proof"],
        "datasets": [pin],
        "skip": 0,
        "limit": 100,
    }
    commitment = {
        "inputHash": canonical_hash(query_input),
        "outputHash": canonical_hash({"data": [], "dataFormat": "JsonAoS"}),
        "subQueriesHash": canonical_hash([]),
    }
    proof = sign_commitment(repo.keys.node_secret(), commitment)
    return {"input": query_input, "subQueries": [], "commitment": commitment, "proof": proof}


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.parametrize("construct", CONSTRUCTS, ids=lambda c: c.id)
def test_the_query_api_refuses_it(construct: Construct, canary: Canary, node_url: str) -> None:
    sql = construct.over(ROOT, canary)
    answers = [
        requests.get(f"{node_url}/query", params={"query": sql, "include": "proof"}, timeout=60),
        requests.post(f"{node_url}/query", json={"query": sql}, timeout=60),
    ]
    for answer in answers:
        assert answer.status_code == 400
        message = answer.json()["message"]
        assert message.startswith(f"the query: {construct.expected(canary)}"), message
        assert "is refused: " in message


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.parametrize("construct", CONSTRUCTS, ids=lambda c: c.id)
def test_verify_refuses_a_signed_hostile_commitment(
    construct: Construct,
    canary: Canary,
    cheap_repo: Path,
    node_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = signed_commitment(Repository.open(cheap_repo), construct.over(ROOT, canary))
    answer = requests.post(f"{node_url}/verify", json=document, timeout=60)
    assert answer.status_code == 400
    assert answer.json()["message"].startswith(f"the query: {construct.expected(canary)}")

    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(document))
    capsys.readouterr()
    assert main(["verify-query", str(path), "--repo", str(cheap_repo)]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert one_line(out.err).startswith(f"the query: {construct.expected(canary)}")

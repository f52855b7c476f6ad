"""Where the Spark Connect server's Spark reads and writes (issue 24, point 4): a server that cannot see
the work directory is detected before any work and reported in one line naming the server, the directory
and the ways out; the work directory can be put where both see it (ODF_WORK_DIR, the connection's
`work_dir` extra)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_odf.engine.connect_runner import SparkConnectRunner
from airflow_odf.odf.engine_client.connect_server import ConnectServer
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.operation import IngestError
from airflow_odf.odf.repo.repository import WORK_DIR_ENV, Repository

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
CSV = "id,name\n1,a\n2,b\n3,c\n"


class ServerOnAnotherDisk(ConnectServer):
    """A server that sees an empty folder where `hidden` is, as a server on another machine would: it runs
    in its own mount namespace with a private tmpfs mounted over `hidden`."""

    def __init__(self, hidden: Path) -> None:
        super().__init__("local[1]", port=0)
        self.hidden = hidden

    def command(self, home: Path, jar: Path, secrets_file: Path | None = None) -> list[str]:
        mount = 'mount -t tmpfs none "$0" && exec "$@"'
        namespace = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", mount, str(self.hidden)]
        return [*namespace, *super().command(home, jar, secrets_file)]


def _namespaces_allowed() -> bool:
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], check=False)
    return probe.returncode == 0


def _root(repo: Repository, tmp_path: Path) -> Path:
    read = model.ReadStepCsv(header=True, ddl_schema=["id BIGINT", "name STRING"])
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(
        model.DatasetSnapshot(name="people", kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
    )
    data = tmp_path / "people.csv"
    data.write_text(CSV)
    return data


@pytest.mark.skipif(not _namespaces_allowed(), reason="needs unprivileged user and mount namespaces")
def test_a_server_that_cannot_see_the_work_directory_is_reported_before_any_work(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "repo")
    data = _root(repo, tmp_path)
    dataset = repo.dataset("people")
    before = dataset.head()
    with ServerOnAnotherDisk(tmp_path) as server, pytest.raises(IngestError) as failed:
        push_ingest(
            dataset,
            "people",
            SparkConnectRunner(server.url),
            [data],
            IngestOptions(work_dir=repo.work_dir),
        )
    message = str(failed.value)
    assert failed.value.kind == "engine-setup"
    assert message.startswith(
        f"people: the Spark Connect server {server.url} cannot see this process's work directory "
    )
    assert str(repo.work_dir / "operations") in message
    assert "`work_dir` extra of the odf_repo connection, or ODF_WORK_DIR" in message
    assert len(message.splitlines()) == 1
    assert dataset.head() == before  # nothing committed, nothing staged left behind
    assert list((tmp_path / "repo" / "datasets").glob("*/data/*")) == []
    assert list(repo.work_dir.rglob(".odf-server-sees-*")) == []


def test_the_work_directory_can_be_placed_where_the_server_sees_it(
    tmp_path: Path, connect_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared-volume"
    monkeypatch.setenv(WORK_DIR_ENV, str(shared))
    repo = Repository.init(tmp_path / "repo")
    assert repo.work_dir.parent == shared and repo.work_dir.name != "cache"
    assert Repository.open(tmp_path / "repo", work_dir=tmp_path / "given").work_dir == tmp_path / "given"
    data = _root(repo, tmp_path)
    dataset = repo.dataset("people")
    result = push_ingest(
        dataset, "people", SparkConnectRunner(connect_url), [data], IngestOptions(work_dir=repo.work_dir)
    )
    assert result.records == 3
    assert (repo.work_dir / "operations").is_dir()  # the engine worked there, not in the repository
    assert not (tmp_path / "repo" / "cache").exists()
    [slice_file] = (tmp_path / "repo" / "datasets").glob("*/data/*")  # moved across into the repository
    table = pq.read_table(slice_file)
    assert table["offset"].to_pylist() == [0, 1, 2]
    assert table["id"].to_pylist() == [1, 2, 3] and table["name"].to_pylist() == ["a", "b", "c"]

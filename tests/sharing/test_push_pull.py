"""Push and pull through real servers: an S3 API (moto on 127.0.0.1) and `odf serve` over HTTP.

Round trips keep block bytes and data identical; tampered remote objects are rejected; diverged
histories are refused; a push killed mid-way is resumed by the next run; racing pushers never fork
the remote's chain; `odf push` / `odf pull` / `odf serve` from the command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.repo.repository import Repository, RepositoryError
from airflow_odf.odf.sharing.push_pull import pull_dataset, push_dataset, remotes
from airflow_odf.odf.sharing.serve import RepositoryServer
from airflow_odf.odf.sharing.sync import DatasetsDivergedError, TamperedObjectError
from airflow_odf.odf.storage.store import ConflictError
from airflow_odf.odf.storage.url import StoreCredentials, open_store
from tests.sharing.conftest import ACCESS_KEY, REGION, SECRET_KEY
from tests.unit.test_dataset import DID, files, rich_dataset
from tests.unit.test_sync import grow

REPO = Path(__file__).resolve().parents[2]
NAME = "com.example.trades"


def make_repo(root: Path, tmp_path: Path, name: str = NAME) -> Repository:
    """A repository with one dataset of 8 blocks, 3 data files and 3 checkpoints."""
    repo = Repository.init(root)
    rich_dataset(root / "datasets" / str(DID).removeprefix("did:odf:"), tmp_path / f"stage-{root.name}")
    repo.register_name(name, DID)
    return repo


def folder(repo: Repository, name: str = NAME) -> Path:
    return repo.root / "datasets" / str(repo.resolve(name)).removeprefix("did:odf:")


def same_dataset(a: Path, b: Path) -> None:
    for sub in ("blocks", "data", "checkpoints"):
        assert files(a, sub) == files(b, sub), sub
        assert files(a, sub), sub
    assert (a / "refs/head").read_bytes() == (b / "refs/head").read_bytes()


def s3_objects(endpoint: str, bucket: str, prefix: str) -> dict[str, bytes]:
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            key = item["Key"]
            out[key.removeprefix(prefix)] = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    return out


def test_s3_round_trip_is_byte_identical(
    tmp_path: Path, s3_bucket: str, s3_credentials: StoreCredentials, moto_endpoint: str
) -> None:
    a = make_repo(tmp_path / "a", tmp_path)
    url = f"s3://{s3_bucket}/odf/{NAME}"
    pushed = push_dataset(a, NAME, url, credentials=s3_credentials)
    assert pushed.result.objects_transferred == 6 and len(pushed.result.new_blocks) == 8
    remote = s3_objects(moto_endpoint, s3_bucket, f"odf/{NAME}/")
    for sub in ("blocks", "data", "checkpoints"):
        local = {f"{sub}/{k}": v for k, v in files(folder(a), sub).items()}
        assert {k: v for k, v in remote.items() if k.startswith(f"{sub}/")} == local
    assert remote["refs/head"] == (folder(a) / "refs/head").read_bytes()

    b = Repository.init(tmp_path / "b")
    pulled = pull_dataset(b, url, credentials=s3_credentials)
    assert pulled.dataset == NAME and pulled.dataset_id == DID
    same_dataset(folder(a), folder(b))
    assert verify_integrity(b.dataset(NAME)) == []
    assert remotes(b.dataset(NAME))["pull"] == [url] and remotes(a.dataset(NAME))["push"] == [url]

    # new blocks travel by the remembered remotes; what is there already is not sent again
    grow(a.dataset(NAME), tmp_path / "more", 2, "m")
    again = push_dataset(a, NAME, credentials=s3_credentials)
    assert again.result.objects_transferred == 2 and again.result.objects_skipped == 0
    update = pull_dataset(b, name=NAME, credentials=s3_credentials)
    assert len(update.result.new_blocks) == 2
    same_dataset(folder(a), folder(b))
    assert pull_dataset(b, name=NAME, credentials=s3_credentials).result.up_to_date


def test_tampered_objects_on_s3_are_rejected(
    tmp_path: Path, s3_bucket: str, s3_credentials: StoreCredentials
) -> None:
    a = make_repo(tmp_path / "a", tmp_path)
    url = f"s3://{s3_bucket}/odf/{NAME}"
    push_dataset(a, NAME, url, credentials=s3_credentials)
    store = open_store(url, credentials=s3_credentials)
    event = next(a.dataset(NAME).iter_blocks())[1].event
    key = f"data/{event.new_data.physical_hash}"
    good = store.get(key)
    store.put(key, good[:-1] + bytes([good[-1] ^ 1]))
    b = Repository.init(tmp_path / "b")
    with pytest.raises(TamperedObjectError, match=f"{key} hashes to"):
        pull_dataset(b, url, credentials=s3_credentials)
    assert b.list() == [] and Dataset(open_store(str(folder_of(b)))).head() is None

    store.put(key, good)
    head = a.dataset(NAME).head()
    block_key = f"blocks/{head}"
    raw = store.get(block_key)
    middle = len(raw) // 2
    store.put(block_key, raw[:middle] + bytes([raw[middle] ^ 0xFF]) + raw[middle + 1 :])
    with pytest.raises(TamperedObjectError, match=f"block {head} is corrupt"):
        pull_dataset(b, url, credentials=s3_credentials)
    assert b.list() == []


def folder_of(repo: Repository) -> Path:
    return repo.root / "datasets" / str(DID).removeprefix("did:odf:")


def test_diverged_histories_are_refused(
    tmp_path: Path, s3_bucket: str, s3_credentials: StoreCredentials
) -> None:
    a = make_repo(tmp_path / "a", tmp_path)
    url = f"s3://{s3_bucket}/odf/{NAME}"
    push_dataset(a, NAME, url, credentials=s3_credentials)
    b = Repository.init(tmp_path / "b")
    pull_dataset(b, url, credentials=s3_credentials)
    grow(a.dataset(NAME), tmp_path / "ga", 1, "a")
    grow(b.dataset(NAME), tmp_path / "gb", 1, "b")
    push_dataset(a, NAME, credentials=s3_credentials)
    remote_head = Dataset(open_store(url, credentials=s3_credentials)).head()
    with pytest.raises(DatasetsDivergedError, match="histories diverged"):
        push_dataset(b, NAME, url, credentials=s3_credentials)
    assert Dataset(open_store(url, credentials=s3_credentials)).head() == remote_head
    with pytest.raises(DatasetsDivergedError):
        pull_dataset(b, name=NAME, credentials=s3_credentials)
    forced = pull_dataset(b, name=NAME, credentials=s3_credentials, force=True)
    assert forced.result.new_head == remote_head == b.dataset(NAME).head()


KILLER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from airflow_odf.odf.chain.dataset import Dataset
    from airflow_odf.odf.repo.repository import Repository
    from airflow_odf.odf.storage.s3 import S3ObjectStore
    from airflow_odf.odf.sharing.sync import sync

    bucket, prefix, endpoint, repo, name, kill_after = sys.argv[1:]
    left = [int(kill_after)]

    class Dying(S3ObjectStore):
        def put_file(self, key, source, *, move=False):
            super().put_file(key, source, move=move)
            left[0] -= 1
            if left[0] == 0:
                os._exit(9)  # killed mid-way: no clean-up, no exception handlers

    store = Dying(bucket, prefix, endpoint_url=endpoint, region="us-east-1",
                  aws_access_key_id="k", aws_secret_access_key="s")
    sync(Repository.open(repo).dataset(name), Dataset(store), max_parallel=1)
    """
)


def test_a_push_killed_midway_is_resumed(
    tmp_path: Path, s3_bucket: str, s3_credentials: StoreCredentials, moto_endpoint: str
) -> None:
    a = make_repo(tmp_path / "a", tmp_path)
    grow(a.dataset(NAME), tmp_path / "more", 6, "k")
    prefix = f"odf/{NAME}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.run(
        [sys.executable, "-c", KILLER, s3_bucket, prefix, moto_endpoint, str(a.root), NAME, "5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 9, child.stderr
    remote = s3_objects(moto_endpoint, s3_bucket, f"{prefix}/")
    assert "refs/head" not in remote and not [k for k in remote if k.startswith("blocks/")]
    # the objects that arrived before the kill, and the push's declaration of what it would reference
    # (which keeps gc off them while the push could still finish: docs/repository.md)
    declared = [k for k in remote if k.startswith("info/commits/")]
    assert len(declared) == 1 and len(remote) - len(declared) == 5
    url = f"s3://{s3_bucket}/{prefix}"
    resumed = push_dataset(a, NAME, url, credentials=s3_credentials)
    assert resumed.result.objects_skipped == 5 and resumed.result.objects_transferred == 12 - 5
    b = Repository.init(tmp_path / "b")
    pull_dataset(b, url, credentials=s3_credentials)
    same_dataset(folder(a), folder(b))


def test_racing_pushers_never_fork_the_remote(
    tmp_path: Path, s3_bucket: str, s3_credentials: StoreCredentials
) -> None:
    url = f"s3://{s3_bucket}/odf/{NAME}"
    a = make_repo(tmp_path / "a", tmp_path)
    push_dataset(a, NAME, url, credentials=s3_credentials)
    b = Repository.init(tmp_path / "b")
    pull_dataset(b, url, credentials=s3_credentials)
    for round_ in range(3):
        grow(a.dataset(NAME), tmp_path / f"a{round_}", 1, f"a{round_}")
        grow(b.dataset(NAME), tmp_path / f"b{round_}", 1, f"b{round_}")
        start = threading.Barrier(2)
        outcomes: dict[str, object] = {}

        def push(
            repo: Repository, who: str, start: threading.Barrier = start, outcomes: dict = outcomes
        ) -> None:
            start.wait()
            try:
                outcomes[who] = push_dataset(repo, NAME, url, credentials=s3_credentials)
            except (ConflictError, DatasetsDivergedError) as e:
                outcomes[who] = e

        threads = [threading.Thread(target=push, args=(r, w)) for r, w in ((a, "a"), (b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [w for w, o in outcomes.items() if not isinstance(o, Exception)]
        assert len(winners) == 1, outcomes
        winner = a if winners == ["a"] else b
        remote = Dataset(open_store(url, credentials=s3_credentials))
        assert remote.head() == winner.dataset(NAME).head()
        assert verify_integrity(remote) == []
        # the loser takes the winner's history (forced pull), and the next round races again
        loser = b if winner is a else a
        pull_dataset(loser, url, name=NAME, credentials=s3_credentials, force=True)


def test_odf_serve_and_the_cli_round_trip(tmp_path: Path, s3_bucket: str, moto_endpoint: str) -> None:
    a = make_repo(tmp_path / "a", tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "ODF_SERVE_TOKEN": "s3cret-token",
    }
    odf = [sys.executable, "-m", "airflow_odf.cli"]
    url = f"s3+{moto_endpoint}/{s3_bucket}/odf/{NAME}"
    out = subprocess.run(
        [*odf, "push", NAME, "--to", url, "--repo", str(a.root), "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["objects_transferred"] == 6
    subprocess.run([*odf, "init", "--repo", str(tmp_path / "b")], env=env, check=True, capture_output=True)
    subprocess.run(
        [*odf, "pull", url, "--as", "replica", "--repo", str(tmp_path / "b")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    server = subprocess.Popen(
        [*odf, "serve", "--port", "0", "--repo", str(tmp_path / "b")],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stderr.readline()
        served = line.split(" at ")[1].split()[0]
        subprocess.run(
            [*odf, "init", "--repo", str(tmp_path / "c")], env=env, check=True, capture_output=True
        )
        denied = subprocess.run(
            [*odf, "pull", f"{served}/replica", "--repo", str(tmp_path / "c")],
            env=env,
            capture_output=True,
            text=True,
        )
        assert denied.returncode != 0 and "401" in denied.stderr
        assert "s3cret-token" not in denied.stderr
        env["ODF_REMOTE_TOKEN"] = "s3cret-token"
        ok = subprocess.run(
            [*odf, "pull", f"{served}/replica", "--repo", str(tmp_path / "c"), "--format", "json"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["new_head"] == str(a.dataset(NAME).head())
    finally:
        server.terminate()
        server.wait(timeout=30)
    c = Repository.open(tmp_path / "c")
    same_dataset(folder(a), folder(c, "replica"))
    assert verify_integrity(c.dataset("replica")) == []


def test_serve_answers_the_protocol_and_nothing_else(tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a", tmp_path)
    server = RepositoryServer(a)
    server.start_in_thread()
    try:
        head = a.dataset(NAME).head()

        def get(path: str) -> bytes:
            with urllib.request.urlopen(f"{server.url}{path}", timeout=10) as r:
                return r.read()

        assert get(f"/{NAME}/refs/head") == str(head).encode()
        assert get(f"/{DID}/blocks/{head}") == (folder(a) / "blocks" / str(head)).read_bytes()
        listing = json.loads(get("/"))
        assert listing == [{"name": NAME, "id": str(DID), "head": str(head)}]
        for path in (
            f"/{NAME}/info/summary",
            f"/{NAME}/blocks/..%2F..%2Faliases",
            f"/{NAME}/data/nothex",
            "/x/refs/head",
        ):
            with pytest.raises(urllib.error.HTTPError) as e:
                get(path)
            assert e.value.code == 404, path
    finally:
        server.shutdown()
        server.server_close()


def test_tampered_objects_served_over_http_are_rejected(tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a", tmp_path)
    event = next(a.dataset(NAME).iter_blocks())[1].event
    victim = folder(a) / "checkpoints" / str(event.new_checkpoint.physical_hash)
    victim.write_bytes(b"forged " + victim.read_bytes())
    server = RepositoryServer(a)
    server.start_in_thread()
    try:
        b = Repository.init(tmp_path / "b")
        with pytest.raises(
            TamperedObjectError, match=f"checkpoints/{event.new_checkpoint.physical_hash} has"
        ):
            pull_dataset(b, f"{server.url}/{NAME}")
        assert b.list() == [] and files(folder_of(b), "blocks") == {}
    finally:
        server.shutdown()
        server.server_close()


def repository_files(root: Path) -> dict[str, bytes]:
    """Every file of a repository except derived summaries and lock files, path -> bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "summary" and not p.name.endswith(".lock")
    }


def test_pulling_a_dataset_here_under_a_second_name_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = make_repo(tmp_path / "a", tmp_path)
    url = f"file://{folder(a)}"
    b = Repository.init(tmp_path / "b")
    pull_dataset(b, url, name="copy")
    grow(a.dataset(NAME), tmp_path / "more", 2, "m")  # the remote has news: still no second name
    before = repository_files(b.root)
    for force in (False, True):
        with pytest.raises(RepositoryError, match=f"{DID}, already in this repository as 'copy'"):
            pull_dataset(b, url, name="new", force=force)
        assert repository_files(b.root) == before
    assert b.list() == [("copy", DID)]
    assert main(["pull", url, "--as", "new", "--repo", str(b.root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already in this repository as 'copy'" in err
    assert repository_files(b.root) == before


def test_the_loser_of_two_pulls_bringing_the_same_head_is_up_to_date(tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a", tmp_path)
    url = f"file://{folder(a)}"
    b = Repository.init(tmp_path / "b")
    winners: list = []

    def pull_concurrently(_line: str) -> None:
        """Runs while the other pull is transferring: this one moves the head first."""
        if not winners:
            winners.append(pull_dataset(b, url, name=NAME))

    for _ in ("a new dataset", "an update"):
        lost = pull_dataset(b, url, name=NAME, log=pull_concurrently)
        assert winners[0].result.new_blocks and lost.result.up_to_date
        assert b.list() == [(NAME, DID)] and verify_integrity(b.dataset(NAME)) == []
        same_dataset(folder(a), folder(b))
        grow(a.dataset(NAME), tmp_path / "more", 1, f"m{len(winners)}")
        winners.clear()


def test_the_loser_of_two_pulls_bringing_different_heads_gets_a_clear_conflict(tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a", tmp_path)
    ahead = make_repo(tmp_path / "ahead", tmp_path / "ahead-staging")
    grow(ahead.dataset(NAME), tmp_path / "more", 1, "m")
    b = Repository.init(tmp_path / "b")
    moved_to = []

    def pull_the_longer_chain(_line: str) -> None:
        if not moved_to:
            moved_to.append(pull_dataset(b, f"file://{folder(ahead)}", name=NAME).result.new_head)

    with pytest.raises(ConflictError, match=r"head moved to \S+ while transferring"):
        pull_dataset(b, f"file://{folder(a)}", name=NAME, log=pull_the_longer_chain)
    assert b.dataset(NAME).head() == moved_to[0] == ahead.dataset(NAME).head()

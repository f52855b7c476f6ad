"""`odf delete` and `odf rename` (in process, no engine): names go, objects stay for `odf gc`; a dataset
that derivatives read is refused unless `-r` deletes them too, derivatives first; a rename moves only
the name, derivatives keep reading their inputs by DID. (A transform after a rename, on real Spark:
tests/engine/test_rename_transform.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import read_manifests
from airflow_odf.odf.repo.lineage import lineage
from airflow_odf.odf.repo.overview import repository_overview
from airflow_odf.odf.repo.repository import ALIAS_KEY, DatasetNotFoundError, Repository
from tests.paths import REPO

MANIFESTS = REPO / "dags_examples" / "manifests"
TRADES, DAILY, WEEKLY, OTHER = "com.example.trades", "com.example.trades.daily", "com.example.weekly", "other"


def derivative(name: str, *inputs: str) -> model.DatasetSnapshot:
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref=i) for i in inputs],
        transform=model.TransformSql(engine="spark", query=f"SELECT * FROM `{inputs[0]}`"),
    )
    return model.DatasetSnapshot(name=name, kind=model.DatasetKind.DERIVATIVE, metadata=[transform])


def make_repo(root: Path) -> Repository:
    """trades -> daily -> weekly, and an unrelated root `other`."""
    repo = Repository.init(root)
    for name in ("com.example.trades.yaml", "com.example.trades.daily.yaml"):
        (manifest,) = read_manifests(MANIFESTS / name)
        repo.add(manifest.content)
    repo.add(derivative(WEEKLY, DAILY))
    (trades,) = read_manifests(MANIFESTS / "com.example.trades.yaml")
    repo.add(model.DatasetSnapshot(name=OTHER, kind=model.DatasetKind.ROOT, metadata=trades.content.metadata))
    return repo


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return make_repo(tmp_path / "repo")


def odf(repo: Repository, *args: str) -> int:
    return main([*args, "--repo", str(repo.root)])


def folders(repo: Repository) -> set[str]:
    return {p.name for p in (repo.root / "datasets").iterdir()}


def folder(repo: Repository, name: str) -> str:
    return str(repo.resolve(name)).removeprefix("did:odf:")


# ----- delete -----


def test_delete_is_refused_while_derivatives_read_it(
    repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    assert odf(repo, "delete", TRADES) == 2
    err = capsys.readouterr().err
    assert err == f"{TRADES} is read by derivatives: {DAILY} (delete them first, or all of them with -r)\n"
    assert [name for name, _ in repo.list()] == [TRADES, DAILY, WEEKLY, OTHER]  # nothing deleted


def test_delete_of_a_leaf_takes_the_name_and_gc_takes_the_objects(
    repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    weekly = folder(repo, WEEKLY)
    blocks = {p.name for p in (repo.root / "datasets" / weekly / "blocks").iterdir()}
    assert len(blocks) == 2  # Seed and SetTransform: objects for gc to collect later
    assert odf(repo, "delete", WEEKLY) == 0
    out = capsys.readouterr().out
    assert f"deleted {WEEKLY} (did:odf:{weekly})" in out and "odf gc" in out
    with pytest.raises(DatasetNotFoundError):
        repo.resolve(WEEKLY)
    assert not (repo.root / "aliases" / WEEKLY).exists()
    assert not (repo.root / "datasets" / weekly / ALIAS_KEY).exists()  # the folder records no name
    assert weekly in folders(repo)  # the objects stay until gc
    assert odf(repo, "gc", "--min-age", "0") == 0
    assert weekly not in folders(repo)
    assert [name for name, _ in repo.list()] == [TRADES, DAILY, OTHER]
    assert odf(repo, "verify", DAILY, "--integrity") == 0


def test_delete_recursive_deletes_the_derivatives_first(
    repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = {name: str(repo.resolve(name)) for name in (TRADES, DAILY, WEEKLY)}
    assert odf(repo, "delete", "-r", TRADES) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [f"deleted {n} ({ids[n]})" for n in (WEEKLY, DAILY, TRADES)]
    assert [name for name, _ in repo.list()] == [OTHER]
    assert odf(repo, "gc", "--min-age", "0") == 0
    assert folders(repo) == {folder(repo, OTHER)}


def test_delete_of_several_names_needs_no_r_when_they_are_all_the_readers(repo: Repository) -> None:
    assert odf(repo, "delete", DAILY, WEEKLY) == 0
    assert [name for name, _ in repo.list()] == [TRADES, OTHER]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("delete", "com.example.nope"), "no dataset named 'com.example.nope' in "),
        (("delete", "bad..name"), "'bad..name' is not a valid dataset name"),
        (("rename", "com.example.nope", "x"), "no dataset named 'com.example.nope' in "),
        (("rename", OTHER, "bad..name"), "'bad..name' is not a valid dataset name"),
        (("rename", OTHER, TRADES.upper()), f"the name '{TRADES.upper()}' is taken in "),
    ],
)
def test_bad_names_are_one_line_errors(
    repo: Repository, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    assert odf(repo, *args) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
    assert [name for name, _ in repo.list()] == [TRADES, DAILY, WEEKLY, OTHER]


def test_a_folder_whose_name_went_but_not_its_record_is_deleted_by_did(repo: Repository) -> None:
    """What a crash between the two steps of a delete leaves: `odf delete DID` completes it."""
    did = repo.resolve(OTHER)
    (repo.root / "aliases" / OTHER).unlink()
    assert odf(repo, "gc", "--min-age", "0") == 0
    assert folder_of(did) in folders(repo)  # gc keeps a dataset that only lost its name
    assert odf(repo, "delete", str(did)) == 0
    assert odf(repo, "gc", "--min-age", "0") == 0
    assert folder_of(did) not in folders(repo)


def folder_of(did: object) -> str:
    return str(did).removeprefix("did:odf:")


# ----- rename -----


def test_rename_moves_the_name_only(repo: Repository, capsys: pytest.CaptureFixture[str]) -> None:
    did, head = repo.resolve(TRADES), repo.dataset(TRADES).head()
    assert odf(repo, "rename", TRADES, "com.example.ticks") == 0
    assert capsys.readouterr().out == f"renamed {TRADES} to com.example.ticks ({did})\n"
    assert repo.resolve("com.example.ticks") == did and repo.dataset("com.example.ticks").head() == head
    with pytest.raises(DatasetNotFoundError):
        repo.resolve(TRADES)
    assert repo.name_of(repo.dataset_by_id(did)) == "com.example.ticks"
    # the derivative still reads it by DID, and the lineage names it by its new name
    (daily_input,) = repo.dataset(DAILY).state().transform.inputs
    assert daily_input.dataset_ref == str(did)
    graph = lineage(repository_overview(repo))
    names = {n.key: n.name for n in graph.nodes}
    assert (names[str(did)], names[str(repo.resolve(DAILY))]) in {
        (names[e.source], names[e.target]) for e in graph.edges
    }
    assert names[str(did)] == "com.example.ticks"


def test_a_rename_in_case_only_changes_the_recorded_name(repo: Repository) -> None:
    assert odf(repo, "rename", OTHER, "Other") == 0
    assert [name for name, _ in repo.list()] == [TRADES, DAILY, WEEKLY, "Other"]


def test_a_rename_interrupted_after_taking_the_new_name_completes_when_run_again(repo: Repository) -> None:
    did = repo.resolve(OTHER)
    (repo.root / "aliases" / "other-v2").write_bytes(str(did).encode())  # the crash left both names
    assert odf(repo, "rename", OTHER, "other-v2") == 0
    assert repo.names_of(did) == ["other-v2"]


def test_an_unreadable_dataset_can_be_deleted_but_stops_other_deletes(
    repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whether a broken dataset reads the one to delete cannot be known: refused, naming it."""
    (repo.root / "datasets" / folder(repo, WEEKLY) / "refs" / "head").unlink()
    assert odf(repo, "delete", OTHER) == 2
    assert capsys.readouterr().err.startswith(
        f"{WEEKLY} cannot be read, so whether it reads the dataset is unknown: "
    )
    assert odf(repo, "delete", WEEKLY) == 0
    assert odf(repo, "delete", OTHER) == 0
    assert [name for name, _ in repo.list()] == [TRADES, DAILY]

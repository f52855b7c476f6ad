"""A repository on disk edited by someone else: missing or unreadable heads, links out of the repository,
damaged alias files, forged summaries, huge refs. Every command reports each problem in one line (never
a traceback), keeps the exit code honest and never deletes or reads what it must not.

The commands run in process (`airflow_odf.cli.main.main`) on a small repository of two datasets made
through the core (no Spark); the huge-file case runs in a subprocess with capped memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.chain.dataset import HEAD_REF, Dataset
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.chain.summary import SUMMARY_KEY, _digest
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.limits import MAX_REF_BYTES
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.storage.local import LocalObjectStore, UnsafeObjectError
from tests.unit.test_dataset import DID, SCHEMA, T0, rich_dataset

NAME = "com.example.trades"
OTHER = "com.example.other"
OTHER_DID = DatasetId(bytes(range(1, 33)))


def make_repository(root: Path, staging: Path) -> Repository:
    """Two datasets: NAME (8 blocks, 3 data files, 3 checkpoints) and OTHER (Seed and schema)."""
    repo = Repository.init(root)
    rich_dataset(folder(repo, DID), staging)
    repo.register_name(NAME, DID)
    repo.dataset_by_id(OTHER_DID).commit([seed(OTHER_DID), SCHEMA], system_time=T0, expected_head=None)
    repo.register_name(OTHER, OTHER_DID)
    return repo


def seed(did: DatasetId) -> model.Seed:
    return model.Seed(dataset_id=did, dataset_kind=model.DatasetKind.ROOT)


def folder(repo: Repository, did: DatasetId = DID) -> Path:
    return repo.root / "datasets" / str(did).removeprefix("did:odf:")


def tree(root: Path) -> dict[str, bytes | str]:
    """Every file and link under `root` (links by target, not followed; files of more than 1 MiB — the
    sparse "huge" ones — by size), except derived summaries and lock files."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = f"-> {os.readlink(path)}"
            elif path.is_file() and not rel.endswith(SUMMARY_KEY) and not name.endswith(".lock"):
                size = path.stat().st_size
                out[rel] = path.read_bytes() if size <= 1 << 20 else f"{size} bytes"
    return out


def odf(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return make_repository(tmp_path / "repo", tmp_path / "staging")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the repository with a file that must never be read, changed or deleted."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret").write_text("top secret")
    return directory


# ----- point 9: a missing head is damage, not an empty dataset -----


def test_missing_head_fails_verify_and_gc_keeps_everything(
    repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder(repo) / HEAD_REF).unlink()
    before = tree(repo.root)
    code, out, err = odf(capsys, "verify", NAME, "--integrity", "--repo", str(repo.root))
    assert code == 4 and "ok" not in out
    assert "refs/head is missing (the dataset has 8 block(s))" in out
    code, out, err = odf(capsys, "gc", "--min-age", "0", "--repo", str(repo.root))
    assert code == 4
    assert err.splitlines() == [
        f"{NAME}: refs/head is missing (the dataset has 8 block(s)); nothing of it was removed"
    ]
    assert tree(repo.root) == before


def test_missing_head_is_shown_broken_by_list_and_log(
    repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder(repo) / HEAD_REF).unlink()
    before = tree(repo.root)
    # not an empty dataset: pull, tail, log and schema name the damage instead of "up to date" / no rows
    for argv in (["log", NAME], ["tail", NAME], ["pull", NAME], ["schema", "show", NAME]):
        code, out, err = odf(capsys, *argv, "--repo", str(repo.root))
        assert (code, out) == (2, ""), argv
        assert err == f"{NAME}: refs/head is missing (the dataset has 8 block(s))\n", argv
    assert tree(repo.root) == before


# ----- point 11: one broken dataset does not hide the others -----


@pytest.mark.parametrize(
    "damage",
    [
        lambda head: head.write_text("not a hash"),
        lambda head: head.unlink() or head.mkdir(),
        lambda head: head.write_bytes(b"\xff\xfe"),
        lambda head: head.write_bytes(b"z" * (MAX_REF_BYTES + 1)),
        lambda head: head.unlink(),
    ],
    ids=["garbage", "directory", "not-utf8", "too-large", "missing"],
)
def test_list_shows_the_broken_dataset_and_the_others(
    repo: Repository, capsys: pytest.CaptureFixture[str], damage
) -> None:
    damage(folder(repo) / HEAD_REF)
    code, out, err = odf(capsys, "list", "--repo", str(repo.root))
    assert code == 4
    lines = out.splitlines()
    assert lines[1].split()[:2] == [OTHER, "Root"] and lines[2].split() == [NAME, "BROKEN", "-", "-", "-"]
    assert len(err.splitlines()) == 1 and err.startswith(f"{NAME}: ")
    code, out, _ = odf(capsys, "list", "--format", "json", "--repo", str(repo.root))
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 4 and rows[OTHER]["blocks"] == 2 and rows[NAME]["error"] and rows[NAME]["blocks"] is None


# ----- point 12: clear errors, and verify's exit code -----


def test_unreadable_head_fails_verify_with_4(repo: Repository, capsys: pytest.CaptureFixture[str]) -> None:
    (folder(repo) / HEAD_REF).write_text("not a hash")
    code, out, err = odf(capsys, "verify", NAME, "--integrity", "--repo", str(repo.root))
    assert code == 4 and out.startswith(f"{NAME}: head refs/head: ") and err == ""


def test_head_that_is_a_directory_is_one_clear_problem(
    repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    head = folder(repo) / HEAD_REF
    head.unlink()
    head.mkdir()
    code, out, _ = odf(capsys, "verify", NAME, "--integrity", "--repo", str(repo.root))
    assert code == 4 and "refs/head" in out and "is a directory" in out
    code, _, err = odf(capsys, "log", NAME, "--repo", str(repo.root))
    assert code == 2 and "is a directory" in err and len(err.splitlines()) == 1


def test_block_that_is_a_directory_is_reported(repo: Repository, capsys: pytest.CaptureFixture[str]) -> None:
    head = (folder(repo) / HEAD_REF).read_text()
    block = folder(repo) / "blocks" / head
    block.unlink()
    block.mkdir()
    code, out, _ = odf(capsys, "verify", NAME, "--integrity", "--repo", str(repo.root))
    assert code == 4 and f"block {head}: cannot be read" in out and "is a directory" in out
    assert odf(capsys, "log", NAME, "--repo", str(repo.root))[0] == 2


def test_non_utf8_alias_files(repo: Repository, capsys: pytest.CaptureFixture[str]) -> None:
    (folder(repo) / "info" / "alias").write_bytes(b"\xff\xfe")
    code, out, err = odf(capsys, "list", "--repo", str(repo.root))
    assert code == 0 and NAME in out
    (repo.root / "aliases" / NAME).write_bytes(b"\xff\xfe")
    code, out, err = odf(capsys, "list", "--repo", str(repo.root))
    assert code == 4 and OTHER in out and err.startswith(f"{NAME}: aliases/{NAME} in ") and "UTF-8" in err
    code, out, err = odf(capsys, "log", NAME, "--repo", str(repo.root))
    assert code == 2 and "does not hold a did:odf" in err


# ----- point 14: printed names, limits, forged summaries, read caps -----


def test_control_characters_in_names_are_never_printed(
    repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder(repo) / "info" / "alias").write_text("\x1b[2J\x1b[31mpwned")
    (repo.root / "aliases" / "\x1b[31mevil").write_text("garbage")
    code, out, err = odf(capsys, "list", "--repo", str(repo.root))
    assert "\x1b" not in out + err
    assert NAME in out and "'\\x1b[31mevil'" in out and code == 4


@pytest.mark.parametrize(
    "argv", [["log", NAME, "--limit", "-5"], ["log", NAME, "--limit", "0"], ["tail", NAME, "-n", "0"]]
)
def test_non_positive_limits_are_usage_errors(
    repo: Repository, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--repo", str(repo.root)])
    assert exit_.value.code == 2 and "expected a whole number of at least 1" in capsys.readouterr().err


def forge_summary(dataset_folder: Path, **fields: object) -> None:
    """Edits the summary and recomputes its (unkeyed) digest, as anyone who can write the file can."""
    path = dataset_folder / SUMMARY_KEY
    plain = json.loads(path.read_bytes())
    plain.pop("digest")
    plain.update(fields)
    path.write_text(json.dumps({**plain, "digest": _digest(plain)}, separators=(",", ":")))


def test_forged_summary_is_reported_by_verify_and_then_no_longer_trusted(
    repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    repo.dataset(NAME).state()  # the summary at the head
    forge_summary(folder(repo), numRecords=999_999)
    assert repo.dataset(NAME).state().num_records == 999_999  # readers trust the cache...
    code, out, _ = odf(capsys, "verify", NAME, "--integrity", "--repo", str(repo.root))
    assert (
        code == 4 and f"{NAME}: summary info/summary: disagrees with the chain" in out and "numRecords" in out
    )
    assert repo.dataset(NAME).state().num_records == 33  # ...until verify has removed the forgery
    assert odf(capsys, "verify", NAME, "--integrity", "--repo", str(repo.root))[0] == 0


def test_summary_at_a_head_outside_the_chain_is_not_trusted(repo: Repository) -> None:
    repo.dataset(NAME).state()
    forge_summary(folder(repo), head=str(repo.dataset(OTHER).head()), numRecords=999_999)
    assert repo.dataset(NAME).state().num_records == 33


def test_huge_head_is_refused_before_it_is_read(repo: Repository) -> None:
    head = folder(repo) / HEAD_REF
    head.unlink()
    with open(head, "wb") as f:  # sparse: costs no disk, but 4 GiB of memory to whoever reads it whole
        f.truncate(4 << 30)
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))\n"
        "from airflow_odf.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, "list", "--repo", str(repo.root)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 4 and "Traceback" not in proc.stderr, proc.stderr
    expected = (
        f"refs/head at {folder(repo)} is larger than {MAX_REF_BYTES} bytes (more than a ref or name holds)"
    )
    assert proc.stderr.strip() == f"{NAME}: {expected}; refused"


def test_block_larger_than_the_limit_is_refused(repo: Repository, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODF_MAX_BLOCK_BYTES", "64")
    problems = [str(p) for p in verify_integrity(Dataset(LocalObjectStore(folder(repo))))]
    assert (
        len(problems) == 1
        and "is larger than 64 bytes (the block limit, ODF_MAX_BLOCK_BYTES); refused" in problems[0]
    )


# ----- point 10: links out of the repository -----


def test_reads_never_follow_links_out_of_the_repository(repo: Repository, outside: Path) -> None:
    store = repo.store.child(f"datasets/{folder(repo).name}")
    head = folder(repo) / HEAD_REF
    inner = folder(repo) / "refs" / "copy"
    inner.write_bytes(head.read_bytes())
    head.unlink()
    head.symlink_to(inner)  # a link inside the repository is followed
    assert store.get(HEAD_REF) == inner.read_bytes()
    head.unlink()
    head.symlink_to(outside / "secret")
    with pytest.raises(UnsafeObjectError, match="symbolic link out of"):
        store.get(HEAD_REF)
    with pytest.raises(UnsafeObjectError, match="symbolic link out of"):
        store.local_path(HEAD_REF)
    (folder(repo) / "info").rename(outside / "info")
    (folder(repo) / "info").symlink_to(outside / "info")
    with pytest.raises(UnsafeObjectError, match="its folder is a symbolic link out of"):
        store.get("info/alias")
    with pytest.raises(UnsafeObjectError, match="its folder is a symbolic link out of"):
        store.put("info/summary", b"x")


def test_verify_reports_a_data_file_linked_out_of_the_repository(
    repo: Repository, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = next((folder(repo) / "data").iterdir())
    copy = outside / "copy"
    copy.write_bytes(data.read_bytes())  # even with the right content: the repository must hold it
    data.unlink()
    data.symlink_to(copy)
    code, out, _ = odf(capsys, "verify", NAME, "--integrity", "--repo", str(repo.root))
    assert code == 4 and f"data data/{data.name}: cannot be read" in out and "symbolic link out of" in out


def test_gc_never_touches_files_behind_a_linked_folder(
    repo: Repository, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = folder(repo) / "data"
    target = outside / "data"
    data.rename(target)
    (target / "unreferenced").write_text("not the repository's")
    data.symlink_to(target)
    before = tree(outside)
    code, _, err = odf(capsys, "gc", "--min-age", "0", "--repo", str(repo.root))
    assert code == 4 and err.startswith(f"{NAME}: data is a symbolic link out of ")
    assert err.rstrip().endswith("nothing of it was removed") and len(err.splitlines()) == 1
    assert tree(outside) == before


# ----- gc of unnamed dataset folders -----


def test_gc_removes_a_failed_creation_but_not_a_dataset_that_lost_its_alias(
    repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    loser = DatasetId(bytes(range(2, 34)))
    repo.dataset_by_id(loser).commit([seed(loser)], system_time=T0, expected_head=None)
    repo.dataset_by_id(loser).store.put("info/alias", NAME.encode())  # lost the race for NAME
    (repo.root / "aliases" / OTHER).unlink()  # OTHER keeps its folder and its info/alias
    code, out, err = odf(capsys, "gc", "--min-age", "0", "--repo", str(repo.root))
    assert (code, err) == (0, "") and out.startswith("removed 1 ")
    assert not folder(repo, loser).exists() and (folder(repo, OTHER_DID) / HEAD_REF).is_file()

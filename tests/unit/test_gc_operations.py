"""`odf gc` removes the operation folders of dead operations, never a live one's.

Real processes hold real operations (`operation_dir`, as ingest and transform open them) and are
killed with SIGKILL; the folders are made old with `os.utime` instead of waiting for `--min-age`.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.operation import operation_dir
from airflow_odf.odf.repo import operation_folders
from airflow_odf.odf.repo.operation_folders import OWNER_FILE, collect_operations, process_start
from airflow_odf.odf.repo.repository import Repository
from tests.paths import REPO

# holds one operation in the repository's scratch space, says where, then sleeps until killed
HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from airflow_odf.odf.operation import operation_dir

    with operation_dir(Path(sys.argv[1])) as op_dir:
        (op_dir / "slice.parquet").write_bytes(b"x" * 1_000_000)
        print(op_dir, flush=True)
        time.sleep(600)
    """
)


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return Repository.init(tmp_path / "repo")


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def hold_operation(
    repo: Repository, holders: list[subprocess.Popen[str]]
) -> tuple[Path, subprocess.Popen[str]]:
    """A child process inside an operation of `repo`; its folder (made an hour old) and the process."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(repo.work_dir)], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    holders.append(process)
    assert process.stdout is not None
    folder = Path(process.stdout.readline().strip())
    assert folder.parent == repo.work_dir / "operations" and folder.is_dir(), "the holder did not start"
    return folder, process


def make_old(folder: Path, seconds: float = 3600) -> None:
    then = time.time() - seconds
    os.utime(folder, (then, then))


def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL


def gc(capsys: pytest.CaptureFixture[str], repo: Repository, min_age: str) -> list[str]:
    code = main(["gc", "--min-age", min_age, "--repo", str(repo.root)])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    return out.splitlines()


def test_gc_removes_the_folder_of_a_killed_operation_after_min_age(
    repo: Repository, holders: list[subprocess.Popen[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, process = hold_operation(repo, holders)
    owner = json.loads((folder / OWNER_FILE).read_text())
    assert owner["pid"] == process.pid and owner["host"] == socket.gethostname()
    kill(process)
    assert folder.is_dir()  # SIGKILL: nothing of the operation ran its cleanup

    assert gc(capsys, repo, "3600") == ["removed 0 unreferenced objects and folders"]  # too young
    assert folder.is_dir()

    make_old(folder)
    lines = gc(capsys, repo, "3600")
    assert not folder.exists()
    assert lines == [
        f"removed the folder of a dead operation: {folder} (1.0 MB; pid {process.pid} on "
        f"{socket.gethostname()}, started {owner['started']}; its process is gone)",
        "removed 1 unreferenced objects and folders",
    ]
    assert (repo.work_dir / "operations").is_dir()


def test_gc_keeps_the_folders_of_live_operations(
    repo: Repository, holders: list[subprocess.Popen[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Live in another process, or in this one (gc run by the process that works in the folder)."""
    folder, _process = hold_operation(repo, holders)
    make_old(folder)
    with operation_dir(repo.work_dir) as own:
        make_old(own)
        assert gc(capsys, repo, "0") == ["removed 0 unreferenced objects and folders"]
        assert folder.is_dir() and own.is_dir()
    assert not own.exists()  # ended normally: it removed its folder itself


def test_gc_removes_unowned_folders_only_when_old_and_never_the_package_cache(repo: Repository) -> None:
    """A folder without owner record (a version before the records, or killed while making it) is
    dead when older than `--min-age` and a minute; `py-files/` and other names are not operations."""
    operations = repo.work_dir / "operations"
    unowned, fresh = operations / ("a" * 32), operations / ("b" * 32)
    cache, other = operations / "py-files", operations / "notes"
    for path in (unowned, fresh, cache, other):
        path.mkdir(parents=True)
        (path / "file").write_bytes(b"12345")
        make_old(path)
    make_old(fresh, 30)

    removed = collect_operations(repo.work_dir, 0)
    assert [(r.path, r.size, r.owner) for r in removed] == [(unowned, 5, {})]
    assert str(removed[0]) == f"{unowned} (0.0 MB; no owner record; its process is gone)"
    assert fresh.is_dir() and cache.is_dir() and other.is_dir()


def test_without_file_locks_the_owner_record_decides(
    repo: Repository, holders: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file system that refuses locks, a folder of this host whose process is gone is dead; one
    whose process still runs, or one of another host (which cannot be checked here), is kept."""
    alive, _ = hold_operation(repo, holders)
    dead, process = hold_operation(repo, holders)
    kill(process)
    foreign = repo.work_dir / "operations" / ("f" * 32)
    foreign.mkdir()
    record = {"host": "another-host", "pid": os.getpid(), "process_start": process_start(os.getpid())}
    (foreign / OWNER_FILE).write_text(json.dumps(record))
    for folder in (alive, dead, foreign):
        make_old(folder)

    def no_locks(fd: object, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(operation_folders.fcntl, "flock", no_locks)
    assert [r.path for r in collect_operations(repo.work_dir, 60)] == [dead]
    assert alive.is_dir() and foreign.is_dir()


def test_an_operation_folder_appears_owned_and_locked(repo: Repository) -> None:
    """Made under a staging name and renamed: whoever sees the folder sees its locked owner record."""
    with operation_dir(repo.work_dir) as folder:
        assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]
        owner = json.loads((folder / OWNER_FILE).read_text())
        assert owner["pid"] == os.getpid() and owner["process_start"] == process_start(os.getpid())
        with open(folder / OWNER_FILE) as record, pytest.raises(BlockingIOError):
            fcntl.flock(record, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_gc_cleans_the_work_dir_it_is_given(
    repo: Repository, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An Airflow connection's `work_dir` extra is not the repository's default scratch space."""
    elsewhere = tmp_path / "work"
    left = elsewhere / "operations" / ("c" * 32)
    left.mkdir(parents=True)
    make_old(left)
    assert gc(capsys, repo, "0") == ["removed 0 unreferenced objects and folders"]
    code = main(["gc", "--min-age", "0", "--repo", str(repo.root), "--work-dir", str(elsewhere)])
    assert code == 0 and not left.exists()
    assert capsys.readouterr().out.splitlines() == [
        f"removed the folder of a dead operation: {left} (0.0 MB; no owner record; its process is gone)",
        "removed 1 unreferenced objects and folders",
    ]

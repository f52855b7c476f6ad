"""Random tampering of a small real repository, then `odf list`, `log`, `verify --integrity` and `gc`.

The repository (two datasets committed through the core, no Spark) is made once; every example copies
it, applies one to three random edits — truncate, flip a byte, delete, replace with garbage, turn a file
or folder into a folder or a link out of the repository — and runs the commands in process. Whatever the
edits, each command ends with a documented exit code, one line per problem and no traceback or control
character on stderr, touches nothing outside the repository, and `gc` deletes nothing reachable from a
readable head, nor anything of a named dataset whose head cannot be read.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_odf.cli.main import main
from airflow_odf.odf.chain.dataset import block_key
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from tests.fuzz.conftest import Outcomes
from tests.unit.test_tampered_repository import NAME, OTHER, make_repository, tree

EXIT_CODES = {0, 2, 3, 4}
EDITS = ("truncate", "flip", "delete", "garbage", "directory", "link-out", "huge")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("pristine")
    return make_repository(base / "repo", base / "staging").root


def paths_of(root: Path) -> list[str]:
    """Every file and folder of the repository, relative, in a stable order."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def tamper(root: Path, rel: str, edit: str, seed: int, outside: Path) -> None:
    path = root / rel
    if not os.path.lexists(path) or any(p.is_symlink() for p in path.parents if p.is_relative_to(root)):
        return  # gone, or behind a planted link: editing it would edit files outside the repository
    if path.is_symlink() and edit not in ("delete", "directory", "link-out"):
        return  # the same through the link itself
    is_dir = path.is_dir() and not path.is_symlink()
    if edit == "delete" or edit in ("directory", "link-out"):
        shutil.rmtree(path) if is_dir else path.unlink()
    if edit == "directory":
        path.mkdir()
        (path / "inner").write_bytes(b"x")
    elif edit == "link-out":
        path.symlink_to(outside if is_dir else outside / "secret")
    elif is_dir or edit == "delete":
        return
    elif edit == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: seed % (len(data) + 1)])
    elif edit == "flip":
        data = bytearray(path.read_bytes())
        if data:
            data[seed % len(data)] ^= 1 << (seed % 8)
            path.write_bytes(bytes(data))
    elif edit == "garbage":
        path.write_bytes(bytes((seed * 7 + i) % 256 for i in range(seed % 80)) + b"\x1b[31m")
    elif edit == "huge":
        with open(path, "r+b") as f:  # sparse: beyond every cap, costs no disk
            f.truncate(1 << 30)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def protected(repo: Repository) -> dict[str, bytes | str]:
    """What gc must keep: of every named dataset, the objects reachable from a readable head (as far as
    the chain can be followed), or its whole folder when the head cannot be read."""
    keep: dict[str, bytes | str] = {}
    for entry in repo.scan():
        if entry.dataset_id is None:
            continue
        dataset = repo.dataset_by_id(entry.dataset_id)
        folder = Path(str(dataset.store.root))
        whole = (
            {f"{folder.name}/{k}": v for k, v in tree(folder).items()}
            if folder.is_dir() and not folder.is_symlink()
            else {}
        )
        try:
            head = dataset.existing_head()
        except OdfError:
            keep.update(whole)
            continue
        keys = []
        with contextlib.suppress(OdfError):
            for h, block in dataset.iter_blocks(head):
                keys.append(block_key(h))
                event = block.event
                if isinstance(event, model.AddData | model.ExecuteTransform):
                    if event.new_data is not None:
                        keys.append(f"data/{event.new_data.physical_hash}")
                    if event.new_checkpoint is not None:
                        keys.append(f"checkpoints/{event.new_checkpoint.physical_hash}")
        keep.update(
            {f"{folder.name}/{k}": whole[f"{folder.name}/{k}"] for k in keys if f"{folder.name}/{k}" in whole}
        )
    return keep


def check(code: int, err: str) -> None:
    assert code in EXIT_CODES, (code, err)
    assert "Traceback" not in err and "\x1b" not in err, err
    assert (code == 0) == (err == "") or code == 4, (code, err)  # verify's problems go to stdout
    assert all(line.strip() for line in err.splitlines()), err


@given(
    edits=st.lists(
        st.tuples(st.integers(min_value=0), st.sampled_from(EDITS), st.integers(0, 10_000)),
        min_size=1,
        max_size=3,
    )
)
def test_commands_on_a_tampered_repository(
    pristine: Path, edits: list[tuple[int, str, int]], outcomes: Outcomes
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root, outside = Path(scratch) / "repo", Path(scratch) / "outside"
        shutil.copytree(pristine, root, symlinks=True)
        outside.mkdir()
        (outside / "secret").write_text("top secret")
        targets = paths_of(root)
        for index, edit, seed in edits:
            tamper(root, targets[index % len(targets)], edit, seed, outside)
        before_outside = tree(outside)
        commands = (["list"], ["log", NAME], ["log", OTHER], ["verify", NAME, "--integrity"])
        for argv in (*commands, ["verify", OTHER, "--integrity"]):
            code, _, err = run(*argv, "--repo", str(root))
            check(code, err)
            outcomes.record(
                f"tampered repository: odf {argv[0]}", "ok" if code == 0 else f"refused (exit {code})"
            )
        keep = protected(Repository(root))  # also when the marker is gone
        code, _, err = run("gc", "--min-age", "0", "--repo", str(root))
        check(code, err)
        outcomes.record("tampered repository: odf gc", "ok" if code == 0 else f"refused (exit {code})")
        after = {f"{k}": v for k, v in tree(root / "datasets").items()}
        assert {k: after.get(k) for k in keep} == keep
        assert tree(outside) == before_outside

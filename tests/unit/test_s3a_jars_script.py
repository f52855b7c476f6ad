"""`scripts/s3a-jars` with a fake `mvn` on PATH: what it puts in the cache, that a cached set calls no
Maven at all, and the one line it says when Maven is missing or cannot fetch."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from airflow_odf.utils.s3a import HADOOP_VERSION, S3aJarsMissing, s3a_jars
from tests.paths import REPO

SCRIPT = REPO / "scripts" / "s3a-jars"
JARS = ["analyticsaccelerator-s3-1.3.1.jar", "bundle-2.35.4.jar", f"hadoop-aws-{HADOOP_VERSION}.jar"]
# A stand-in for Maven: notes each call, then copies "jars" into -DoutputDirectory (or fails loudly).
FAKE_MVN = """#!/bin/sh
echo "$@" >>"$FAKE_MVN_CALLS"
if [ -n "${FAKE_MVN_FAIL:-}" ]; then
    echo "[ERROR] Failed to execute goal: Could not transfer artifact hadoop-aws"
    echo "[ERROR] Network is unreachable"
    exit 1
fi
for arg in "$@"; do
    case "$arg" in -DoutputDirectory=*) out="${arg#-DoutputDirectory=}" ;; esac
done
mkdir -p "$out"
for jar in $FAKE_MVN_JARS; do echo "jar $jar" >"$out/$jar"; done
"""


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    """A PATH folder with the commands the script uses, and no Maven."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("bash", "env", "sh", "cat", "ls", "mkdir", "mktemp", "mv", "paste", "rm", "sed"):
        found = shutil.which(name)
        assert found is not None, name
        (folder / name).symlink_to(found)
    return folder


def _run(tools: Path, jars_dir: Path, *args: str, fail: bool = False) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": str(tools),
        "HOME": str(jars_dir.parent),
        "ODF_JARS_DIR": str(jars_dir),
        "FAKE_MVN_CALLS": str(jars_dir.parent / "mvn-calls"),
        "FAKE_MVN_JARS": " ".join(JARS),
        **({"FAKE_MVN_FAIL": "1"} if fail else {}),
    }
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def _with_fake_mvn(tools: Path) -> None:
    mvn = tools / "mvn"
    mvn.write_text(FAKE_MVN)
    mvn.chmod(0o755)


def _mvn_calls(jars_dir: Path) -> list[str]:
    calls = jars_dir.parent / "mvn-calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_fetches_once_then_works_offline(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _with_fake_mvn(tools)
    jars_dir = tmp_path / "cache" / "jars"
    first = _run(tools, jars_dir, "--print")
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout.strip() == ",".join(str(jars_dir / jar) for jar in JARS)
    [call] = _mvn_calls(jars_dir)
    assert "dependency:copy-dependencies" in call and "-DincludeScope=runtime" in call
    assert sorted(p.name for p in jars_dir.iterdir()) == sorted(
        [*JARS, f"s3a-jars-{HADOOP_VERSION}.txt", "s3a-jars.log"]
    )  # the work folder is gone
    monkeypatch.setenv("ODF_JARS_DIR", str(jars_dir))
    assert s3a_jars() == [str(jars_dir / jar) for jar in JARS]
    # cached: Maven is not called again, even one that would fail; nothing printed without --print
    again = _run(tools, jars_dir, fail=True)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    assert len(_mvn_calls(jars_dir)) == 1
    # a jar of the list gone: fetched again
    (jars_dir / JARS[1]).unlink()
    assert _run(tools, jars_dir).returncode == 0 and len(_mvn_calls(jars_dir)) == 2
    assert (jars_dir / JARS[1]).is_file()


def test_maven_that_cannot_fetch_is_one_line_naming_its_log(tools: Path, tmp_path: Path) -> None:
    _with_fake_mvn(tools)
    jars_dir = tmp_path / "cache" / "jars"
    result = _run(tools, jars_dir, fail=True)
    log = jars_dir / "s3a-jars.log"
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        f"s3a-jars: Maven could not fetch hadoop-aws {HADOOP_VERSION} and its dependencies into {jars_dir} "
        f"(Maven's output: {log})\n"
    )
    assert "Network is unreachable" in log.read_text()  # Maven's words are in the log, not on stderr
    assert sorted(p.name for p in jars_dir.iterdir()) == ["s3a-jars.log"]  # no jar, no list, no work folder


def test_without_maven_one_line_says_so(tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jars_dir = tmp_path / "cache" / "jars"
    result = _run(tools, jars_dir)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        f"s3a-jars: Maven (mvn) is not installed; it is needed once to fetch hadoop-aws {HADOOP_VERSION} "
        f"into {jars_dir}\n"
    )
    monkeypatch.setenv("ODF_JARS_DIR", str(jars_dir))
    with pytest.raises(S3aJarsMissing) as missing:
        s3a_jars()
    assert str(missing.value) == (
        f"the s3a jars (hadoop-aws {HADOOP_VERSION}) are not in {jars_dir}: run scripts/s3a-jars (in the "
        f"provider's source tree) to fetch them into {jars_dir}"
    )


def test_the_script_and_the_python_side_name_the_same_hadoop_release() -> None:
    assert re.search(r'^hadoop_version="([^"]+)"$', SCRIPT.read_text(), re.M)[1] == HADOOP_VERSION  # type: ignore[index]
    assert os.access(SCRIPT, os.X_OK)

"""The session of docs/schemas.md runs as written (bash, the `odf` command, local Spark) and prints what
the page says it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO

DOC = REPO / "docs" / "schemas.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks() -> tuple[str, str]:
    """The session (the first sh block) and what it prints (the text block after it)."""
    blocks = _BLOCK.findall(DOC.read_text())
    index = next(i for i, (lang, _) in enumerate(blocks) if lang == "sh")
    assert blocks[index + 1][0] == "text"
    return blocks[index][1], blocks[index + 1][1]


def _matches(expected: str, line: str) -> bool:
    """A documented line, where `…` stands for any text (paths, hashes)."""
    pattern = ".*".join(re.escape(part) for part in expected.split("…"))
    return re.fullmatch(pattern, line) is not None


def _in_order(expected: list[str], lines: list[str]) -> list[str]:
    """The expected lines not found, in order, among `lines`."""
    missing, position = [], 0
    for want in expected:
        found = next((i for i in range(position, len(lines)) if _matches(want, lines[i])), None)
        if found is None:
            missing.append(want)
        else:
            position = found + 1
    return missing


def test_the_documented_session_runs_and_prints_what_the_page_shows(tmp_path: Path) -> None:
    session, printed = _blocks()
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ODF_SPARK_MASTER": "local[2]",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("ODF_REPO", None)
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", session],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    stdout = [line for line in proc.stdout.splitlines() if line.strip()]
    expected_out = [line for line in printed.splitlines() if not line.startswith("# ")]
    expected_err = [line[2:] for line in printed.splitlines() if line.startswith("# ")]
    # `odf init` / `odf add` print first; the documented part is the rest, exactly
    assert _in_order(expected_out, stdout) == []
    assert len(stdout) == len(expected_out) + 2, stdout
    assert _in_order(expected_err, proc.stderr.splitlines()) == []

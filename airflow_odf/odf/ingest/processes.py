"""Running an external program (fetch container, Pipe step) with its streams in files.

Output goes straight to files so that large data never passes through Python memory; stderr is kept in
a log file whose tail goes into the error message when the program fails.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

TAIL_CHARS = 2000


def run_to_files(
    argv: Sequence[str],
    *,
    stdout: Path,
    stderr: Path,
    stdin: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run `argv` to completion and return its exit code; raises OSError if it cannot be started."""
    with stdout.open("wb") as out, stderr.open("wb") as err:
        if stdin is None:
            return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env).returncode
        with stdin.open("rb") as source:
            return subprocess.run(argv, stdin=source, stdout=out, stderr=err, env=env).returncode


def log_tail(path: Path, chars: int = TAIL_CHARS) -> str:
    """The last `chars` characters of a log file (what usually explains a failure)."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        f.seek(max(0, size - chars * 4))
        text = f.read().decode("utf-8", errors="replace")
    tail = text[-chars:].strip()
    return ("..." + tail if len(text) > chars else tail) or "(empty)"

"""The prepare steps of polling ingestion: turn a fetched file into the file the read step expects.

Each step reads the previous file and writes a new one in `work_dir`, streaming, so archives larger
than memory are fine. `Pipe` runs an arbitrary command on the coordinator, so it is refused unless the
caller enables shell steps (the ingest layer does so when its `SourceTrust` allows them).
"""

from __future__ import annotations

import gzip
import re
import shlex
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.model import CompressionFormat, PrepStep, PrepStepDecompress, PrepStepPipe
from airflow_odf.odf.ingest.processes import log_tail, run_to_files
from airflow_odf.odf.ingest.trust import SHELL_STEPS_HINT

_COPY_BUFFER = 1024 * 1024
_GLOB_CHARS = re.compile(r"[*?\[]")
_UNSAFE_ENTRY = re.compile(r"^[/\\]|^[A-Za-z]:|(^|[/\\])\.\.([/\\]|$)")


class PrepareError(OdfError):
    """A prepare step failed or is not allowed; the message names the step and the file."""


def prepare(steps: Sequence[PrepStep], source: Path, work_dir: Path, *, allow_shell: bool = False) -> Path:
    """Run `steps` in order on `source`; returns the last file written (`source` itself if no steps)."""
    current = source
    for index, step in enumerate(steps):
        where = f"prepare[{index}]"
        if not current.is_file():
            raise PrepareError(f"{where}: input file {current} does not exist")
        work_dir.mkdir(parents=True, exist_ok=True)
        if isinstance(step, PrepStepDecompress) and step.format == CompressionFormat.GZIP:
            current = _gunzip(current, _new_file(work_dir, index, "gunzip"), where)
        elif isinstance(step, PrepStepDecompress) and step.format == CompressionFormat.ZIP:
            current = _unzip(current, step.sub_path, _new_file(work_dir, index, "unzip"), where)
        elif isinstance(step, PrepStepPipe):
            current = _pipe(step.command, current, work_dir, index, where, allow_shell)
        else:
            raise PrepareError(f"{where}: unsupported prepare step {step!r}; expected Decompress or Pipe")
    return current


def _new_file(work_dir: Path, index: int, label: str) -> Path:
    with tempfile.NamedTemporaryFile(dir=work_dir, prefix=f"prepare-{index}-{label}-", delete=False) as f:
        return Path(f.name)


def _gunzip(source: Path, target: Path, where: str) -> Path:
    try:
        with gzip.open(source, "rb") as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, _COPY_BUFFER)
    except (OSError, EOFError, zlib.error) as e:
        target.unlink(missing_ok=True)
        raise PrepareError(f"{where}: {source} is not a valid gzip file: {e}; expected Gzip data") from None
    return target


def _unzip(source: Path, sub_path: str | None, target: Path, where: str) -> Path:
    try:
        with zipfile.ZipFile(source) as archive:
            entry = _zip_entry(archive, sub_path, source, where)
            with archive.open(entry) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst, _COPY_BUFFER)
    except PrepareError:
        target.unlink(missing_ok=True)
        raise
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, RuntimeError, NotImplementedError) as e:
        target.unlink(missing_ok=True)
        raise PrepareError(
            f"{where}: cannot extract from {source}: {e}; expected a readable Zip archive"
        ) from None
    return target


def _zip_entry(archive: zipfile.ZipFile, sub_path: str | None, source: Path, where: str) -> zipfile.ZipInfo:
    """`subPath` as an exact entry name, else as a glob pattern; without it the first file entry."""
    files = [info for info in archive.infolist() if not info.is_dir()]
    if sub_path is None:
        if not files:
            raise PrepareError(f"{where}: archive {source} has no file entries; expected at least one")
        chosen = files[0]
    else:
        exact = [info for info in files if info.filename == sub_path]
        pattern = [info for info in files if fnmatchcase(info.filename, sub_path)]
        matches = exact or (pattern if _GLOB_CHARS.search(sub_path) else [])
        if not matches:
            names = ", ".join(info.filename for info in files[:10]) or "none"
            raise PrepareError(
                f"{where}.subPath: no entry of {source} matches {sub_path!r}; entries: {names}"
                + (" ..." if len(files) > 10 else "")
            )
        chosen = matches[0]
    if _UNSAFE_ENTRY.search(chosen.filename):
        raise PrepareError(
            f"{where}.subPath: refusing entry {chosen.filename!r} of {source}: "
            "expected a relative name without '..'"
        )
    return chosen


def _pipe(
    command: list[str], source: Path, work_dir: Path, index: int, where: str, allow_shell: bool
) -> Path:
    if not allow_shell:
        raise PrepareError(
            f"{where}: Pipe step {shlex.join(command)!r} is disabled: shell steps run arbitrary commands "
            f"on the coordinator. For manifests you trust, enable them with {SHELL_STEPS_HINT} "
            "(allow_shell=True when calling prepare())"
        )
    if not command:
        raise PrepareError(f"{where}.command: is empty; expected a program and its arguments")
    target = _new_file(work_dir, index, "pipe")
    stderr = target.with_name(target.name + ".stderr.log")
    try:
        code = run_to_files(command, stdin=source, stdout=target, stderr=stderr)
    except OSError as e:
        target.unlink(missing_ok=True)
        raise PrepareError(f"{where}.command: cannot run {command[0]!r}: {e.strerror}") from None
    if code != 0:
        target.unlink(missing_ok=True)
        raise PrepareError(
            f"{where}: command {shlex.join(command)!r} exited with code {code} on {source}; expected 0. "
            f"Its stderr (full log {stderr}):\n{log_tail(stderr)}"
        )
    return target

"""Local sources (`file://` URLs, FilesGlob) confined to the directories the deployment allows.

A manifest could otherwise read any file the worker can (`file:///etc/shadow`, `/proc/self/environ`)
and ingest it. The check is on the real path of each file actually read, so neither a symlink (the
file's or a parent's) nor a `..` leads out; a glob is refused before it lists a directory outside.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path, PurePath

from airflow_odf.odf.ingest.fetch.types import FetchError, FetchOptions
from airflow_odf.odf.ingest.trust import LOCAL_SOURCE_DIRS_HINT


def confine(path: Path, options: FetchOptions, where: str) -> Path:
    """The real path of `path` if it lies in an allowed directory; `FetchError` naming it otherwise."""
    _refuse_dot_dot(path, where)
    roots = options.trust.source_roots(options.base_dir)
    real = Path(os.path.realpath(path))
    if not any(real.is_relative_to(root) for root in roots):
        resolved = "" if real == Path(os.path.abspath(path)) else f" (resolves to {real})"
        raise FetchError(f"{where}: {path}{resolved} is {_outside(roots)}")
    return real


def list_glob(pattern: str, options: FetchOptions, where: str) -> list[tuple[Path, Path]]:
    """`(match, real path)` of the regular files matching `pattern` (relative to `base_dir`), each in
    an allowed directory; the part before the first wildcard must be in one before anything is listed."""
    if options.base_dir is not None and not os.path.isabs(pattern):
        pattern = os.path.join(options.base_dir, pattern)
    _refuse_dot_dot(PurePath(pattern), where)
    parts = PurePath(os.path.abspath(pattern)).parts
    fixed = next((i for i, part in enumerate(parts) if glob.has_magic(part)), len(parts))
    confine(Path(*parts[: max(fixed, 1)]), options, where)
    matches = [Path(p) for p in glob.glob(pattern, recursive=True)]
    return [(p, confine(p, options, where)) for p in matches if p.is_file()]


def _refuse_dot_dot(path: PurePath, where: str) -> None:
    if ".." in path.parts:
        raise FetchError(f"{where}: {path} contains '..'; expected a path without parent references")


def _outside(roots: tuple[Path, ...]) -> str:
    shown = ", ".join(str(root) for root in roots)
    return (
        f"outside the directories local sources may read ({shown}); "
        f"allow its directory with {LOCAL_SOURCE_DIRS_HINT}"
    )

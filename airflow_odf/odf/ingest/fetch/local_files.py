"""Local sources (`file://` URLs, FilesGlob) confined to the directories the deployment allows.

A manifest could otherwise read any file the worker can (`file:///etc/shadow`, `/proc/self/environ`)
and ingest it. The check is on the real path of each file actually read, so neither a symlink (the
file's or a parent's) nor a `..` leads out; a glob is refused before it lists a directory outside.

Globs are matched by our own walk rather than `glob.glob`: the standard one follows directory links
under `**`, so a link loop (`sub/up -> ..`) made `**/**/*.csv` list an exponential number of paths. Here
`**` never enters a linked directory and each (directory, pattern part) is visited once.
"""

from __future__ import annotations

import fnmatch
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
    """`(match, real path)` of the regular files matching `pattern` (relative: to the source directory,
    `SourceTrust.source_directory`, never simply the working directory), each in an allowed directory;
    the part before the first wildcard must be in one before anything is listed."""
    if not os.path.isabs(pattern):
        pattern = os.path.join(options.trust.source_directory(options.base_dir), pattern)
    _refuse_dot_dot(PurePath(pattern), where)
    parts = PurePath(os.path.abspath(pattern)).parts
    fixed = next((i for i, part in enumerate(parts) if glob.has_magic(part)), len(parts))
    confine(Path(*parts[: max(fixed, 1)]), options, where)
    top, rest = Path(*parts[:fixed]), parts[fixed:]
    matches = _walk(top, rest, options, where) if rest else [top] if top.is_file() else []
    return [(p, confine(p, options, where)) for p in matches]


def _walk(top: Path, parts: tuple[str, ...], options: FetchOptions, where: str) -> list[Path]:
    """The regular files under `top` matching `parts`, as `glob` matches them (`*`, `?` and `[...]`
    within a name, not matching a leading dot; `**` for any number of directories), except that `**`
    does not enter linked directories. Every directory listed must lie in an allowed directory."""
    found: dict[Path, None] = {}
    seen: set[tuple[Path, int]] = set()
    pending = [(top, 0)]
    while pending:
        directory, index = pending.pop()
        if (directory, index) in seen:
            continue
        seen.add((directory, index))
        part, last = parts[index], index == len(parts) - 1
        if part == "**":
            if not last:
                pending.append((directory, index + 1))
            for entry in _listing(directory, options, where):
                if entry.name.startswith("."):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append((Path(entry.path), index))
                elif last and entry.is_file():
                    found[Path(entry.path)] = None
            continue
        if glob.has_magic(part):
            hidden = part.startswith(".")
            candidates = [
                Path(e.path)
                for e in _listing(directory, options, where)
                if fnmatch.fnmatchcase(e.name, part) and (hidden or not e.name.startswith("."))
            ]
        else:
            candidates = [directory / part]
        for candidate in candidates:
            if last and candidate.is_file():
                found[candidate] = None
            elif not last and candidate.is_dir():
                pending.append((candidate, index + 1))
    return list(found)


def _listing(directory: Path, options: FetchOptions, where: str) -> list[os.DirEntry[str]]:
    """The entries of `directory`, after checking it lies in an allowed directory (it may have been
    reached through a link); an unreadable directory lists as empty, as for `glob`."""
    confine(directory, options, where)
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError:
        return []


def _refuse_dot_dot(path: PurePath, where: str) -> None:
    if ".." in path.parts:
        raise FetchError(f"{where}: {path} contains '..'; expected a path without parent references")


def _outside(roots: tuple[Path, ...]) -> str:
    shown = ", ".join(str(root) for root in roots)
    return (
        f"outside the directories local sources may read ({shown}); "
        f"allow its directory with {LOCAL_SOURCE_DIRS_HINT}"
    )

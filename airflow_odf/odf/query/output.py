"""Query results as people and tasks take them: rows printed as a table, CSV or JSON, rows for XCom,
and the engine's result files placed where they were asked for (never half-written there)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa

from airflow_odf.odf.errors import OdfError

PRINT_FORMATS = ("table", "csv", "json")


class OutputExistsError(OdfError):
    """The asked output path holds something and overwriting was not asked for."""


def plain_rows(table: pa.Table) -> list[dict[str, Any]]:
    """The rows as JSON values (timestamps, decimals and bytes as text), for `--format json` and XCom."""
    return json.loads(json.dumps(table.to_pylist(), default=str, ensure_ascii=False))


def write_rows(table: pa.Table, fmt: str, out: TextIO) -> None:
    """Writes the rows to `out` as an aligned text table, CSV (with a header) or a JSON array."""
    rows = table.to_pylist()
    names = table.column_names
    if fmt == "json":
        print(json.dumps(rows, indent=2, default=str, ensure_ascii=False), file=out)
        return
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([["" if r[c] is None else r[c] for c in names] for r in rows])
        return
    cells = [names, *[["" if r[c] is None else str(r[c]) for c in names] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(names))]
    for row in cells:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out)


def require_free(path: Path, *, force: bool, forbidden: Path | None = None) -> None:
    """Refuses an output path that holds a file or a non-empty folder unless `force`, and always one that
    is or holds `forbidden` (the repository)."""
    target = path.resolve()
    if forbidden is not None:
        inside = forbidden.resolve()
        if target == inside or target in inside.parents or inside in target.parents:
            raise OutputExistsError(f"{path}: refusing to write into or over the repository ({forbidden})")
    if force or not os.path.lexists(path):
        return
    if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
        return
    raise OutputExistsError(f"{path} exists and is not empty: give --force to overwrite it")


def place_file(source: str, path: Path) -> Path:
    """Moves a result file to `path` (replacing what is there): first beside it, then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        shutil.move(source, temporary)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def place_folder(sources: list[str], path: Path, suffix: str) -> list[Path]:
    """Moves result files, in order, into the folder `path` as `part-00000.<suffix>`, ... (replacing what
    is there): the folder is filled beside it, then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    temporary.mkdir()
    try:
        names = [f"part-{i:05d}.{suffix}" for i in range(len(sources))]
        for source, name in zip(sources, names, strict=True):
            shutil.move(source, temporary / name)
        if os.path.lexists(path):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        os.replace(temporary, path)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return [path / name for name in names]

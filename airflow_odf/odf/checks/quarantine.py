"""Rejected slices kept for inspection: `<work dir>/rejected/<operation id>/` holds the slice files a
failed check kept from being committed (`data/`) and `results.json` (dataset, head it was checked
against, when, the checks' results). `odf inspect rejected` lists and shows them; `odf gc` removes
those older than its `--min-age`, as it does the folders of dead operations.

The folder is complete once `results.json` is there (written last, by rename): a folder without it is a
keep that was cut short, and only gc sees it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_odf.odf.checks.results import CheckResult

REJECTED_DIR = "rejected"
RESULTS_FILE = "results.json"
_FOLDER_NAME = re.compile(r"[0-9a-f]{32}")
MAX_RESULTS_BYTES = 1024 * 1024


@dataclass(frozen=True)
class RejectedSlice:
    """A kept rejected slice: its folder, what `results.json` says, and the slice files."""

    path: Path
    dataset: str
    dataset_id: str
    head: str | None
    rejected_at: str
    records: int
    results: list[CheckResult]
    files: list[Path]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.path.name,
            "path": str(self.path),
            "dataset": self.dataset,
            "dataset_id": self.dataset_id,
            "head": self.head,
            "rejected_at": self.rejected_at,
            "records": self.records,
            "files": [str(f) for f in self.files],
            "checks": [r.as_dict() for r in self.results],
        }


def keep_rejected(
    work_dir: Path,
    operation_id: str,
    *,
    dataset: str,
    dataset_id: str,
    head: str | None,
    records: int,
    results: list[CheckResult],
    fetch: Callable[[Path], list[Path]],
) -> Path:
    """Keeps a rejected slice: `fetch(data_dir)` puts its files in `data_dir` (moved or downloaded);
    `results.json` follows. Returns the folder."""
    folder = work_dir / REJECTED_DIR / operation_id
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    fetch(data)
    plain = {
        "dataset": dataset,
        "dataset_id": dataset_id,
        "head": head,
        "rejected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "records": records,
        "checks": [r.as_dict() for r in results],
    }
    partial = folder / f".{RESULTS_FILE}.tmp"
    partial.write_text(json.dumps(plain, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    os.replace(partial, folder / RESULTS_FILE)
    return folder


def _read(folder: Path) -> RejectedSlice | None:
    """The kept slice of `folder`, or None when it is not one (cut short, damaged, too large)."""
    results = folder / RESULTS_FILE
    try:
        if results.stat().st_size > MAX_RESULTS_BYTES:
            return None
        plain = json.loads(results.read_text(encoding="utf-8"))
        files = sorted(p for p in (folder / "data").iterdir() if p.is_file())
        return RejectedSlice(
            folder,
            str(plain["dataset"]),
            str(plain["dataset_id"]),
            plain.get("head"),
            str(plain["rejected_at"]),
            int(plain.get("records") or 0),
            [CheckResult.from_dict(r) for r in plain["checks"]],
            files,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _folders(work_dir: Path) -> list[Path]:
    root = work_dir / REJECTED_DIR
    if not root.is_dir() or root.is_symlink():
        return []
    return sorted(
        p for p in root.iterdir() if _FOLDER_NAME.fullmatch(p.name) and p.is_dir() and not p.is_symlink()
    )


def list_rejected(work_dir: Path, dataset: str | None = None) -> list[RejectedSlice]:
    """The kept rejected slices (of `dataset`, a name or DID, when given), oldest first."""
    kept = [r for r in map(_read, _folders(work_dir)) if r is not None]
    if dataset is not None:
        kept = [r for r in kept if dataset in (r.dataset, r.dataset_id)]
    return sorted(kept, key=lambda r: (r.rejected_at, r.path.name))


def find_rejected(work_dir: Path, ident: str) -> RejectedSlice | None:
    """The kept slice whose id (its folder's name) is or starts with `ident`, if exactly one is."""
    found = [r for r in list_rejected(work_dir) if r.path.name.startswith(ident)]
    return found[0] if len(found) == 1 else None


def collect_rejected(work_dir: Path, min_age_seconds: float) -> list[Path]:
    """Removes the kept slices older than `min_age_seconds`; returns their folders."""
    now = time.time()
    removed = []
    for folder in _folders(work_dir):
        try:
            if now - folder.stat().st_mtime < min_age_seconds:
                continue
            shutil.rmtree(folder)
        except FileNotFoundError:
            continue
        removed.append(folder)
    return removed

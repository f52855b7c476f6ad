"""Locations of the shared reference material (../shared beside the repository, or $ODF_SHARED_DIR)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ODF_SHARED_DIR", REPO.parent / "shared"))
CONFORMANCE_BLOCKS = SHARED / "conformance" / "blocks"
UPSTREAM = SHARED / "reference" / "upstream"


def upstream_manifests() -> list[Path]:
    """Every real DatasetSnapshot manifest shipped with the reference material."""
    return sorted([*UPSTREAM.glob("kamu-cli/examples/**/*.yaml"), *UPSTREAM.glob("kamu-contrib/**/*.yaml")])

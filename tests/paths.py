"""Locations of the shared reference material (../shared beside the repository), read at test time."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CONFORMANCE_BLOCKS = SHARED / "conformance" / "blocks"
UPSTREAM = SHARED / "reference" / "upstream"


def upstream_manifests() -> list[Path]:
    """Every real DatasetSnapshot manifest shipped with the reference material."""
    return sorted([*UPSTREAM.glob("kamu-cli/examples/**/*.yaml"), *UPSTREAM.glob("kamu-contrib/**/*.yaml")])

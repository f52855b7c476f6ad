"""The repository's block vectors (data/blocks) are still the shared folder's conformance/blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.paths import CONFORMANCE_BLOCKS, HOW_TO_GET_SHARED, SHARED_BLOCKS


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.skipif(
    not SHARED_BLOCKS.is_dir(),
    reason=f"nothing to compare the repository's block vectors with: {SHARED_BLOCKS} is missing"
    f" ({HOW_TO_GET_SHARED})",
)
def test_repository_copy_equals_the_shared_vectors() -> None:
    ours, shared = _files(CONFORMANCE_BLOCKS), _files(SHARED_BLOCKS)
    refresh = f"copy {SHARED_BLOCKS} again into {CONFORMANCE_BLOCKS}"
    assert sorted(ours) == sorted(shared), refresh
    assert [name for name in sorted(ours) if ours[name] != shared[name]] == [], refresh

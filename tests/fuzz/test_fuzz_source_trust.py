"""Hostile source manifests, generated: Container images that could become runtime options, glob
patterns and file:// paths that could leave the allowed directory. Each is accepted safely or refused
with one FetchError; none reads outside, none reaches the runtime as an option."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_odf.odf.format.model import FetchStepContainer, FetchStepFilesGlob, FetchStepUrl
from airflow_odf.odf.ingest.fetch.container import MAX_IMAGE_CHARS, ContainerSource
from airflow_odf.odf.ingest.fetch.fetcher import FetchError, FetchOptions, SourceFetcher
from airflow_odf.odf.ingest.trust import SourceTrust
from tests.fuzz.conftest import Outcomes
from tests.unit.test_fetch import SYSTEM_TIME

_IMAGE_PIECES = st.sampled_from(
    ["-", "--", "privileged", "/", ":", "@", "sha256", "a" * 64, " ", "\n", ".", "_"]
)
IMAGES = st.one_of(st.text(max_size=80), st.lists(_IMAGE_PIECES, max_size=12).map("".join))


@given(image=IMAGES)
def test_an_image_never_becomes_a_runtime_option(
    image: str, outcomes: Outcomes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    options = FetchOptions(
        cache_dir=tmp_path_factory.getbasetemp() / "cache", trust=SourceTrust(allow_container_sources=True)
    )
    try:
        ContainerSource(FetchStepContainer(image=image), options)
    except FetchError as e:
        assert str(e).startswith("fetch.image: ") and "is not an image reference" in str(e)
        outcomes.record("container image", "refused")
        return
    assert image and not image.startswith("-") and len(image) <= MAX_IMAGE_CHARS
    assert not any(c.isspace() or c == "=" for c in image)
    outcomes.record("container image", "accepted")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`base/allowed` (files, a subdirectory, symlinks out) next to `base/secret` (files not to read)."""
    base = tmp_path_factory.mktemp("tree")
    allowed, secret = base / "allowed", base / "secret"
    (allowed / "sub").mkdir(parents=True)
    secret.mkdir()
    for directory in (allowed, allowed / "sub", secret):
        (directory / "a.csv").write_text("x\n")
    (allowed / "out.csv").symlink_to(secret / "a.csv")
    (allowed / "out-dir").symlink_to(secret)
    (allowed / "sub" / "up").symlink_to(base)
    return allowed


_SEGMENTS = st.sampled_from(
    ["..", ".", "*", "**", "a.csv", "sub", "out.csv", "out-dir", "up", "secret", "*.csv", "?"]
)
PATTERNS = st.lists(_SEGMENTS, min_size=1, max_size=6).map("/".join)


@given(pattern=PATTERNS, absolute=st.booleans())
def test_a_glob_reads_only_inside(tree: Path, pattern: str, absolute: bool, outcomes: Outcomes) -> None:
    options = FetchOptions(cache_dir=tree.parent / "cache", base_dir=tree, files_per_batch=100)
    path = f"{tree.parent}/{pattern}" if absolute else pattern
    try:
        files = SourceFetcher(FetchStepFilesGlob(path=path), options).fetch(None, SYSTEM_TIME).files
    except FetchError as e:
        assert str(e).startswith("fetch.path: ")
        outcomes.record("glob pattern", "refused")
        return
    assert all(Path(os.path.realpath(f.path)).is_relative_to(tree) for f in files)
    outcomes.record("glob pattern", "accepted")


@given(pattern=PATTERNS)
def test_a_file_url_reads_only_inside(tree: Path, pattern: str, outcomes: Outcomes) -> None:
    options = FetchOptions(cache_dir=tree.parent / "cache", base_dir=tree)
    try:
        files = (
            SourceFetcher(FetchStepUrl(url=f"file://{tree}/{pattern}"), options)
            .fetch(None, SYSTEM_TIME)
            .files
        )
    except FetchError as e:
        assert str(e).startswith("fetch.url: ")
        outcomes.record("file url", "refused")
        return
    assert all(Path(os.path.realpath(f.path)).is_relative_to(tree) for f in files)
    outcomes.record("file url", "accepted")

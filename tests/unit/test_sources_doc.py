"""docs/sources.md stays true: its manifests load and make valid sources, its Python example runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_odf.odf.format.manifests import load_manifests
from airflow_odf.odf.format.model import SetPollingSource
from airflow_odf.odf.ingest.fetch.fetcher import FetchOptions, SourceFetcher
from airflow_odf.odf.ingest.trust import SourceTrust
from tests.paths import REPO

DOC = REPO / "docs" / "sources.md"
_BLOCK = re.compile(r"^```(yaml|python)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[str]:
    return [body for lang, body in _BLOCK.findall(DOC.read_text()) if lang == language]


@pytest.mark.parametrize("text", [b for b in blocks("yaml") if b.startswith("kind: DatasetSnapshot")])
def test_doc_manifests_make_valid_sources(text: str, tmp_path: Path) -> None:
    [manifest] = load_manifests(text, str(DOC))
    sources = [e for e in manifest.content.metadata if isinstance(e, SetPollingSource)]
    assert sources
    for source in sources:
        trust = SourceTrust(allow_container_sources=True)  # the Container example needs them on
        SourceFetcher(source.fetch, FetchOptions(cache_dir=tmp_path, trust=trust))


def test_doc_python_example_runs() -> None:
    [example] = blocks("python")
    exec(compile(example, str(DOC), "exec"), {})

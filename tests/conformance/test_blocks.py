"""Byte-exact block vectors of the reference implementation (the repository's copy in data/blocks)."""

from __future__ import annotations

import json

import pytest

from airflow_odf.odf.format.flatbuffers_codec import block_hash, decode_block, encode_block
from airflow_odf.odf.format.manifests import dump_manifest, load_manifests, read_single
from tests.paths import CONFORMANCE_BLOCKS

CASES = json.loads((CONFORMANCE_BLOCKS / "cases.json").read_text())


def test_vectors_are_present() -> None:
    assert len(CASES) >= 7


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_encode_gives_reference_bytes_and_hash(case: dict) -> None:
    block = read_single(CONFORMANCE_BLOCKS / case["manifest"], "MetadataBlock")
    data = encode_block(block)
    expected = (CONFORMANCE_BLOCKS / f"{case['name']}.v3.bin").read_bytes()
    assert len(data) == case["size_v3"]
    assert data == expected
    assert str(block_hash(data)) == case["block_hash_v3"]


@pytest.mark.parametrize("version", ["v3", "v2"])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decode_gives_back_the_manifest_block(case: dict, version: str) -> None:
    data = (CONFORMANCE_BLOCKS / f"{case['name']}.{version}.bin").read_bytes()
    assert len(data) == case[f"size_{version}"]
    assert str(block_hash(data)) == case[f"block_hash_{version}"]
    block = read_single(CONFORMANCE_BLOCKS / case["manifest"], "MetadataBlock")
    assert decode_block(data) == block


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_yaml_round_trip_keeps_the_hash(case: dict) -> None:
    block = read_single(CONFORMANCE_BLOCKS / case["manifest"], "MetadataBlock")
    again = load_manifests(dump_manifest(block))[0].content
    assert again == block
    assert str(block_hash(encode_block(again))) == case["block_hash_v3"]

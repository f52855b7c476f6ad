"""Every real DatasetSnapshot manifest of the reference material validates and round-trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import decode_table, encode_table
from airflow_odf.odf.format.manifests import dump_manifest, load_manifests, read_manifests
from tests.paths import UPSTREAM, needs_upstream, upstream_manifests

pytestmark = needs_upstream
FILES = upstream_manifests()


def test_all_upstream_manifests_are_found() -> None:
    assert len(FILES) >= 23


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(UPSTREAM)) for p in FILES])
def test_manifest_validates_and_round_trips(path: Path) -> None:
    manifests = read_manifests(path)
    assert manifests and all(m.kind == "DatasetSnapshot" for m in manifests)
    for m in manifests:
        snapshot = m.content
        assert isinstance(snapshot, model.DatasetSnapshot)
        text = dump_manifest(snapshot)
        again = load_manifests(text)[0].content
        assert again == snapshot
        assert dump_manifest(again) == text  # canonical writing is a fixed point
        for event in snapshot.metadata:
            data = encode_table(event)
            assert decode_table(data, type(event)) == event
            assert encode_table(decode_table(data, type(event))) == data


def test_known_shapes_are_read_as_the_reference_reads_them() -> None:
    leaderboard = read_manifests(UPSTREAM / "kamu-cli/examples/leaderboard/player-scores.yaml")[0].content
    push = leaderboard.metadata[0]
    assert isinstance(push, model.AddPushSource)
    assert isinstance(push.read, model.ReadStepNdJson)
    assert push.read.schema is not None
    first = push.read.schema.fields[0]
    assert (first.name, first.type) == ("match_time", model.DataTypeTimestamp())  # short form, no defaults
    assert push.merge == model.MergeStrategyLedger(primary_key=["match_id", "player_id"])
    assert leaderboard.metadata[1] == model.SetVocab(event_time_column="match_time")

    countries = read_manifests(UPSTREAM / "kamu-contrib/com.naturalearthdata/admin0/countries/10m.yaml")[
        0
    ].content
    source = countries.metadata[0]
    assert isinstance(source.merge, model.MergeStrategySnapshot)  # `kind: snapshot`, lowercase
    assert source.merge.primary_key == ["iso_a2"]

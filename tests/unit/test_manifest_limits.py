"""Hostile manifests: each is one clear ManifestError (never a traceback), in bounded time and memory.

Checked through `load_manifests` and through `odf snapshot validate` in-process: exit code 2, one line
on stderr naming the file, nothing on stdout.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_odf.cli.errors import EXIT_BAD_INPUT
from airflow_odf.cli.main import main
from airflow_odf.odf.errors import ManifestError
from airflow_odf.odf.format.flatbuffers_codec import decode_block, encode_block
from airflow_odf.odf.format.manifests import MAX_YAML_DEPTH, load_manifests
from airflow_odf.odf.limits import MAX_MANIFEST_BYTES_ENV


def snapshot(name: str = "my.data", events: str = "  - kind: SetInfo\n    description: x\n") -> str:
    return f"kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: {name}\n  kind: Root\n  metadata:\n{events}"


def extra(value: str) -> str:
    """A snapshot with a SetDataSchema whose schema's `extra` is `value` (flow YAML)."""
    return snapshot(events=f"  - kind: SetDataSchema\n    schema:\n      fields: []\n      extra: {value}\n")


def transform(engine: str) -> str:
    event = (
        "  - kind: SetTransform\n    inputs: [{datasetRef: a}]\n"
        f"    transform: {{kind: Sql, engine: {engine}, query: SELECT 1}}\n"
    )
    return snapshot(events=event).replace("kind: Root", "kind: Derivative")


def _laughs(levels: int, width: int) -> str:
    lines = ["l0: &l0 xxxxxxxxxx"] + [
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels + 1)
    ]
    return "{" + ", ".join(lines) + "}"


HOSTILE = [
    pytest.param(
        extra("{a: " + "9" * 5_000 + "}"),
        "line 10, column 18: invalid YAML: integer of 5000 characters is out of range (at most 64)",
        id="integer-of-5000-digits",
    ),
    pytest.param(
        extra("{a: 0x" + "f" * 5_000 + "}"),
        "integer of 5002 characters is out of range",
        id="hex-integer-of-5000-digits",
    ),
    pytest.param(
        extra("&a {x: *a}"),
        "invalid YAML: alias *a refers to a node that contains it",
        id="self-referencing-anchor",
    ),
    pytest.param(
        extra("{a: " + "[" * 5_000 + "]" * 5_000 + "}"),
        f"invalid YAML: nested deeper than {MAX_YAML_DEPTH} levels",
        id="5000-nested-lists",
    ),
    pytest.param(
        extra(_laughs(9, 10)),
        "invalid YAML: aliases expand the text beyond",
        id="billion-laughs",
    ),
    pytest.param(
        snapshot().replace("kind: SetInfo", "kind: SetInfo\n    keywords: [&k " + "k" * 2_000 + "]")
        + "  - {kind: SetInfo, keywords: ["
        + ", ".join(["*k"] * 200)
        + "]}\n",
        "invalid YAML: aliases expand the text beyond",
        id="long-string-aliased-many-times",
    ),
    pytest.param(
        snapshot(events="  - kind: SetInfo\n    description: x\n")
        .replace("kind: DatasetSnapshot", "kind: MetadataBlock")
        .replace("version: 1", "version: 3")
        .replace(
            "  name: my.data\n  kind: Root\n  metadata:\n  - kind: SetInfo\n    description: x\n",
            "  systemTime: '9999-12-31T23:59:59-23:59'\n  sequenceNumber: 0\n  event: {kind: SetInfo}\n",
        ),
        "content.systemTime: expected an RFC 3339 time such as 2024-01-31T12:00:00Z: "
        "'9999-12-31T23:59:59-23:59' is outside the years 0001 to 9999 once moved to UTC",
        id="timestamp-offset-overflow",
    ),
    pytest.param(
        snapshot(name="a" * 300),
        f"content.name: {'a' * 60!r}… (300 characters) is too long for a dataset name "
        "(at most 200 characters)",
        id="300-character-name",
    ),
    pytest.param(
        snapshot(name="acme/my.data"),
        "content.name: 'acme/my.data' is not a valid dataset name (letters, digits and inner '-', parts "
        "separated by '.'; an account prefix such as 'acme/' is not supported)",
        id="account-prefixed-name",
    ),
    pytest.param(
        transform("sparkk"),
        "content.metadata[0].transform.engine: unknown SQL engine 'sparkk'; "
        "expected datafusion, flink, risingwave, spark",
        id="unknown-sql-engine",
    ),
]


@pytest.mark.parametrize(("text", "message"), HOSTILE)
def test_hostile_manifest_is_one_clear_problem(text: str, message: str, tmp_path: Path, capsys) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifests(text, "m.yaml")
    assert len(info.value.problems) == 1, str(info.value)
    assert message in str(info.value)
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["snapshot", "validate", str(path)]) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"{path}: ") and message in err, err
    assert "Traceback" not in err


def test_a_hash_in_base58_of_400_kb_is_refused_unread() -> None:
    text = (
        "kind: MetadataBlock\nversion: 3\ncontent:\n  systemTime: '2024-01-01T00:00:00Z'\n"
        f"  prevBlockHash: z{'2' * 400_000}\n  sequenceNumber: 1\n  event: {{kind: SetInfo}}\n"
    )
    with pytest.raises(ManifestError) as info:
        load_manifests(text, "m.yaml")
    assert str(info.value) == (
        "m.yaml: content.prevBlockHash: expected a multihash such as f1620<64 hex digits>: "
        "multibase text of 400001 characters is longer than the 256 allowed"
    )


def test_a_manifest_larger_than_the_limit_is_refused_unread(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    monkeypatch.setenv(MAX_MANIFEST_BYTES_ENV, "1000")
    text = snapshot(events="  - kind: SetInfo\n    description: " + "x" * 2_000 + "\n")
    with pytest.raises(ManifestError) as info:
        load_manifests(text, "m.yaml")
    assert (
        str(info.value) == "m.yaml: larger than the 1000 bytes a manifest may have (ODF_MAX_MANIFEST_BYTES)"
    )
    path = tmp_path / "big.yaml"
    path.write_text(text + "#" * 10_000_000, encoding="utf-8")
    assert main(["snapshot", "validate", str(path)]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == (
        f"{path}: larger than the 1000 bytes a manifest may have (ODF_MAX_MANIFEST_BYTES)\n"
    )


def test_anchors_used_as_people_use_them_still_work() -> None:
    columns = "[" + ", ".join(f"{{name: c{i}, type: String}}" for i in range(20)) + "]"
    events = f"  - kind: SetDataSchema\n    schema: {{fields: &columns {columns}}}\n" + "".join(
        "  - {kind: SetDataSchema, schema: {fields: *columns}}\n" for _ in range(10)
    )
    (m,) = load_manifests(snapshot(events=events))
    assert [len(e.schema.fields) for e in m.content.metadata] == [20] * 11


def test_nesting_just_under_the_depth_limit_is_read_encoded_and_decoded() -> None:
    depth = MAX_YAML_DEPTH - 12  # the levels of the manifest around `extra`
    nested = "[" * depth + "]" * depth
    text = (
        "kind: MetadataBlock\nversion: 3\ncontent:\n  systemTime: '2024-01-01T00:00:00Z'\n"
        "  sequenceNumber: 1\n  event:\n    kind: SetDataSchema\n"
        f"    schema: {{fields: [], extra: {{a: {nested}}}}}\n"
    )
    (m,) = load_manifests(text)
    assert decode_block(encode_block(m.content)) == m.content


def test_a_line_break_in_a_key_stays_on_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(snapshot() + '"a\\rb\\u2028c": 1\n', encoding="utf-8")
    assert main(["snapshot", "validate", str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"{path}: a\\rb\\u2028c: unknown manifest field; expected kind, version, content"
    ]

"""The caps on a manifest's inputs, schema fields, steps, field-name length and YAML nodes, and the
schema caps where schemas enter the chain: each refusal is one line naming the field and the variable
that moves the cap, in bounded work (a list over its cap is refused before its items are read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_odf.cli.errors import EXIT_BAD_INPUT
from airflow_odf.cli.main import main
from airflow_odf.odf.chain.rules import ChainState, _check_set_transform
from airflow_odf.odf.errors import ChainRuleError, ManifestError
from airflow_odf.odf.format import manifests, model
from airflow_odf.odf.format.manifests import MAX_PROBLEMS, MAX_YAML_NODES, load_manifests
from airflow_odf.odf.limits import (
    DEFAULT_MAX_FIELD_NAME_CHARS,
    DEFAULT_MAX_TRANSFORM_INPUTS,
    MAX_SCHEMA_FIELDS_ENV,
)
from tests.unit.test_chain_rules import append, field, rejects, schema, seed
from tests.unit.test_manifest_limits import snapshot


def derivative(inputs: int) -> str:
    refs = "".join(f"    - datasetRef: in{i}\n" for i in range(inputs))
    transform = "{kind: Sql, engine: spark, query: SELECT 1}"
    event = f"  - kind: SetTransform\n    inputs:\n{refs}    transform: {transform}\n"
    return snapshot(events=event).replace("kind: Root", "kind: Derivative")


def schema_of(*names: str) -> str:
    fields = "".join(f"      - {{name: {n}, type: {{kind: Int64}}}}\n" for n in names)
    return snapshot(events=f"  - kind: SetDataSchema\n    schema:\n      fields:\n{fields}")


def refused(text: str, tmp_path: Path, capsys: Any) -> str:
    """The one line `odf snapshot validate` prints for `text` (also checked through load_manifests)."""
    with pytest.raises(ManifestError) as info:
        load_manifests(text, "m.yaml")
    assert len(info.value.problems) == 1, str(info.value)[:2000]
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["snapshot", "validate", str(path)]) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err[:2000]
    return err.removeprefix(f"{path}: ").rstrip("\n")


def test_inputs_over_the_cap_are_refused_unread(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[Any] = []
    original = manifests._ModelReader.table
    monkeypatch.setattr(
        manifests._ModelReader,
        "table",
        lambda self, cls, *a, **k: read.append(cls) or original(self, cls, *a, **k),
    )
    n = DEFAULT_MAX_TRANSFORM_INPUTS + 1
    assert refused(derivative(n), tmp_path, capsys) == (
        f"content.metadata[0].inputs: {n} inputs; at most {DEFAULT_MAX_TRANSFORM_INPUTS} "
        "(ODF_MAX_TRANSFORM_INPUTS)"
    )
    assert model.TransformInput not in read  # refused before any input was converted
    (m,) = load_manifests(derivative(DEFAULT_MAX_TRANSFORM_INPUTS))
    assert len(m.content.metadata[0].inputs) == DEFAULT_MAX_TRANSFORM_INPUTS


def test_fields_over_the_cap_are_refused(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MAX_SCHEMA_FIELDS_ENV, "3")
    assert refused(schema_of("a", "b", "c", "d"), tmp_path, capsys) == (
        "content.metadata[0].schema.fields: 4 fields; at most 3 (ODF_MAX_SCHEMA_FIELDS)"
    )
    nested = snapshot(
        events="  - kind: SetDataSchema\n    schema:\n      fields:\n"
        "      - {name: a, type: {kind: Struct, fields: [{name: b, type: Int8}, {name: c, type: Int8}]}}\n"
        "      - {name: d, type: Int8}\n"
    )
    assert refused(nested, tmp_path, capsys) == (
        "content.metadata[0].schema: more than 3 fields, nested ones included (ODF_MAX_SCHEMA_FIELDS)"
    )
    ddl = snapshot(
        events="  - kind: AddPushSource\n    sourceName: s\n"
        "    read: {kind: Csv, ddlSchema: [a INT, b INT, c INT, d INT]}\n    merge: {kind: Append}\n"
    )
    assert refused(ddl, tmp_path, capsys) == (
        "content.metadata[0].read.ddlSchema: 4 columns; at most 3 (ODF_MAX_SCHEMA_FIELDS)"
    )


def test_a_field_name_of_1_mib_is_refused(tmp_path: Path, capsys: Any) -> None:
    name = "x" * (1 << 20)
    assert refused(schema_of("ok", name), tmp_path, capsys) == (
        f"content.metadata[0].schema.fields[1].name: field name {'x' * 60!r}… (1048576 characters) is "
        f"longer than {DEFAULT_MAX_FIELD_NAME_CHARS} characters (ODF_MAX_FIELD_NAME_CHARS)"
    )


def test_steps_over_the_cap_are_refused(tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODF_MAX_MANIFEST_STEPS", "2")
    events = "  - {kind: SetInfo, description: x}\n" * 3
    assert refused(snapshot(events=events), tmp_path, capsys) == (
        "content.metadata: 3 events; at most 2 (ODF_MAX_MANIFEST_STEPS)"
    )
    queries = "".join(f"      - {{alias: q{i}, query: SELECT {i}}}\n" for i in range(3))
    event = (
        "  - kind: SetTransform\n    inputs: [{datasetRef: a}]\n"
        f"    transform:\n      kind: Sql\n      engine: spark\n      queries:\n{queries}"
    )
    text = snapshot(events=event).replace("kind: Root", "kind: Derivative")
    assert refused(text, tmp_path, capsys) == (
        "content.metadata[0].transform.queries: 3 queries; at most 2 (ODF_MAX_MANIFEST_STEPS)"
    )


def test_a_text_of_a_million_nodes_is_refused_before_composing(tmp_path: Path, capsys: Any) -> None:
    events = "  - kind: SetInfo\n    keywords: [" + ", ".join(["k"] * (2 * MAX_YAML_NODES)) + "]\n"
    line = refused(snapshot(events=events), tmp_path, capsys)
    assert line.startswith("line 8, column ") and line.endswith(
        f"invalid YAML: more than {MAX_YAML_NODES} values (nodes) in one text"
    )


def test_many_problems_are_listed_up_to_a_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODF_MAX_FIELD_NAME_CHARS", "3")
    with pytest.raises(ManifestError) as info:
        load_manifests(schema_of(*(f"long{i}" for i in range(MAX_PROBLEMS + 30))), "m.yaml")
    lines = str(info.value).splitlines()
    assert len(lines) == MAX_PROBLEMS + 1
    assert lines[-1] == "m.yaml: and 30 more problems"


def test_a_schema_over_the_caps_does_not_enter_the_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one rule every schema passes on its way into a chain: from a manifest, an engine's answer
    (inferred or written data) or a pulled block."""
    state = append(ChainState(), seed())
    error = rejects(
        state,
        schema(field("ok", model.DataTypeInt64()), field("y" * 5000, model.DataTypeInt64())),
        "set-data-schema",
    )
    assert str(error) == (
        f"the schema is refused: field name {'y' * 60!r}… (5000 characters) is longer than 1024 "
        "characters (ODF_MAX_FIELD_NAME_CHARS) [rule: set-data-schema]"
    )
    monkeypatch.setenv(MAX_SCHEMA_FIELDS_ENV, "2")
    wide = schema(*(field(f"c{i}", model.DataTypeInt64()) for i in range(3)))
    assert "more than 2 fields, nested ones included (ODF_MAX_SCHEMA_FIELDS)" in str(
        rejects(state, wide, "set-data-schema")
    )
    append(state, schema(*(field(f"c{i}", model.DataTypeInt64()) for i in range(2))))


def test_duplicate_inputs_name_the_repeated_one_only() -> None:
    with pytest.raises(ChainRuleError) as info:
        did = "did:odf:fed01" + "00" * 32
        _check_set_transform(
            model.SetTransform(
                inputs=[model.TransformInput(dataset_ref=did, alias=f"a{i}") for i in range(1000)],
                transform=model.TransformSql(engine="spark", queries=[model.SqlQueryStep(query="SELECT 1")]),
            )
        )
    assert len(str(info.value)) < 200, str(info.value)[:300]


def test_a_chain_of_five_thousand_derivatives_is_ordered_without_recursion() -> None:
    """Each derivative reads the one before it, given newest first: the order is inputs first (the
    recursive walk raised RecursionError here)."""
    from airflow_odf.odf.repo.snapshot_order import dependency_order

    def snap(i: int) -> model.DatasetSnapshot:
        if i == 0:
            return model.DatasetSnapshot(name="d0", kind=model.DatasetKind.ROOT, metadata=[])
        sql = model.TransformSql(engine="spark", query="SELECT 1")
        event = model.SetTransform(inputs=[model.TransformInput(dataset_ref=f"d{i - 1}")], transform=sql)
        return model.DatasetSnapshot(name=f"d{i}", kind=model.DatasetKind.DERIVATIVE, metadata=[event])

    given = [snap(i) for i in reversed(range(5000))]
    assert [s.name for s in dependency_order(given)] == [f"d{i}" for i in range(5000)]

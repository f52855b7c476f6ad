"""Invalid YAML manifests: every kind of mistake is reported with its field path, by the library and by `odf`.

Each case is a small YAML text. It is checked twice: through `read_manifests` (a `ManifestError` whose
problems carry the exact field paths) and through the real `odf snapshot validate` command (exit status 2,
one line per problem starting with the file name, never a traceback). Positive checks at the end pin the
lenient reading rules (case-insensitive tags and enums, legacy DDL `schema`, YAML 1.2 scalars).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_odf.odf.errors import ManifestError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import read_manifests

ODF = Path(sys.executable).parent / "odf"

HASH = "f1620" + "ab" * 32
DID = "did:odf:fed01" + "cd" * 32


def snapshot(events: str = "", *, kind: str = "Root", name: str = "my.dataset", head: str = "") -> str:
    """A DatasetSnapshot manifest; `events` is the YAML list of `metadata` (unindented, '- ' items)."""
    body = textwrap.indent(textwrap.dedent(events).strip("\n"), "    ") if events.strip() else "    []"
    return (
        f"{head}kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: {name}\n  kind: {kind}\n"
        f"  metadata:\n{body}\n"
    )


def block(
    event: str, *, system_time: str = "'2024-01-01T00:00:00Z'", prev: str = HASH, seq: str = "1"
) -> str:
    """A MetadataBlock manifest; `event` is the YAML mapping of the event (unindented)."""
    body = textwrap.indent(textwrap.dedent(event).strip("\n"), "    ")
    return (
        f"kind: MetadataBlock\nversion: 3\ncontent:\n  systemTime: {system_time}\n"
        f"  prevBlockHash: {prev}\n  sequenceNumber: {seq}\n  event:\n{body}\n"
    )


def event_manifest(event: str) -> str:
    body = textwrap.indent(textwrap.dedent(event).strip("\n"), "  ")
    return f"kind: MetadataEvent\nversion: 1\ncontent:\n{body}\n"


PUSH = """
- kind: AddPushSource
  sourceName: default
  read:
    kind: NdJson
  merge:
    kind: Append
"""

POLL = """
- kind: SetPollingSource
  fetch:
    kind: Url
    url: https://example.org/data.csv
  read:
    kind: Csv
    header: true
  merge:
    kind: Append
"""


def transform(sql: str, inputs: str = "- datasetRef: my.root\n") -> str:
    return (
        "- kind: SetTransform\n  inputs:\n"
        + textwrap.indent(inputs, "    ")
        + "  transform:\n    kind: Sql\n    engine: datafusion\n"
        + textwrap.indent(textwrap.dedent(sql).strip("\n"), "    ")
        + "\n"
    )


def polling(
    fetch: str = "kind: Url\nurl: https://example.org/a.csv",
    read: str = "kind: Csv",
    merge: str = "kind: Append",
    extra: str = "",
) -> str:
    def block_of(key: str, text: str) -> str:
        return f"  {key}:\n" + textwrap.indent(textwrap.dedent(text).strip("\n"), "    ") + "\n"

    return (
        "- kind: SetPollingSource\n"
        + block_of("fetch", fetch)
        + block_of("read", read)
        + block_of("merge", merge)
        + extra
    )


@dataclass(frozen=True)
class Case:
    id: str
    text: str
    expected: tuple[tuple[str, str], ...]  # (exact field path, key phrase of its message)


M0 = "content.metadata[0]"

CASES = [
    # ----- the manifest envelope -----
    Case(
        "wrong-manifest-kind",
        snapshot(PUSH).replace("kind: DatasetSnapshot", "kind: DataSetSnap"),
        (("kind", "expected one of DatasetSnapshot, MetadataEvent, MetadataBlock"),),
    ),
    Case(
        "manifest-kind-missing",
        snapshot(PUSH).replace("kind: DatasetSnapshot\n", ""),
        (("kind", "got null"),),
    ),
    Case(
        "wrong-version",
        snapshot(PUSH).replace("version: 1", "version: 2"),
        (("version", "DatasetSnapshot manifests have version 1, got an integer 2"),),
    ),
    Case(
        "wrong-block-version",
        block("kind: SetInfo").replace("version: 3", "version: 4"),
        (("version", "MetadataBlock manifests have version 2 or 3"),),
    ),
    Case(
        "version-as-string",
        snapshot(PUSH).replace("version: 1", "version: '1'"),
        (("version", "got a string '1'"),),
    ),
    Case(
        "missing-content", "kind: DatasetSnapshot\nversion: 1\n", (("content", "required field is missing"),)
    ),
    Case(
        "content-not-a-mapping",
        "kind: DatasetSnapshot\nversion: 1\ncontent: [1, 2]\n",
        (("content", "expected a DatasetSnapshot mapping, got a list"),),
    ),
    Case(
        "unknown-top-level-field",
        snapshot(PUSH, head="spec: {}\n"),
        (("spec", "unknown manifest field; expected kind, version, content"),),
    ),
    Case(
        "invalid-yaml-syntax",
        "kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: [unclosed\n  kind: Root\n",
        (("", "line 5, column 7: invalid YAML: did not find expected ',' or ']'"),),
    ),
    Case(
        "invalid-yaml-indentation",
        "kind: DatasetSnapshot\n  version: 1\n",
        (("", "line 2, column 10: invalid YAML: mapping values are not allowed in this context"),),
    ),
    Case(
        "duplicate-key",
        snapshot(PUSH).replace("  kind: Root\n", "  kind: Root\n  name: other\n"),
        (("", "line 6, column 3: invalid YAML: duplicate key 'name'"),),
    ),
    Case("empty-file", "", (("", "no manifest in file"),)),
    Case("only-comments", "# nothing here\n---\n", (("", "no manifest in file"),)),
    Case(
        "not-a-mapping",
        "- kind: DatasetSnapshot\n- version: 1\n",
        (("", "expected a manifest mapping with kind, version, content"),),
    ),
    Case("scalar-document", "just some text\n", (("", "expected a manifest mapping"),)),
    # ----- DatasetSnapshot content -----
    Case(
        "snapshot-name-missing",
        snapshot(PUSH).replace("  name: my.dataset\n", ""),
        (("content.name", "required field of DatasetSnapshot is missing"),),
    ),
    Case(
        "snapshot-kind-unknown",
        snapshot(PUSH, kind="Rooted"),
        (("content.kind", "expected one of Root, Derivative, got a string 'Rooted'"),),
    ),
    Case(
        "metadata-not-a-list",
        snapshot().replace("  metadata:\n    []", "  metadata: {kind: SetInfo}"),
        (("content.metadata", "expected a list, got a mapping"),),
    ),
    Case(
        "invalid-name-space",
        snapshot(PUSH, name='"my dataset"'),
        (("content.name", "'my dataset' is not a valid dataset name"),),
    ),
    Case(
        "invalid-name-double-dot",
        snapshot(PUSH, name="a..b"),
        (("content.name", "'a..b' is not a valid dataset name"),),
    ),
    Case(
        "invalid-name-trailing-dash",
        snapshot(PUSH, name="abc-"),
        (("content.name", "not a valid dataset name"),),
    ),
    # ----- missing required fields -----
    Case(
        "missing-merge-primary-key",
        snapshot(polling(merge="kind: Ledger")),
        ((f"{M0}.merge.primaryKey", "required field of MergeStrategyLedger is missing"),),
    ),
    Case(
        "missing-fetch-url",
        snapshot(polling(fetch="kind: Url")),
        ((f"{M0}.fetch.url", "required field of FetchStepUrl is missing"),),
    ),
    Case(
        "missing-source-name",
        snapshot(PUSH.replace("  sourceName: default\n", "")),
        ((f"{M0}.sourceName", "required field of AddPushSource is missing"),),
    ),
    Case(
        "missing-read",
        snapshot(PUSH.replace("  read:\n    kind: NdJson\n", "")),
        ((f"{M0}.read", "required field of AddPushSource is missing"),),
    ),
    Case(
        "missing-transform-engine",
        snapshot(transform("query: SELECT 1").replace("    engine: datafusion\n", ""), kind="Derivative"),
        ((f"{M0}.transform.engine", "required field of TransformSql is missing"),),
    ),
    Case(
        "null-required-field",
        snapshot(polling(merge="kind: Ledger\nprimaryKey: null")),
        ((f"{M0}.merge.primaryKey", "must not be null"),),
    ),
    Case(
        "null-required-union",
        snapshot(PUSH.replace("  merge:\n    kind: Append\n", "  merge: ~\n")),
        ((f"{M0}.merge", "must not be null"),),
    ),
    # ----- events -----
    Case(
        "unknown-event-kind",
        snapshot("- kind: SetWatermark\n  outputWatermark: '2024-01-01T00:00:00Z'\n"),
        ((f"{M0}.kind", "unknown MetadataEvent kind 'SetWatermark'"),),
    ),
    Case(
        "event-without-kind",
        snapshot("- description: no kind\n"),
        ((f"{M0}.kind", "missing; expected one of AddData, ExecuteTransform, Seed"),),
    ),
    Case(
        "event-not-a-mapping",
        snapshot("- 42\n"),
        ((M0, "expected a MetadataEvent mapping with a 'kind', got an integer 42"),),
    ),
    Case(
        "seed-in-snapshot",
        snapshot(f"- kind: Seed\n  datasetId: {DID}\n  datasetKind: Root\n"),
        ((f"{M0}.kind", "Seed events are not allowed in a DatasetSnapshot"),),
    ),
    Case(
        "adddata-in-snapshot",
        snapshot("- kind: AddData\n  prevOffset: 3\n"),
        ((f"{M0}.kind", "AddData events are not allowed in a DatasetSnapshot"),),
    ),
    Case(
        "executetransform-in-snapshot",
        snapshot("- kind: ExecuteTransform\n  queryInputs: []\n", kind="Derivative"),
        ((f"{M0}.kind", "ExecuteTransform events are not allowed in a DatasetSnapshot"),),
    ),
    Case(
        "disablepollingsource-in-snapshot",
        snapshot("- kind: DisablePollingSource\n"),
        ((f"{M0}.kind", "DisablePollingSource events are not allowed in a DatasetSnapshot"),),
    ),
    Case(
        "disablepushsource-in-snapshot",
        snapshot("- kind: DisablePushSource\n  sourceName: default\n"),
        ((f"{M0}.kind", "DisablePushSource events are not allowed in a DatasetSnapshot"),),
    ),
    Case(
        "polling-source-on-derivative",
        snapshot(POLL, kind="Derivative"),
        ((f"{M0}.kind", "SetPollingSource is only allowed on Root datasets"),),
    ),
    Case(
        "push-source-on-derivative",
        snapshot(PUSH, kind="Derivative"),
        ((f"{M0}.kind", "AddPushSource is only allowed on Root datasets"),),
    ),
    Case(
        "set-transform-on-root",
        snapshot(transform("query: SELECT 1"), kind="Root"),
        ((f"{M0}.kind", "SetTransform is only allowed on Derivative datasets"),),
    ),
    Case(
        "set-transform-no-inputs",
        snapshot(
            transform("query: SELECT 1", inputs="[]\n").replace("  inputs:\n    []\n", "  inputs: []\n"),
            kind="Derivative",
        ),
        ((f"{M0}.inputs", "a transform needs at least one input"),),
    ),
    Case(
        "query-and-queries",
        snapshot(transform("query: SELECT 1\nqueries:\n- query: SELECT 2\n"), kind="Derivative"),
        ((f"{M0}.transform", "give either 'query' or 'queries', not both"),),
    ),
    Case(
        "neither-query-nor-queries",
        snapshot(transform(""), kind="Derivative"),
        ((f"{M0}.transform", "expected 'query' or a non-empty 'queries'"),),
    ),
    Case(
        "empty-queries",
        snapshot(transform("queries: []"), kind="Derivative"),
        ((f"{M0}.transform", "expected 'query' or a non-empty 'queries'"),),
    ),
    Case(
        "two-aliasless-queries",
        snapshot(transform("queries:\n- query: SELECT 1\n- query: SELECT 2\n"), kind="Derivative"),
        ((f"{M0}.transform.queries", "only the last (output) query may have no alias"),),
    ),
    Case(
        "preprocess-query-and-queries",
        snapshot(
            polling(
                extra="  preprocess:\n    kind: Sql\n    engine: spark\n    query: SELECT 1\n"
                "    queries: [{query: SELECT 2}]\n"
            )
        ),
        ((f"{M0}.preprocess", "give either 'query' or 'queries', not both"),),
    ),
    # ----- multihash / DID / timestamps in MetadataBlock and MetadataEvent manifests -----
    Case(
        "multihash-wrong-prefix",
        block("kind: SetInfo", prev="x1620" + "ab" * 32),
        (("content.prevBlockHash", "unsupported multibase prefix 'x'"),),
    ),
    Case(
        "multihash-odd-hex",
        block("kind: SetInfo", prev=HASH + "a"),
        (("content.prevBlockHash", "odd number of hex digits"),),
    ),
    Case(
        "multihash-wrong-digest-length",
        block("kind: SetInfo", prev="f1620" + "ab" * 31),
        (("content.prevBlockHash", "multihash digest has 31 bytes, its header says 32"),),
    ),
    Case(
        "multihash-sha3-short-digest",
        block("kind: SetInfo", prev="f161f" + "ab" * 31),
        (("content.prevBlockHash", "a sha3-256 digest has 32 bytes, got 31"),),
    ),
    Case(
        "multihash-not-hex",
        block("kind: SetInfo", prev="f1620" + "zz" * 32),
        (("content.prevBlockHash", "expected a multihash such as f1620"),),
    ),
    Case(
        "bad-did-execute-transform",
        block(
            "kind: ExecuteTransform\nqueryInputs:\n"
            f"- datasetId: did:web:example.org\n  newBlockHash: {HASH}\n"
        ),
        (("content.event.queryInputs[0].datasetId", "is not a DID (expected 'did:odf:"),),
    ),
    Case(
        "did-wrong-key-type",
        block("kind: ExecuteTransform\nqueryInputs:\n- datasetId: did:odf:fe701" + "cd" * 32 + "\n"),
        (("content.event.queryInputs[0].datasetId", "not an ed25519 key"),),
    ),
    Case(
        "did-short-key",
        event_manifest("kind: Seed\ndatasetId: did:odf:fed01" + "cd" * 31 + "\ndatasetKind: Root"),
        (("content.datasetId", "an ed25519 public key has 32 bytes, got 31"),),
    ),
    Case(
        "timestamp-yesterday",
        block("kind: SetInfo", system_time="yesterday"),
        (("content.systemTime", "'yesterday' is not an RFC 3339 timestamp"),),
    ),
    Case(
        "timestamp-month-13",
        block("kind: SetInfo", system_time="2024-13-01T00:00:00Z"),
        (("content.systemTime", "is not a valid timestamp: month must be in 1..12"),),
    ),
    Case(
        "timestamp-without-offset",
        block("kind: SetInfo", system_time="2024-01-01T00:00:00"),
        (("content.systemTime", "is not an RFC 3339 timestamp"),),
    ),
    Case(
        "timestamp-as-integer",
        block("kind: SetInfo", system_time="1700000000"),
        (("content.systemTime", "expected an RFC 3339 timestamp string, got int"),),
    ),
    Case(
        "watermark-bad-day",
        event_manifest("kind: AddData\nnewWatermark: '2023-02-29T00:00:00Z'"),
        (("content.newWatermark", "day is out of range for month"),),
    ),
    # ----- scalars -----
    Case(
        "integer-where-string-expected",
        snapshot("- kind: SetInfo\n  description: 42\n"),
        ((f"{M0}.description", "expected a string, got an integer 42"),),
    ),
    Case(
        "list-where-string-expected",
        snapshot("- kind: SetVocab\n  eventTimeColumn: [a, b]\n"),
        ((f"{M0}.eventTimeColumn", "expected a string, got a list"),),
    ),
    Case(
        "string-where-integer-expected",
        block("kind: SetInfo", seq="abc"),
        (("content.sequenceNumber", "expected an integer, got a string 'abc'"),),
    ),
    Case(
        "float-where-integer-expected",
        block("kind: SetInfo", seq="1.5"),
        (("content.sequenceNumber", "expected an integer, got a number 1.5"),),
    ),
    Case(
        "boolean-where-integer-expected",
        block("kind: SetInfo", seq="true"),
        (("content.sequenceNumber", "expected an integer, got a boolean True"),),
    ),
    Case(
        "negative-uint64",
        block("kind: SetInfo", seq="-1"),
        (("content.sequenceNumber", "expected an integer in [0, 18446744073709551615], got -1"),),
    ),
    Case(
        "uint64-overflow",
        block("kind: SetInfo", seq="18446744073709551616"),
        (
            (
                "content.sequenceNumber",
                "expected an integer in [0, 18446744073709551615], got 18446744073709551616",
            ),
        ),
    ),
    Case(
        "int32-overflow",
        snapshot(polling(fetch="kind: Mqtt\nhost: localhost\nport: 2147483648\ntopics: [{path: a}]")),
        ((f"{M0}.fetch.port", "expected an integer in [-2147483648, 2147483647]"),),
    ),
    Case(
        "boolean-yes",
        snapshot(polling(read="kind: Csv\nheader: yes")),
        ((f"{M0}.read.header", "expected true or false, got a string 'yes'"),),
    ),
    Case(
        "boolean-on",
        snapshot(polling(read="kind: Csv\ninferSchema: on")),
        ((f"{M0}.read.inferSchema", "expected true or false, got a string 'on'"),),
    ),
    Case(
        "unknown-enum-order",
        snapshot(polling(fetch="kind: FilesGlob\npath: /data/*.csv\norder: Sideways")),
        ((f"{M0}.fetch.order", "expected one of ByEventTime, ByName, got a string 'Sideways'"),),
    ),
    Case(
        "unknown-enum-compression",
        snapshot(polling(extra="  prepare:\n  - kind: Decompress\n    format: Rar\n")),
        ((f"{M0}.prepare[0].format", "expected one of Gzip, Zip, got a string 'Rar'"),),
    ),
    Case(
        "enum-as-integer",
        snapshot(polling(fetch="kind: Mqtt\nhost: h\nport: 1\ntopics: [{path: a, qos: 1}]")),
        (
            (
                f"{M0}.fetch.topics[0].qos",
                "expected one of AtMostOnce, AtLeastOnce, ExactlyOnce, got an integer 1",
            ),
        ),
    ),
    # ----- unions and nested tables -----
    Case(
        "unknown-data-type",
        snapshot(
            PUSH.replace(
                "    kind: NdJson\n",
                "    kind: NdJson\n    schema:\n      fields:\n      - name: a\n        type: Int128\n",
            )
        ),
        ((f"{M0}.read.schema.fields[0].type", "unknown DataType kind 'Int128'"),),
    ),
    Case(
        "unknown-nested-data-type",
        snapshot(
            PUSH.replace(
                "    kind: NdJson\n",
                "    kind: NdJson\n    schema:\n      fields:\n      - name: a\n"
                "        type: {kind: List, itemType: {kind: Option, inner: Vector}}\n",
            )
        ),
        ((f"{M0}.read.schema.fields[0].type.itemType.inner", "unknown DataType kind 'Vector'"),),
    ),
    Case(
        "short-form-with-required-fields",
        snapshot(polling(merge="Ledger")),
        ((f"{M0}.merge", "MergeStrategy Ledger has required fields; use the mapping form"),),
    ),
    Case(
        "short-form-decimal",
        snapshot(
            PUSH.replace(
                "    kind: NdJson\n",
                "    kind: NdJson\n    schema:\n      fields:\n      - name: a\n        type: Decimal\n",
            )
        ),
        ((f"{M0}.read.schema.fields[0].type", "DataType Decimal has required fields"),),
    ),
    Case(
        "union-mapping-without-kind",
        snapshot(polling(fetch="url: https://example.org/a.csv")),
        ((f"{M0}.fetch.kind", "missing; expected one of Url, FilesGlob, Container, Mqtt, EthereumLogs"),),
    ),
    Case(
        "union-kind-not-a-string",
        snapshot(polling(read="kind: 7")),
        ((f"{M0}.read.kind", "unknown ReadStep kind 7"),),
    ),
    Case(
        "union-as-list",
        snapshot(polling(merge="[Append]")),
        ((f"{M0}.merge", "expected a MergeStrategy mapping with a 'kind', got a list"),),
    ),
    Case(
        "unknown-nested-field",
        snapshot(polling(read="kind: Csv\nsepparator: ';'")),
        ((f"{M0}.read.sepparator", "unknown field of ReadStepCsv; expected ddlSchema, separator"),),
    ),
    Case(
        "unknown-event-field",
        snapshot("- kind: SetInfo\n  descripton: typo\n"),
        ((f"{M0}.descripton", "unknown field of SetInfo; expected description, keywords"),),
    ),
    Case(
        "field-of-empty-table",
        snapshot(polling(merge="kind: Append\nprimaryKey: [id]")),
        ((f"{M0}.merge.primaryKey", "unknown field of MergeStrategyAppend; expected no fields"),),
    ),
    Case(
        "table-where-scalar-given",
        event_manifest(
            f"kind: AddData\nnewData:\n  logicalHash: {HASH}\n  physicalHash: {HASH}\n"
            "  offsetInterval: 5\n  size: 1"
        ),
        (("content.newData.offsetInterval", "expected a OffsetInterval mapping, got an integer 5"),),
    ),
    Case(
        "list-where-string-given",
        snapshot(polling(merge="kind: Ledger\nprimaryKey: id")),
        ((f"{M0}.merge.primaryKey", "expected a list, got a string 'id'"),),
    ),
    Case(
        "bad-list-item",
        snapshot("- kind: SetInfo\n  keywords: [a, 2, c, {d: 1}]\n"),
        (
            (f"{M0}.keywords[1]", "expected a string, got an integer 2"),
            (f"{M0}.keywords[3]", "expected a string, got a mapping"),
        ),
    ),
    # ----- bytes and extra attributes -----
    Case(
        "raw-arrow-schema-not-base64",
        event_manifest("kind: SetDataSchema\nrawArrowSchema: 'not base64!'"),
        (("content.rawArrowSchema", "expected base64 text"),),
    ),
    Case(
        "raw-arrow-schema-bad-padding",
        event_manifest("kind: SetDataSchema\nrawArrowSchema: abcdef"),
        (("content.rawArrowSchema", "expected base64 text: Incorrect padding"),),
    ),
    Case(
        "raw-arrow-schema-integer",
        event_manifest("kind: SetDataSchema\nrawArrowSchema: 12"),
        (("content.rawArrowSchema", "expected base64 text, got an integer 12"),),
    ),
    Case(
        "extra-not-a-mapping",
        event_manifest("kind: AddData\nextra: [kamu.dev/archetype, Collection]"),
        (("content.extra", "expected a mapping of attribute names to values, got a list"),),
    ),
    Case(
        "schema-extra-not-a-mapping",
        snapshot("- kind: SetDataSchema\n  schema:\n    fields: []\n    extra: kamu.dev/archetype\n"),
        ((f"{M0}.schema.extra", "expected a mapping of attribute names to values, got a string"),),
    ),
    # ----- several documents, several problems -----
    Case(
        "second-document-broken",
        snapshot(PUSH) + "---\n" + snapshot(polling(merge="kind: Snapshot"), name="second"),
        ((f"{M0}.merge.primaryKey", "[document 2] required field of MergeStrategySnapshot is missing"),),
    ),
    Case(
        "third-document-not-a-mapping",
        snapshot(PUSH) + "---\n" + snapshot(PUSH, name="b") + "---\n[]\n",
        (("", "[document 3] expected a manifest mapping"),),
    ),
    Case(
        "several-problems",
        snapshot(
            polling(fetch="kind: Url", read="kind: Csv\nheader: yes", merge="kind: Ledger")
            + "- kind: SetTransform\n  inputs: []\n  transform: {kind: Sql, engine: x}\n"
            + "- kind: Seed\n  datasetId: nope\n  datasetKind: Root\n",
            name="bad name",
        ).replace("version: 1", "version: 7"),
        (
            ("version", "have version 1, got an integer 7"),
            (f"{M0}.fetch.url", "required field of FetchStepUrl is missing"),
            (f"{M0}.read.header", "expected true or false"),
            (f"{M0}.merge.primaryKey", "required field of MergeStrategyLedger is missing"),
            ("content.metadata[2].datasetId", "expected a DID"),
        ),
    ),
    Case(
        "several-rule-problems",
        snapshot(
            PUSH
            + "- kind: SetTransform\n  inputs: []\n  transform: {kind: Sql, engine: sparkk}\n"
            + "- kind: DisablePollingSource\n",
            name="bad name",
        ),
        (
            ("content.name", "'bad name' is not a valid dataset name"),
            ("content.metadata[1].kind", "SetTransform is only allowed on Derivative datasets"),
            ("content.metadata[1].inputs", "a transform needs at least one input"),
            ("content.metadata[1].transform", "expected 'query' or a non-empty 'queries'"),
            ("content.metadata[1].transform.engine", "unknown SQL engine 'sparkk'; expected datafusion, "),
            ("content.metadata[2].kind", "DisablePollingSource events are not allowed in a DatasetSnapshot"),
        ),
    ),
]


def _problem_lines(problems) -> list[str]:
    return [f"{p.path!r}: {p.message}" for p in problems]


def test_case_ids_are_unique_and_numerous():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 35


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_read_manifests_reports_field_paths(case: Case, tmp_path: Path):
    path = tmp_path / f"{case.id}.yaml"
    path.write_text(case.text, encoding="utf-8")
    with pytest.raises(ManifestError) as info:
        read_manifests(path)
    err = info.value
    assert err.source == str(path)
    got = _problem_lines(err.problems)
    assert sorted(p.path for p in err.problems) == sorted(path_ for path_, _ in case.expected), got
    for field_path, phrase in case.expected:
        assert any(p.path == field_path and phrase in p.message for p in err.problems), (
            field_path,
            phrase,
            got,
        )
    # the exception text is one line per problem, each naming the file
    lines = str(err).splitlines()
    assert len(lines) == len(case.expected)
    assert all(line.startswith(f"{path}: ") for line in lines)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_odf_snapshot_validate_reports_field_paths(case: Case, tmp_path: Path):
    path = tmp_path / f"{case.id}.yaml"
    path.write_text(case.text, encoding="utf-8")
    proc = subprocess.run(
        [str(ODF), "snapshot", "validate", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == len(case.expected), proc.stderr
    assert all(line.startswith(f"{path}: ") for line in lines), proc.stderr
    for field_path, phrase in case.expected:
        prefix = f"{path}: {field_path}: " if field_path else f"{path}: "
        assert any(line.startswith(prefix) and phrase in line for line in lines), (field_path, proc.stderr)


# --------------------------------------------------------------------------------------------------
# Malformed inputs that once crashed the reader: each must be a clean ManifestError
# --------------------------------------------------------------------------------------------------

CRASHES = [
    pytest.param(
        "kind: [DatasetSnapshot]\nversion: 1\ncontent: {}\n",
        "kind",
        id="manifest-kind-is-a-list",
    ),
    pytest.param(
        "kind: {a: 1}\nversion: 1\ncontent: {}\n",
        "kind",
        id="manifest-kind-is-a-mapping",
    ),
    pytest.param(
        "? [a, b]\n: c\n",
        "",
        id="complex-mapping-key",
    ),
    pytest.param(
        event_manifest("kind: SetDataSchema\nrawArrowSchema: 'é'"),
        "content.rawArrowSchema",
        id="raw-arrow-schema-non-ascii",
    ),
]


@pytest.mark.parametrize(("text", "field_path"), CRASHES)
def test_malformed_input_is_a_manifest_error_not_a_crash(text: str, field_path: str, tmp_path: Path):
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ManifestError) as info:
        read_manifests(path)
    assert [p.path for p in info.value.problems] == [field_path]
    proc = subprocess.run(
        [str(ODF), "snapshot", "validate", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_binary_tagged_extra_attribute_is_rejected(tmp_path: Path):
    path = tmp_path / "b.yaml"
    path.write_text(block("kind: AddData\nextra: {a/b: !!binary aGVsbG8=}"), encoding="utf-8")
    with pytest.raises(ManifestError) as info:
        read_manifests(path)
    assert [p.path for p in info.value.problems] == ["content.event.extra.a/b"]


# --------------------------------------------------------------------------------------------------
# YAML 1.2 integer rules (the module documents "YAML is read with 1.2 scalar rules")
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0x10", 16, id="hex"),
        pytest.param("0o17", 15, id="octal-0o"),
        pytest.param("+7", 7, id="plus-sign"),
        pytest.param("010", 10, id="leading-zero-is-decimal"),
        pytest.param("1_000", None, id="underscores-are-not-digits"),
        pytest.param("0b11", None, id="binary-literal-is-a-string"),
        pytest.param("1:30", None, id="sexagesimal-is-a-string"),
        pytest.param("1e3", None, id="exponent-is-a-float"),
    ],
)
def test_integers_follow_yaml_1_2(text: str, expected: int | None, tmp_path: Path):
    """`expected` None means: rejected with a ManifestError naming the field."""
    path = tmp_path / "b.yaml"
    path.write_text(block("kind: SetInfo", seq=text), encoding="utf-8")
    try:
        got = read_manifests(path)[0].content.sequence_number
    except ManifestError as e:
        assert [p.path for p in e.problems] == ["content.sequenceNumber"]
        got = None
    assert got == expected


@pytest.mark.parametrize("text", ["1:30", "1_000", "0b11", "0777x", "12e", "0o8"])
def test_number_looking_text_is_a_string(text: str, tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(snapshot(f"- kind: SetInfo\n  description: {text}\n"), encoding="utf-8")
    (m,) = read_manifests(path)
    assert m.content.metadata[0].description == text


# --------------------------------------------------------------------------------------------------
# Lenient reading: what must be accepted
# --------------------------------------------------------------------------------------------------


def _read_one(tmp_path: Path, text: str):
    path = tmp_path / "ok.yaml"
    path.write_text(text, encoding="utf-8")
    (m,) = read_manifests(path)
    return m


def test_lowercase_and_camelcase_tags_are_accepted(tmp_path: Path):
    text = snapshot(
        """
        - kind: addPushSource
          sourceName: default
          read:
            kind: ndjson
            schema:
              fields:
              - name: t
                type: timestamp
              - name: n
                type: {kind: Int64}
              - name: o
                type: {kind: option, inner: float64}
              - name: u
                type: uInt8
          merge:
            kind: ledger
            primaryKey: [n]
        - kind: setvocab
          eventTimeColumn: t
        """,
        kind="root",
    )
    m = _read_one(tmp_path, text)
    snap = m.content
    assert m.kind == "DatasetSnapshot"
    assert snap.kind is model.DatasetKind.ROOT
    push, vocab = snap.metadata
    assert isinstance(push, model.AddPushSource)
    assert push.read == model.ReadStepNdJson(
        schema=model.DataSchema(
            fields=[
                model.DataField(name="t", type=model.DataTypeTimestamp()),
                model.DataField(name="n", type=model.DataTypeInt64()),
                model.DataField(name="o", type=model.DataTypeOption(inner=model.DataTypeFloat64())),
                model.DataField(name="u", type=model.DataTypeUInt8()),
            ]
        )
    )
    assert push.merge == model.MergeStrategyLedger(primary_key=["n"])
    assert vocab == model.SetVocab(event_time_column="t")


def test_lowercase_snapshot_merge_and_derivative_kind(tmp_path: Path):
    m = _read_one(tmp_path, snapshot(transform("query: SELECT 1"), kind="derivative"))
    assert m.content.kind is model.DatasetKind.DERIVATIVE
    m = _read_one(tmp_path, snapshot(polling(merge="kind: snapshot\nprimaryKey: [id]")))
    assert m.content.metadata[0].merge == model.MergeStrategySnapshot(primary_key=["id"])


@pytest.mark.parametrize("spelling", ["ByName", "byName", "byname", "BYNAME", "by_name", "by-name"])
def test_enums_are_case_insensitive(spelling: str, tmp_path: Path):
    m = _read_one(tmp_path, snapshot(polling(fetch=f"kind: FilesGlob\npath: /d/*.csv\norder: {spelling}")))
    assert m.content.metadata[0].fetch.order is model.SourceOrdering.BY_NAME


def test_legacy_ddl_schema_on_csv(tmp_path: Path):
    m = _read_one(tmp_path, snapshot(polling(read="kind: Csv\nheader: true\nschema:\n- a INT\n- b STRING")))
    read = m.content.metadata[0].read
    assert read == model.ReadStepCsv(header=True, ddl_schema=["a INT", "b STRING"])
    assert read.schema is None


def test_odf_schema_on_csv_stays_a_schema(tmp_path: Path):
    m = _read_one(
        tmp_path, snapshot(polling(read="kind: Csv\nschema:\n  fields:\n  - {name: a, type: Int32}"))
    )
    read = m.content.metadata[0].read
    assert read.ddl_schema is None
    assert read.schema == model.DataSchema(fields=[model.DataField(name="a", type=model.DataTypeInt32())])


def test_multiple_documents_are_read_in_order(tmp_path: Path):
    path = tmp_path / "multi.yaml"
    path.write_text(
        snapshot(PUSH, name="first")
        + "---\n"
        + snapshot(transform("query: SELECT 1"), kind="Derivative", name="second")
        + "---\n"
        + event_manifest("kind: SetInfo\ndescription: third")
        + "---\n"
        + block("kind: SetInfo"),
        encoding="utf-8",
    )
    manifests = read_manifests(path)
    assert [m.kind for m in manifests] == [
        "DatasetSnapshot",
        "DatasetSnapshot",
        "MetadataEvent",
        "MetadataBlock",
    ]
    assert [m.content.name for m in manifests[:2]] == ["first", "second"]
    assert manifests[2].content == model.SetInfo(description="third")
    assert manifests[3].content.sequence_number == 1
    assert [m.version for m in manifests] == [1, 1, 1, 3]


def test_on_no_yes_stay_strings(tmp_path: Path):
    m = _read_one(tmp_path, snapshot(polling(merge="kind: Ledger\nprimaryKey: [on, no, yes, off, y, n]")))
    assert m.content.metadata[0].merge.primary_key == ["on", "no", "yes", "off", "y", "n"]


def test_unquoted_dates_stay_strings(tmp_path: Path):
    m = _read_one(
        tmp_path,
        block(
            "kind: SetInfo\ndescription: 2024-01-01\nkeywords: [2024-01-01T00:00:00Z]",
            system_time="2024-01-01T10:00:00.123456789+02:00",
        ),
    )
    assert m.content.event == model.SetInfo(description="2024-01-01", keywords=["2024-01-01T00:00:00Z"])
    assert str(m.content.system_time) == "2024-01-01T08:00:00.123456789Z"


def test_block_version_2_manifest_is_accepted(tmp_path: Path):
    m = _read_one(tmp_path, block("kind: SetInfo").replace("version: 3", "version: 2"))
    assert m.version == 2
    assert m.content.prev_block_hash is not None and str(m.content.prev_block_hash) == HASH


def test_null_optional_fields_are_absent(tmp_path: Path):
    m = _read_one(tmp_path, snapshot(polling(read="kind: Csv\nheader: null\nseparator: ~")))
    assert m.content.metadata[0].read == model.ReadStepCsv()


def test_valid_snapshot_passes_odf_validate(tmp_path: Path):
    path = tmp_path / "ok.yaml"
    path.write_text(snapshot(PUSH, name="my.data-set"), encoding="utf-8")
    proc = subprocess.run(
        [str(ODF), "snapshot", "validate", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{path}: ok (my.data-set, Root, 1 events)"
    assert proc.stderr == ""

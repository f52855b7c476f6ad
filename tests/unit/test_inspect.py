"""`odf inspect lineage|query|schema` (in process, no engine) on the example pipeline, and on a repository
of the reference's real manifests: the graph's nodes and edges, its DOT, SVG and HTML, the history of
a derivative's query and of a schema, each block in order."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.repo.remotes import PULL, remember_remote
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.data_schema import data_schema_from_arrow, strip_encoding
from tests.paths import skip_without_upstream, upstream_manifests
from tests.unit.test_delete_rename import DAILY, OTHER, TRADES, WEEKLY, make_repo

EVIL = '<script>alert("x")</script>&'
needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None, reason="no Graphviz `dot` (scripts/test installs it with apt)"
)


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return make_repo(tmp_path / "repo")


def run(repo: Repository | Path, capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> str:
    root = repo.root if isinstance(repo, Repository) else repo
    assert main([*args, "--repo", str(root)]) == code, capsys.readouterr().err
    out, err = capsys.readouterr()
    return err if code else out


def ids(repo: Repository) -> dict[str, str]:
    return {name: str(did) for name, did in repo.list()}


# ----- lineage -----


def test_lineage_json_has_every_dataset_and_each_input(repo: Repository, capsys: Any) -> None:
    graph = json.loads(run(repo, capsys, "inspect", "lineage", "-o", "json"))
    did = ids(repo)
    trades = repo.dataset(TRADES).state()
    assert {n["id"]: (n["name"], n["kind"]) for n in graph["nodes"]} == {
        did[TRADES]: (TRADES, "Root"),
        did[DAILY]: (DAILY, "Derivative"),
        did[WEEKLY]: (WEEKLY, "Derivative"),
        did[OTHER]: (OTHER, "Root"),
    }
    node = next(n for n in graph["nodes"] if n["id"] == did[TRADES])
    assert node["head"] == str(trades.head) and node["records"] == 0
    assert node["last_update"] == str(trades.system_time)
    assert graph["edges"] == [
        {"from": did[TRADES], "to": did[DAILY], "relation": "input"},
        {"from": did[DAILY], "to": did[WEEKLY], "relation": "input"},
    ]


def test_lineage_of_names_keeps_their_upstream_and_downstream_only(repo: Repository, capsys: Any) -> None:
    graph = json.loads(run(repo, capsys, "inspect", "lineage", DAILY, "-o", "json"))
    assert {n["name"] for n in graph["nodes"]} == {TRADES, DAILY, WEEKLY}
    graph = json.loads(run(repo, capsys, "inspect", "lineage", OTHER, "-o", "json"))
    assert [n["name"] for n in graph["nodes"]] == [OTHER] and graph["edges"] == []
    err = run(repo, capsys, "inspect", "lineage", "com.example.nope", code=2)
    assert err.startswith("no dataset named 'com.example.nope' in ")


def test_remote_origins_and_outside_inputs_are_nodes(repo: Repository, capsys: Any) -> None:
    remember_remote(repo.dataset(OTHER), PULL, "https://user:secret@example.org/odf/other?sig=abc")
    outside, _ = DatasetId.generate()
    weekly = repo.dataset(WEEKLY)
    weekly.commit([_transform_of(repo, [(DAILY, "daily"), (outside, EVIL)])])
    graph = json.loads(run(repo, capsys, "inspect", "lineage", "-o", "json"))
    nodes = {n["id"]: n for n in graph["nodes"]}
    remote = "https://***@example.org/odf/other?***"  # credentials never shown
    assert nodes[remote]["kind"] == "Remote"
    assert {"from": remote, "to": ids(repo)[OTHER], "relation": "pulled from"} in graph["edges"]
    assert nodes[str(outside)] == {**nodes[str(outside)], "name": EVIL, "kind": None}
    assert {"from": str(outside), "to": ids(repo)[WEEKLY], "relation": "input"} in graph["edges"]
    assert "secret" not in run(repo, capsys, "inspect", "lineage")


def _transform_of(repo: Repository, inputs: list[tuple[Any, str]]) -> model.SetTransform:
    return model.SetTransform(
        inputs=[
            model.TransformInput(dataset_ref=str(repo.resolve(ref) if isinstance(ref, str) else ref), alias=a)
            for ref, a in inputs
        ],
        transform=model.TransformSql(
            engine="spark", queries=[model.SqlQueryStep(query="SELECT * FROM daily")]
        ),
    )


def test_lineage_as_text_is_a_tree(repo: Repository, capsys: Any) -> None:
    head = {name: str(repo.dataset(name).head())[-8:] for name, _ in repo.list()}
    text = run(repo, capsys, "inspect", "lineage")
    shape = [re.sub(r"  \[.*\]$", "", line) for line in text.splitlines()]
    assert shape == [TRADES, f"└── {DAILY}", f"    └── {WEEKLY}", OTHER]
    assert f"{TRADES}  [Root, 0 records, head …{head[TRADES]}, updated " in text


def test_lineage_as_dot(repo: Repository, capsys: Any) -> None:
    dot = run(repo, capsys, "inspect", "lineage", "-o", "dot")
    assert dot.startswith("digraph lineage {\n") and dot.endswith("}\n")
    assert len(re.findall(r"^  n\d+ \[label=", dot, re.M)) == 4
    assert re.findall(r"^  (n\d+ -> n\d+);$", dot, re.M) == ["n0 -> n1", "n1 -> n2"]
    head = str(repo.dataset(TRADES).head())[-8:]
    assert f'n0 [label="{TRADES}\\nRoot\\n0 records · head …{head}\\nupdated ' in dot


@needs_dot
def test_lineage_as_svg_draws_one_node_per_dataset(repo: Repository, capsys: Any) -> None:
    svg = run(repo, capsys, "inspect", "lineage", "-o", "svg")
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert len(re.findall(r'<g id="node\d+" class="node">', svg)) == 4
    assert svg.count('class="edge"') == 2
    for name in (TRADES, DAILY, WEEKLY, OTHER):
        assert f">{name}</text>" in svg


@needs_dot
def test_lineage_as_html_is_one_file_that_loads_nothing(repo: Repository, capsys: Any) -> None:
    outside, _ = DatasetId.generate()
    repo.dataset(WEEKLY).commit([_transform_of(repo, [(DAILY, "daily"), (outside, EVIL)])])
    remember_remote(repo.dataset(OTHER), PULL, f"https://example.org/{EVIL}")
    page = run(repo, capsys, "inspect", "lineage", "-o", "html")
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
    assert not re.search(r"<(script|link|img|iframe|object)\b", page)
    assert "default-src 'none'" in page
    assert EVIL not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in page


def test_without_graphviz_svg_and_html_say_so(
    repo: Repository, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    for output in ("svg", "html"):
        err = run(repo, capsys, "inspect", "lineage", "-o", output, code=2)
        assert err.startswith("Graphviz is not installed (no `dot` on PATH): install it") and "-o dot" in err
    assert run(repo, capsys, "inspect", "lineage", "-o", "dot").startswith("digraph")


# ----- query history -----


def test_query_history_newest_first_with_blocks(repo: Repository, capsys: Any) -> None:
    weekly = repo.dataset(WEEKLY)
    first = _set_transform_blocks(weekly)
    inputs = [
        model.TransformInput(dataset_ref=DAILY, alias="daily"),
        model.TransformInput(dataset_ref=TRADES, alias="trades"),
    ]
    queries = [
        model.SqlQueryStep(alias="joined", query="SELECT * FROM daily JOIN trades USING (symbol)"),
        model.SqlQueryStep(query="SELECT * FROM joined"),
    ]
    transform = model.SetTransform(
        inputs=inputs, transform=model.TransformSql(engine="spark", queries=queries)
    )
    changed = model.DatasetSnapshot(name=WEEKLY, kind=model.DatasetKind.DERIVATIVE, metadata=[transform])
    repo.add(changed)
    blocks = _set_transform_blocks(weekly)
    assert len(blocks) == 2 and blocks[1] == first[0]
    plain = json.loads(run(repo, capsys, "inspect", "query", WEEKLY, "--format", "json"))
    assert [v["block"] for v in plain["versions"]] == blocks
    newest, oldest = plain["versions"]
    assert newest["queries"] == [
        {"alias": "joined", "query": "SELECT * FROM daily JOIN trades USING (symbol)"},
        {"alias": None, "query": "SELECT * FROM joined"},
    ]
    did = ids(repo)
    assert newest["inputs"] == [
        {"alias": "daily", "dataset_id": did[DAILY], "name": DAILY},
        {"alias": "trades", "dataset_id": did[TRADES], "name": TRADES},
    ]
    assert oldest["queries"] == [{"alias": None, "query": f"SELECT * FROM `{DAILY}`"}]
    assert oldest["engine"] == "spark"
    assert newest["system_time"] == str(weekly.block(Multihash.parse(blocks[0])).system_time)

    text = run(repo, capsys, "inspect", "query", WEEKLY)
    assert re.findall(r"^block (\S+)", text, re.M) == blocks
    assert f"    daily: {DAILY} {did[DAILY]}\n" in text and "  step joined:\n" in text


def _set_transform_blocks(dataset: Any) -> list[str]:
    return [str(h) for h, b in dataset.iter_blocks(dataset.head()) if isinstance(b.event, model.SetTransform)]


def test_query_of_a_root_is_a_clear_message(repo: Repository, capsys: Any) -> None:
    err = run(repo, capsys, "inspect", "query", TRADES, code=2)
    assert err == f"{TRADES} is a root dataset: its data comes from its sources, not from a query " + (
        f"(`odf log {TRADES}` shows its events)\n"
    )


# ----- schema history -----


def _schema(*extra: pa.Field) -> model.DataSchema:
    columns = [
        pa.field("offset", pa.int64(), False),
        pa.field("op", pa.int32(), False),
        pa.field("system_time", pa.timestamp("ms", tz="UTC"), False),
        pa.field("event_time", pa.timestamp("ms", tz="UTC")),
        pa.field("symbol", pa.string()),
        *extra,
    ]
    return strip_encoding(data_schema_from_arrow(pa.schema(columns)))


def test_schema_and_its_history(repo: Repository, capsys: Any) -> None:
    trades = repo.dataset(TRADES)
    err = run(repo, capsys, "inspect", "schema", TRADES, code=2)
    assert err == f"{TRADES} has no schema yet: its first ingest or transform records one\n"
    first = trades.commit([model.SetDataSchema(schema=_schema())]).new_head
    second = trades.commit([model.SetDataSchema(schema=_schema(pa.field("price", pa.float64())))]).new_head

    current = json.loads(run(repo, capsys, "inspect", "schema", TRADES, "--format", "json"))
    assert [v["block"] for v in current["versions"]] == [str(second)]
    assert [f["name"] for f in current["versions"][0]["schema"]["fields"]][-1] == "price"

    history = json.loads(run(repo, capsys, "inspect", "schema", TRADES, "--history", "--format", "json"))
    assert [v["block"] for v in history["versions"]] == [str(second), str(first)]
    newest, oldest = history["versions"]
    assert newest["changes"] == [
        {
            "column": "price",
            "old": None,
            "new": "Option<Float64>",
            "rule": "optional-column-added",
            "allowed": True,
        }
    ]
    assert oldest["changes"] is None and oldest["legacy"] is False

    text = run(repo, capsys, "inspect", "schema", TRADES, "--history")
    assert re.findall(r"^block (\S+)", text, re.M) == [str(second), str(first)]
    assert re.search(r"^  price\s+-\s+Option<Float64>\s+optional-column-added\s+yes$", text, re.M)
    assert "  the first schema\n" in text and "    price DOUBLE" in text
    assert "the first schema" not in run(repo, capsys, "inspect", "schema", TRADES)


# ----- the reference's real manifests -----


@pytest.fixture(scope="module")
def upstream_repo(tmp_path_factory: pytest.TempPathFactory) -> Repository:
    """Every real manifest the reference ships, added in dependency order (those whose inputs are
    missing from the material are refused by `odf add` and left out)."""
    skip_without_upstream()
    root = tmp_path_factory.mktemp("upstream") / "repo"
    Repository.init(root)
    main(["add", *map(str, upstream_manifests()), "--repo", str(root)])
    return Repository.open(root)


def test_lineage_and_queries_of_the_real_manifests(upstream_repo: Repository, capsys: Any) -> None:
    repo = upstream_repo
    listed = repo.list()
    graph = json.loads(run(repo, capsys, "inspect", "lineage", "-o", "json"))
    assert {n["id"] for n in graph["nodes"]} == {str(did) for _, did in listed}
    expected_edges = set()
    derivatives = []
    for name, did in listed:
        state = repo.dataset(name).state()
        if state.transform is not None:
            derivatives.append(name)
            expected_edges |= {(i.dataset_ref, str(did)) for i in state.transform.inputs}
    assert derivatives and {(e["from"], e["to"]) for e in graph["edges"]} == expected_edges
    for name in derivatives:
        plain = json.loads(run(repo, capsys, "inspect", "query", name, "--format", "json"))
        (version,) = plain["versions"]  # each manifest sets its transform once
        assert version["block"] == _set_transform_blocks(repo.dataset(name))[0]
        assert all(i["name"] is not None for i in version["inputs"])  # every input resolved by DID
        assert version["queries"] and all(q["query"] for q in version["queries"])

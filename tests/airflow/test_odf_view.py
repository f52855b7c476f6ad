"""The ODF view (airflow_odf/ui) through FastAPI's TestClient, against a repository the tests make: the
pages and what they show, escaping of untrusted text, errors as pages, Airflow's auth, the plugin on the
real API server app, and the extra link that opens the view.

The repository is made with the core alone (real Parquet slices, no engine): the example pipeline's two
datasets from their manifests, two slices of trades and one of the daily derivative.
"""

from __future__ import annotations

import html
import itertools
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from airflow_odf.odf.chain.dataset import Dataset, StagedObject
from airflow_odf.odf.chain.verification import read_record, verify_dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import read_manifests
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.hashing.arrow_digest import logical_hash_of_table
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.data_schema import data_schema_from_arrow, strip_encoding
from tests.paths import REPO

MANIFESTS = REPO / "dags_examples" / "manifests"
CONN = "odf_view"
EVIL = '<script>alert("x")</script>&'
T0 = Timestamp.parse("2024-01-02T00:00:00Z")
needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None, reason="no Graphviz `dot` (scripts/test installs it with apt)"
)


def _slice(directory: Path, start: int, columns: dict[str, pa.Array]) -> tuple[Path, pa.Table]:
    n = len(next(iter(columns.values())))
    table = pa.table(
        {
            "offset": pa.array(range(start, start + n), pa.int64()),
            "op": pa.array([0] * n, pa.int32()),
            "system_time": pa.array([T0.to_datetime()] * n, pa.timestamp("ms", tz="UTC")),
            **columns,
        }
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"slice-{start}-{n}.parquet"
    pq.write_table(table, path, row_group_size=2)  # several row groups: the view reads the last ones only
    return path, table


def commit_slice(
    dataset: Dataset, staging: Path, columns: dict[str, pa.Array], inputs: list[Dataset] = ()
) -> Multihash:
    """One data block (AddData, or ExecuteTransform over `inputs`), with its SetDataSchema first."""
    state = dataset.state()
    start = 0 if state.last_offset is None else state.last_offset + 1
    path, table = _slice(staging, start, columns)
    physical = Multihash.sha3_256(path.read_bytes())
    new_data = model.DataSlice(
        logical_hash=logical_hash_of_table(table),
        physical_hash=physical,
        offset_interval=model.OffsetInterval(start=start, end=start + table.num_rows - 1),
        size=path.stat().st_size,
    )
    events: list[Any] = []
    if state.schema is None:
        events.append(model.SetDataSchema(schema=strip_encoding(data_schema_from_arrow(table.schema))))
    if inputs:
        query_inputs = []
        for upstream in inputs:
            up = upstream.state()
            prev = state.transform_inputs.get(str(up.dataset_id))
            query_inputs.append(
                model.ExecuteTransformInput(
                    dataset_id=up.dataset_id,
                    prev_block_hash=prev.new_block_hash if prev else None,
                    new_block_hash=up.head,
                    prev_offset=prev.new_offset if prev else None,
                    new_offset=up.last_offset,
                )
            )
        events.append(
            model.ExecuteTransform(
                query_inputs=query_inputs, prev_offset=state.last_offset, new_data=new_data
            )
        )
    else:
        events.append(model.AddData(prev_offset=state.last_offset, new_data=new_data))
    return dataset.commit(events, objects=[StagedObject(f"data/{physical}", path)]).new_head


def _times(*days: int) -> pa.Array:
    return pa.array(
        [Timestamp.parse(f"2024-01-{d:02d}T10:00:00Z").to_datetime() for d in days],
        pa.timestamp("ms", tz="UTC"),
    )


def make_pipeline(root: Path) -> Repository:
    """`com.example.trades` (two slices, one holding markup) and `com.example.trades.daily` (one)."""
    repo = Repository.init(root)
    for name in ("com.example.trades.yaml", "com.example.trades.daily.yaml"):
        (manifest,) = read_manifests(MANIFESTS / name)
        repo.add(manifest.content)
    trades, daily = repo.dataset("com.example.trades"), repo.dataset("com.example.trades.daily")
    staging = root.parent / "staging"
    commit_slice(
        trades,
        staging,
        {
            "event_time": _times(2, 2, 2),
            "symbol": pa.array(["ACME", "INIT", "ACME"]),
            "trade_id": pa.array([1, 2, 3], pa.int64()),
            "quantity": pa.array([10, 20, 30], pa.int64()),
        },
    )
    commit_slice(
        trades,
        staging,
        {
            "event_time": _times(3, 3),
            "symbol": pa.array([EVIL, "LAST"]),
            "trade_id": pa.array([4, 5], pa.int64()),
            "quantity": pa.array([40, 50], pa.int64()),
        },
    )
    commit_slice(
        daily,
        staging,
        {
            "event_time": _times(2, 3),
            "symbol": pa.array(["ACME", "LAST"]),
            "volume": pa.array([40, 50], pa.int64()),
            "trades": pa.array([2, 1], pa.int64()),
        },
        inputs=[trades],
    )
    return repo


def _conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, host: str, conn_type: str = "odf_repo") -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": conn_type, "host": host}))


@pytest.fixture(scope="module")
def auth(airflow_db: None) -> Any:
    """The configured (simple) auth manager, as the API server initializes it (tokens are checked
    against the metadata DB's revoked tokens)."""
    from airflow.api_fastapi.app import init_auth_manager

    return init_auth_manager()


def token(auth: Any, role: str | None) -> str:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return auth.generate_jwt(SimpleAuthManagerUser(username=f"user-{role}", role=role))


@pytest.fixture
def client(auth: Any) -> Iterator[TestClient]:
    """The view's app, called as a user who may read connections (the simple auth manager's Op role)."""
    from airflow_odf.ui.app import create_app

    with TestClient(create_app(), headers={"Authorization": f"Bearer {token(auth, 'op')}"}) as c:
        yield c


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repository:
    repo = make_pipeline(tmp_path / "repo")
    _conn(monkeypatch, CONN, (tmp_path / "repo").as_uri())
    return repo


def _texts(page: str) -> str:
    """The page's text without tags (entities left as they are)."""
    return re.sub(r"<[^>]+>", " ", page)


# ----- pages -----


@needs_dot
def test_the_repository_page_lists_every_dataset_and_draws_the_lineage(
    client: TestClient, pipeline: Repository
) -> None:
    response = client.get(f"/connections/{CONN}")
    assert response.status_code == 200, response.text
    page = response.text
    trades, daily = pipeline.dataset("com.example.trades"), pipeline.dataset("com.example.trades.daily")
    for name, dataset, kind, records in (
        ("com.example.trades", trades, "Root", 5),
        ("com.example.trades.daily", daily, "Derivative", 2),
    ):
        state = dataset.state()
        row = re.search(rf'<tr><td><a href="/connections/{CONN}/datasets/{re.escape(name)}">.*?</tr>', page)
        assert row is not None, name
        cells = re.findall(r"<td>(.*?)</td>", row.group(0))
        assert cells[1] == kind and cells[3] == str(state.num_blocks) and cells[4] == str(records)
        assert str(state.head) in cells[2] and cells[5] == str(state.system_time)
    # the graph: Graphviz's SVG, one node per dataset, linked to its page, an edge between them
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert "com.example.trades.daily</text>" in svg and "com.example.trades</text>" in svg
    assert f'xlink:href="/connections/{CONN}/datasets/com.example.trades.daily"' in svg
    assert svg.count('class="edge"') == 1
    assert response.headers["content-security-policy"].startswith("default-src 'none'")


def test_the_dataset_page_shows_records_schema_and_chain(client: TestClient, pipeline: Repository) -> None:
    trades = pipeline.dataset("com.example.trades")
    response = client.get(f"/connections/{CONN}/datasets/com.example.trades")
    assert response.status_code == 200, response.text
    page = response.text
    # the latest records, newest first, read from the last slices
    records = page[page.index("Latest records") : page.index("<h2>Schema")]
    ids = [int(cell) for cell in re.findall(r"<tr><td>(\d+)</td>", records)]
    assert ids == [4, 3, 2, 1, 0]  # offsets
    assert "LAST" in records and "INIT" in records
    # the schema at the head
    schema = page[page.index("<h2>Schema") : page.index("Metadata chain")]
    assert "trade_id BIGINT,\nquantity BIGINT</pre>" in schema  # the columns as DDL
    assert "name: trade_id" in schema and "name: quantity" in schema  # and all of it as YAML
    # the chain, newest first, each block linked to its page and to the one before
    blocks = list(trades.iter_blocks())
    chain = page[page.index("Metadata chain") :]
    shown = re.findall(
        r'<a href="[^"]*/blocks/(f[0-9a-f]+)" title="[^"]+">[0-9a-f]{8}</a></span></td><td>(\w+)', chain
    )
    assert shown == [(str(h), type(b.event).__name__) for h, b in blocks]
    assert "2 record(s), offsets 3–4" in chain and "Trades executed on an example exchange." in chain
    for (h, _), (prev, _) in itertools.pairwise(blocks):
        assert f"/blocks/{prev}" in chain and f"/blocks/{h}" in chain


def test_a_long_chain_is_shown_a_page_at_a_time(client: TestClient, pipeline: Repository) -> None:
    trades = pipeline.dataset("com.example.trades")
    trades.commit([model.SetInfo(description=f"revision {i}") for i in range(60)])
    blocks = [str(h) for h, _ in trades.iter_blocks()]
    assert len(blocks) == 67
    seen: list[str] = []
    path = f"/connections/{CONN}/datasets/com.example.trades"
    while path:
        page = client.get(path).text
        chain = page[page.index("Metadata chain") :]
        rows = re.findall(
            r'<tr(?: class="current")?><td>\d+</td><td><span class="hash"><a href="[^"]*/blocks/(f\w+)"',
            chain,
        )
        assert len(rows) == min(50, len(blocks) - len(seen))
        seen += rows
        older = re.search(r'<a href="([^"]+)">Older blocks →</a>', chain)
        path = html.unescape(older.group(1)) if older else ""
    assert seen == blocks  # newest first, each once, down to the Seed


def test_the_last_verification_is_shown_from_its_record(client: TestClient, pipeline: Repository) -> None:
    trades = pipeline.dataset("com.example.trades")
    assert (
        '<th>Last verification</th><td><span class="note">—</span>'
        in client.get(f"/connections/{CONN}/datasets/com.example.trades").text
    )
    report = verify_dataset(trades)  # integrity from the Seed, recorded in info/verification
    assert report.ok, report.problems
    record = read_record(trades).integrity
    assert record is not None and record.head == trades.existing_head()
    did = str(pipeline.resolve("com.example.trades"))  # created here, so its heads are signed
    assert record.signer == did
    signed = f'signed by <span class="hash" title="{did}">did:odf:…{did[-8:]}</span>'
    shown = f"{str(record.head)[-8:]}</span> {record.verified_at} (full) · {signed}"
    assert shown in client.get(f"/connections/{CONN}/datasets/com.example.trades").text
    assert shown in client.get(f"/connections/{CONN}").text


def test_the_chain_shows_the_checks_each_commit_passed(client: TestClient, pipeline: Repository) -> None:
    from airflow_odf.odf.checks.record import record_checks
    from airflow_odf.odf.checks.results import CheckResult

    trades = pipeline.dataset("com.example.trades")
    head = str(trades.existing_head())
    results = [CheckResult(f"c{i}", "table", None, "sql", True, 1, "true") for i in range(4)]
    record_checks(trades, head, results)
    page = client.get(f"/connections/{CONN}/datasets/com.example.trades").text
    assert "<th>Checks</th>" in page
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", page, re.S)
    # only the row of the commit that ran them
    assert [f"/blocks/{head}" in r for r in rows if "4/4 passed" in r] == [True]
    assert "<td>—</td>" in next(r for r in rows if "Seed" in r)


def test_a_block_page_shows_its_event_and_links_the_previous_block(
    client: TestClient, pipeline: Repository
) -> None:
    daily = pipeline.dataset("com.example.trades.daily")
    head = daily.existing_head()
    block = daily.block(head)
    response = client.get(f"/connections/{CONN}/datasets/com.example.trades.daily/blocks/{head}")
    assert response.status_code == 200, response.text
    assert "kind: ExecuteTransform" in response.text and "queryInputs:" in response.text
    assert f'href="/connections/{CONN}/datasets/com.example.trades.daily/blocks/{block.prev_block_hash}"' in (
        response.text
    )


def test_the_schema_page_shows_each_version_and_the_evolution_between_them(
    client: TestClient, pipeline: Repository
) -> None:
    trades = pipeline.dataset("com.example.trades")
    state = trades.state()
    assert state.schema is not None and state.schema.schema is not None
    added = model.DataField(name="venue", type=model.DataTypeOption(inner=model.DataTypeString()))
    wider = model.DataSchema(fields=[*state.schema.schema.fields, added])
    trades.commit([model.SetDataSchema(schema=wider)])
    response = client.get(f"/connections/{CONN}/datasets/com.example.trades/schema")
    assert response.status_code == 200, response.text
    page = response.text
    assert page.count("<h2>Block ") == 2
    newest = page[: page.index("<h2>Block ", page.index("<h2>Block ") + 1)]
    assert re.search(
        r"<td>venue</td><td>—</td><td>Option&lt;String&gt;</td><td>optional-column-added</td>", newest
    )
    assert '<span class="allowed">allowed</span>' in newest and "name: venue" in newest
    assert "The first schema." in page[len(newest) :]


def test_the_page_as_of_an_older_head_starts_there(client: TestClient, pipeline: Repository) -> None:
    """What the extra link opens: the dataset as of the head the task committed."""
    trades = pipeline.dataset("com.example.trades")
    head, older = [h for h, _ in trades.iter_blocks()][:2]
    response = client.get(f"/connections/{CONN}/datasets/com.example.trades", params={"head": str(older)})
    assert response.status_code == 200, response.text
    page = response.text
    assert "Showing the dataset as of block" in page and '<tr class="current"><td>' in page
    chain = page[page.index("Metadata chain") :]
    assert f"/blocks/{head}" not in chain.split("Previous block")[1]  # the newer block is not listed
    records = page[page.index("Latest records") : page.index("<h2>Schema")]
    assert [int(c) for c in re.findall(r"<tr><td>(\d+)</td>", records)] == [2, 1, 0]


def test_everything_from_the_repository_is_escaped(client: TestClient, pipeline: Repository) -> None:
    trades = pipeline.dataset("com.example.trades")
    trades.commit([model.SetInfo(description=f"desc {EVIL}")])
    for path in ("", "/blocks/" + str(trades.existing_head())):
        page = client.get(f"/connections/{CONN}/datasets/com.example.trades{path}").text
        assert "<script" not in page
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in page


@needs_dot
def test_names_in_the_graph_are_escaped() -> None:
    """An input outside the repository is drawn by the alias a SetTransform gives it: any text."""
    from airflow_odf.odf.repo.lineage import Lineage, LineageNode
    from airflow_odf.odf.repo.lineage_picture import lineage_dot, lineage_svg

    evil = f'a"]; x [label="injected"]; \\N {EVIL}'
    graph = Lineage([LineageNode("did:odf:x", evil, None), LineageNode("did:odf:y", "b", "Root")], [])
    dot = lineage_dot(graph, lambda key: None)
    assert len(re.findall(r"^  n\d+ \[", dot, re.M)) == 2  # two node statements: nothing injected
    svg = lineage_svg(graph, lambda key: None)
    assert "<script" not in svg and "injected" in svg and "&lt;script&gt;" in svg
    assert svg.count('class="node"') == 2


def test_the_index_lists_odf_connections(client: TestClient, pipeline: Repository) -> None:
    page = client.get("/").text
    assert f'<a href="/connections/{CONN}">{CONN}</a>' in page


# ----- errors -----


def test_an_unknown_dataset_is_a_404_naming_it(client: TestClient, pipeline: Repository) -> None:
    response = client.get(f"/connections/{CONN}/datasets/com.example.nope")
    assert response.status_code == 404
    assert "no dataset named &#x27;com.example.nope&#x27; in " in response.text
    assert client.get(f"/connections/{CONN}/datasets/bad..name").status_code == 404


@pytest.mark.parametrize(
    "path, status, message",
    [
        ("/connections/no_such_conn", 404, "no connection &#x27;no_such_conn&#x27;"),
        ("/connections/{conn}/datasets/com.example.trades/blocks/f1620" + "0" * 64, 404, "no block f1620"),
        (
            "/connections/{conn}/datasets/com.example.trades?head=xyz",
            400,
            "&#x27;xyz&#x27; is not a block hash",
        ),
    ],
)
def test_unknown_connections_and_blocks(
    client: TestClient, pipeline: Repository, path: str, status: int, message: str
) -> None:
    response = client.get(path.format(conn=CONN))
    assert response.status_code == status
    assert message in response.text and "Traceback" not in response.text


def test_a_connection_of_another_type_is_not_shown(
    client: TestClient, pipeline: Repository, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _conn(monkeypatch, "some_http", "http://127.0.0.1:9", conn_type="http")
    response = client.get("/connections/some_http")
    assert response.status_code == 404
    assert "of type &#x27;http&#x27;, not an ODF repository (odf_repo)" in response.text


def test_a_folder_that_is_not_a_repository_is_an_error_page(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "empty").mkdir()
    _conn(monkeypatch, "odf_empty", (tmp_path / "empty").as_uri())
    response = client.get("/connections/odf_empty")
    assert response.status_code == 500
    assert "Cannot read the repository" in response.text and "is not an ODF repository" in response.text


@needs_dot
def test_a_damaged_dataset_is_listed_as_broken_and_its_page_names_the_damage(
    client: TestClient, pipeline: Repository
) -> None:
    daily = pipeline.dataset("com.example.trades.daily")
    (Path(daily.store.local_path("refs/head"))).unlink()
    listing = client.get(f"/connections/{CONN}").text
    assert "BROKEN" in listing and "refs/head is missing" in listing
    assert "com.example.trades</text>" in listing  # the other dataset is still there, and drawn
    response = client.get(f"/connections/{CONN}/datasets/com.example.trades.daily")
    assert response.status_code == 500
    assert "com.example.trades.daily: refs/head is missing" in response.text


def test_a_damaged_slice_is_an_error_page_naming_it(client: TestClient, pipeline: Repository) -> None:
    trades = pipeline.dataset("com.example.trades")
    last = trades.state().data_slices.texts()[-1]
    Path(trades.store.local_path(f"data/{last}")).write_bytes(b"not parquet")
    response = client.get(f"/connections/{CONN}/datasets/com.example.trades")
    assert response.status_code == 500
    assert f"data/{last}: cannot read data slice" in response.text


def test_the_view_writes_nothing(client: TestClient, pipeline: Repository) -> None:
    """Not even the summary cache a reader would refresh: the view opens repositories read-only."""
    trades = pipeline.dataset("com.example.trades")
    summary = Path(trades.store.local_path("info/summary"))
    summary.unlink()
    root = pipeline.root
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    for path in ("", "/datasets/com.example.trades", "/datasets/com.example.trades/schema"):
        assert client.get(f"/connections/{CONN}{path}").status_code == 200
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before


def test_without_graphviz_the_lineage_is_a_list(
    client: TestClient, pipeline: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    page = client.get(f"/connections/{CONN}").text
    assert "<svg" not in page and "Graphviz is not installed on the API server" in page
    assert "<tr><td>com.example.trades</td><td>com.example.trades.daily</td></tr>" in page


# ----- auth -----


@pytest.mark.parametrize(
    "path", ["/", f"/connections/{CONN}", f"/connections/{CONN}/datasets/com.example.trades"]
)
def test_requests_without_a_token_are_refused(auth: Any, pipeline: Repository, path: str) -> None:
    from airflow_odf.ui.app import create_app

    response = TestClient(create_app()).get(path)
    assert response.status_code == 401
    assert "Not authenticated" in response.text and "com.example" not in response.text


@pytest.mark.parametrize("path", [f"/connections/{CONN}", f"/connections/{CONN}/datasets/com.example.trades"])
def test_a_user_who_may_not_read_the_connection_is_refused_and_told_why(
    auth: Any, pipeline: Repository, path: str
) -> None:
    from airflow_odf.ui.app import create_app

    viewer = TestClient(create_app(), headers={"Authorization": f"Bearer {token(auth, 'viewer')}"})
    response = viewer.get(path)
    assert response.status_code == 403 and "com.example.trades" not in response.text.split("</h1>")[1]
    text = " ".join(_texts(response.text).split())
    assert f"You may not read the connection {CONN} ." in text
    assert "permission to read Connections" in text


def test_the_index_tells_a_viewer_what_they_lack(auth: Any, pipeline: Repository) -> None:
    """Issue 36: a Viewer was told to "Add one (Admin → Connections)" although connections existed."""
    from airflow_odf.ui.app import create_app

    viewer = TestClient(create_app(), headers={"Authorization": f"Bearer {token(auth, 'viewer')}"})
    response = viewer.get("/")
    assert response.status_code == 200
    text = " ".join(_texts(response.text).split())
    assert "You may not read any odf_repo connection." in text and "permission to read Connections" in text
    assert "Add one" not in text and CONN not in text


def test_the_index_says_why_it_lists_no_connection() -> None:
    from airflow_odf.ui.pages import Paths, index_page

    def text(**flags: bool) -> str:
        return " ".join(_texts(index_page(Paths(""), [], **flags)).split())

    assert "Add one (Admin → Connections" in text(hidden=False, may_read=True, may_add=True)
    assert "your role may not add one" in text(hidden=False, may_read=True, may_add=False)
    for lacking in (
        text(hidden=True, may_read=True, may_add=False),
        text(hidden=False, may_read=False, may_add=False),
    ):
        assert "You may not read any odf_repo connection." in lacking and "Add one" not in lacking
    listed = index_page(Paths(""), [("mine", "file:///r")], hidden=True, may_read=True, may_add=False)
    assert "Other odf_repo connections are not listed." in " ".join(_texts(listed).split())


# ----- the plugin on Airflow's API server -----


def test_the_api_server_mounts_the_view_under_odf(auth: Any, pipeline: Repository) -> None:
    from airflow.api_fastapi.app import create_app

    from airflow_odf.ui.plugin import OdfViewPlugin

    with TestClient(create_app(apps="core")) as api:
        plugins = api.get("/api/v2/plugins", headers={"Authorization": f"Bearer {token(auth, 'admin')}"})
        ours = [p for p in plugins.json()["plugins"] if p["name"] == OdfViewPlugin.name]
        assert ours and ours[0]["external_views"][0]["href"] == "odf/"
        assert api.get(f"/odf/connections/{CONN}").status_code == 401
        page = api.get(
            f"/odf/connections/{CONN}", headers={"Authorization": f"Bearer {token(auth, 'op')}"}
        ).text
    assert f'href="/odf/connections/{CONN}/datasets/com.example.trades"' in page  # links under the mount


# ----- the extra link -----


def test_the_extra_link_opens_the_view_at_the_committed_head() -> None:
    from airflow_odf.links import view_url

    result = {"dataset": "com.example.trades", "new_head": "f1620abc", "head": None}
    assert view_url("", "odf_default", result) == (
        "/odf/connections/odf_default/datasets/com.example.trades?head=f1620abc"
    )
    assert view_url("https://airflow.example.com/", "odf default", {"dataset": "a.b", "head": "f16"}) == (
        "https://airflow.example.com/odf/connections/odf%20default/datasets/a.b?head=f16"
    )
    assert view_url("", "odf_default", {"dataset": "a.b"}) == ""  # no head: a failed task
    assert view_url("", "odf_default", {"datasets": ["a", "b"]}) == ""  # several datasets


@pytest.mark.parametrize(
    "template, view, expected",
    [
        ("", "True", "/odf/connections/odf_prod/datasets/com.example.trades?head=f1620ab"),
        (
            "http://127.0.0.1:8080/{dataset_name}/blocks/{head}",
            "True",
            "http://127.0.0.1:8080/com.example.trades/blocks/f1620ab",
        ),
        ("", "False", ""),
    ],
)
def test_the_template_wins_over_the_view_and_the_view_can_be_turned_off(
    monkeypatch: pytest.MonkeyPatch, template: str, view: str, expected: str
) -> None:
    from airflow_odf import links

    monkeypatch.setenv("AIRFLOW__ODF__DATASET_URL_TEMPLATE", template)
    monkeypatch.setenv("AIRFLOW__ODF__DATASET_VIEW", view)
    result = {"dataset": "com.example.trades", "new_head": "f1620ab"}
    monkeypatch.setattr(links.XCom, "get_value", staticmethod(lambda **_: result))

    class Task:
        odf_conn_id = "odf_prod"

    assert links.OdfDatasetLink().get_link(Task(), ti_key=None) == expected


def test_an_http_remote_is_not_a_repository_to_list(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    _conn(monkeypatch, "odf_remote", "http://127.0.0.1:9/repo")
    response = client.get("/connections/odf_remote")
    assert response.status_code == 404
    assert "is an HTTP remote (http://127.0.0.1:9/repo), which lists no datasets" in response.text

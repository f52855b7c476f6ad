"""The ODF view in a real browser on the real API server: example DAG 1 runs (`dag.test()`, local Spark),
`airflow api-server` serves the view (the plugin from its entry point; the simple auth manager with
all-admins, so the browser needs no login), and headless Chromium (Debian's `chromium`, installed by
`scripts/test`) loads the repository page and the page the task's "ODF dataset" link opens.

The screenshots are kept in `test-artifacts/odf-view/` at the repository root (not in git).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_odf.links import OdfDatasetLink
from airflow_odf.odf.repo.repository import Repository
from tests.airflow.dag_runs import check_trades_pipeline, load_dag, xcom
from tests.paths import REPO

ARTIFACTS = REPO / "test-artifacts" / "odf-view"
CHROMIUM = shutil.which("chromium")
LINK_KEY = f"_link_{OdfDatasetLink.__name__}"

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (scripts/test installs it with apt)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def api_server(odf_repo: Path, airflow_db: None, tmp_path: Path) -> Iterator[str]:
    """`airflow api-server` on 127.0.0.1 with this session's metadata DB and connections; its base URL."""
    port = _free_port()
    env = {**os.environ, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"}
    airflow = Path(sys.executable).parent / "airflow"
    log_path = tmp_path / "api-server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [str(airflow), "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=5):
                    break
            except (urllib.error.URLError, OSError):
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the API server did not start:\n{log_path.read_text()[-4000:]}")
                time.sleep(0.5)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def chromium(url: str, *, screenshot: Path | None = None, scripts_ms: int = 0) -> str:
    """The DOM Chromium built from `url` (and a screenshot of it, if asked); `scripts_ms`: how long the
    page's scripts may run first (Airflow's own UI is a script; the view has none)."""
    with tempfile.TemporaryDirectory() as profile:
        common = [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--window-size=1400,1000",
            *([f"--virtual-time-budget={scripts_ms}"] if scripts_ms else []),
        ]
        dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0, dom.stderr[-3000:]
        if screenshot is not None:
            shot = subprocess.run(
                [*common, f"--screenshot={screenshot}", url], capture_output=True, text=True, timeout=120
            )
            assert shot.returncode == 0 and screenshot.stat().st_size > 0, shot.stderr[-3000:]
            print(f"screenshot: {screenshot}")
        return dom.stdout


@pytest.mark.usefixtures("spark")
def test_the_view_in_chromium_shows_the_example_pipeline(
    odf_repo: Path, api_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW__ODF__DATASET_URL_TEMPLATE", raising=False)
    run = load_dag("odf_trades_pipeline.py", "odf_trades_pipeline").test()
    check_trades_pipeline(run, odf_repo)
    repo = Repository.open(odf_repo)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    # the repository page: both datasets in the table and drawn in the lineage graph
    dom = chromium(f"{api_server}/odf/connections/odf_default", screenshot=ARTIFACTS / "repository.png")
    svg = dom[dom.index("<svg") : dom.index("</svg>")]
    for name in ("com.example.trades", "com.example.trades.daily"):
        assert f">{name}</text>" in svg
        assert f'href="/odf/connections/odf_default/datasets/{name}"' in dom
    assert svg.count('class="edge"') == 1

    # the "ODF dataset" link the worker stored for the transform: the view at the committed head
    head = str(repo.dataset("com.example.trades.daily").head())
    link = xcom(run, "transform_daily", key=LINK_KEY)
    assert link == f"/odf/connections/odf_default/datasets/com.example.trades.daily?head={head}"
    dom = chromium(api_server + link, screenshot=ARTIFACTS / "dataset.png")
    assert "<h1>com.example.trades.daily</h1>" in dom
    chain = dom[dom.index("Metadata chain") :]
    assert re.search(
        rf'<tr class="current"><td>\d+</td><td><span class="hash"><a href="[^"]*/blocks/{head}"', chain
    )
    records = dom[dom.index("Latest records") : dom.index("<h2>Schema")]
    assert "<th>volume</th>" in records and "<th>symbol</th>" in records

    chromium(
        f"{api_server}/odf/connections/odf_default/datasets/com.example.trades.daily/schema",
        screenshot=ARTIFACTS / "schema.png",
    )

    # inside Airflow's UI: Browse -> ODF datasets shows the view in a frame
    dom = chromium(f"{api_server}/plugin/odf", screenshot=ARTIFACTS / "airflow-ui.png", scripts_ms=20000)
    assert re.search(r'<iframe[^>]*src="[^"]*odf/"', dom), dom[-2000:]

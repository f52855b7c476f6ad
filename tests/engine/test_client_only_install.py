"""A worker with only `pyspark-client` (no JVM jars, no py4j) runs the `spark-connect` engine: in a
process where py4j and `pyspark.core` cannot be imported, as in such an install, every engine module
imports, and push ingests through the core and through `odf ingest --engine spark-connect` commit the
right records on a real Spark Connect server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from airflow_odf.odf.chain.data_access import read_slice
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository

MANIFEST = Path(__file__).parents[2] / "dags_examples" / "manifests" / "com.example.sensors.yaml"
NAME = "com.example.sensors"
READINGS = (
    '{"measured_at": "2024-01-02T00:00:00Z", "sensor_id": "a", "celsius": 1.5}\n'
    '{"measured_at": "2024-01-02T00:00:00Z", "sensor_id": "b", "celsius": 2.5}\n'
    '{"measured_at": "2024-01-02T00:00:00Z", "sensor_id": "c", "celsius": 3.5}\n'
)

# Run in a fresh interpreter: the finder goes in before anything imports pyspark.
CLIENT_ONLY_WORKER = """
import importlib, json, pkgutil, sys
from pathlib import Path

BLOCKED = ("py4j", "pyspark.core")


def is_blocked(name):
    return any(name == top or name.startswith(top + ".") for top in BLOCKED)


class BlockJvmPackages:
    def find_spec(self, name, path=None, target=None):
        if is_blocked(name):
            raise ImportError(f"{name} is not installed (client-only test)")
        return None


sys.meta_path.insert(0, BlockJvmPackages())

import pyspark.util

import airflow_odf.engine
from airflow_odf.cli.main import main as odf
from airflow_odf.engine.connect_runner import SparkConnectRunner
from airflow_odf.odf.format.manifests import read_single
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository

url, root, manifest, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
modules = [m.name for m in pkgutil.iter_modules(airflow_odf.engine.__path__)]
for module in modules:
    importlib.import_module(f"airflow_odf.engine.{module}")
for module in ("hooks.spark_engine", "operators.base", "operators.ingest", "operators.transform"):
    importlib.import_module(f"airflow_odf.{module}")  # the Airflow layer of a Connect-only worker

repo = Repository.init(root / "core-repo")
repo.add(read_single(manifest, "DatasetSnapshot"))
result = push_ingest(
    repo.dataset(name), name, SparkConnectRunner(url), [root / "readings.ndjson"],
    IngestOptions(work_dir=root / "work"), system_time=Timestamp.parse("2024-03-01T00:00:00Z"),
)

cli_repo = str(root / "cli-repo")
exit_codes = [
    odf(["init", "--repo", cli_repo]),
    odf(["add", "--repo", cli_repo, manifest]),
    odf(["ingest", "--repo", cli_repo, name, str(root / "readings.ndjson"),
         "--engine", "spark-connect", "--remote", url]),
]
print(json.dumps({
    "remote_only": pyspark.util.is_remote_only(),
    "engine_modules": modules,
    "blocked_modules_loaded": sorted(m for m in sys.modules if is_blocked(m)),
    "core_records": result.records,
    "cli_exit_codes": exit_codes,
}))
"""


def _slices(dataset: Dataset) -> list[model.DataSlice]:
    events = [block.event for _, block in reversed(list(dataset.iter_blocks()))]
    return [e.new_data for e in events if getattr(e, "new_data", None) is not None]


def _records(dataset: Dataset) -> list[tuple[int, int, str, float]]:
    """(offset, op, sensor_id, celsius) of every record, in offset order."""
    rows = [row for s in _slices(dataset) for row in read_slice(dataset, s).to_pylist()]
    return sorted((r["offset"], r["op"], r["sensor_id"], r["celsius"]) for r in rows)


def test_a_client_only_worker_ingests_on_spark_connect(connect_url: str, tmp_path: Path) -> None:
    (tmp_path / "readings.ndjson").write_text(READINGS)
    proc = subprocess.run(
        [sys.executable, "-c", CLIENT_ONLY_WORKER, connect_url, str(tmp_path), str(MANIFEST), NAME],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["remote_only"] is True  # pyspark itself sees a client-only install
    assert report["blocked_modules_loaded"] == []
    assert {"job", "connect_runner", "readers", "py4j_errors", "local_runner"} <= set(
        report["engine_modules"]
    )
    assert report["core_records"] == 3
    assert report["cli_exit_codes"] == [0, 0, 0], proc.stderr[-3000:]

    for repo in ("core-repo", "cli-repo"):
        dataset = Repository.open(tmp_path / repo).dataset(NAME)
        assert [(s.offset_interval.start, s.offset_interval.end) for s in _slices(dataset)] == [(0, 2)]
        assert _records(dataset) == [(0, 0, "a", 1.5), (1, 0, "b", 2.5), (2, 0, "c", 3.5)], repo

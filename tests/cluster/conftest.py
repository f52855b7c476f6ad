"""The standalone cluster of the scale-out tests (issue 26, item 5): one master and one worker for the
whole session, the worker blind to the coordinator's directories (tests/cluster/standalone.py), plus the
S3 server they share (moto on 127.0.0.1, the fixtures of tests/sharing), the s3a settings for it, and
one warm driver on the cluster (`odf engine serve --master spark://... --s3a`'s Spark Connect server,
issue 37) that the `odf` commands of the tests share instead of a spark-submit (a JVM) each.

The worker offers 4 cores (more than the machine has: slots, not CPUs) so that the warm driver's
executor (2 of them) and one spark-submit application at a time (the rest) run side by side."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.engine_client.connect_server import ConnectServer, ConnectServerError
from airflow_odf.utils.s3a import S3aJarsMissing, s3a_conf, s3a_jars
from tests.cluster.pipeline import S3Pipeline, build_pipeline
from tests.cluster.standalone import ClusterError, StandaloneCluster, cluster_root, unshare_command
from tests.paths import REPO
from tests.sharing.conftest import ACCESS_KEY, REGION, SECRET_KEY, moto_endpoint, s3_admin

__all__ = ["moto_endpoint", "s3_admin"]  # the S3 server and its admin client, shared with tests/sharing


def coordinator_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Where the coordinator keeps files the executors must not see: the session's temp base (the tests'
    repositories), the temp dir (default work and scratch dirs live there), $ODF_WORK_DIR if set —
    except a directory that holds what the worker runs (the venv, this checkout: a clone under /tmp)."""
    dirs = [tmp_path_factory.getbasetemp(), Path(tempfile.gettempdir())]
    if os.environ.get("ODF_WORK_DIR"):
        dirs.append(Path(os.environ["ODF_WORK_DIR"]))
    needed = [Path(sys.prefix).resolve(), REPO.resolve()]
    return [d for d in dirs if not any(d.resolve() == n or d.resolve() in n.parents for n in needed)]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """The running cluster (`cluster.master_url`); skipped, with the reason, where no private mount
    namespace is permitted."""
    unshare, why_not = unshare_command()
    if unshare is None:
        pytest.skip(f"the standalone cluster's worker needs its own mount namespace: {why_not}")
    root = cluster_root()
    try:
        running = StandaloneCluster(root, coordinator_dirs(tmp_path_factory), unshare, cores=4, memory="3g")
        running.start()
    except ClusterError as error:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(str(error), pytrace=False)
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def s3a_settings(moto_endpoint: str) -> dict[str, str]:
    """The Spark conf for s3a on the moto server (jars and credentials included), the jars fetched by the
    project's own script when this machine has none yet."""
    try:
        s3a_jars()
    except S3aJarsMissing:
        fetched = subprocess.run(
            [str(REPO / "scripts" / "s3a-jars")], capture_output=True, text=True, check=False
        )
        if fetched.returncode != 0:
            pytest.fail(f"scripts/s3a-jars failed: {fetched.stderr.strip()}", pytrace=False)
    return s3a_conf(
        endpoint=moto_endpoint, region=REGION, path_style=True, access_key=ACCESS_KEY, secret_key=SECRET_KEY
    )


WARM_ENGINE_CORES = 2
"""The warm driver's share of the worker's slots; a spark-submit application gets the others."""


@pytest.fixture(scope="session")
def warm_engine(cluster: StandaloneCluster, s3a_settings: dict[str, str]) -> Iterator[str]:
    """The `sc://` URL of one Spark Connect server for the session, its driver here (client mode), its
    executors on the cluster, with s3a on the moto server: `odf ... --engine spark-connect --remote URL
    --spark-s3a` runs there in seconds."""
    conf = {
        **s3a_settings,
        "spark.cores.max": str(WARM_ENGINE_CORES),
        "spark.pyspark.python": sys.executable,  # the executors' Python: this environment's
        "spark.sql.shuffle.partitions": "4",
    }
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # executors reach the driver on 127.0.0.1
    server = ConnectServer(cluster.master_url, port=0, conf=conf)
    try:
        url = server.start()
    except ConnectServerError as error:
        pytest.fail(f"{error}\n{cluster.logs()}", pytrace=False)
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_pipeline(
    warm_engine: str, moto_endpoint: str, s3_admin: Any, tmp_path_factory: pytest.TempPathFactory
) -> S3Pipeline:
    """The issue's pipeline in a bucket, built once through the warm driver (`pipeline.build_pipeline`)."""
    return build_pipeline(warm_engine, moto_endpoint, s3_admin, tmp_path_factory.mktemp("s3-pipeline"))

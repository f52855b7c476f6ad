"""One real deployment for the module: PostgreSQL, then Airflow's four components on it, with every ODF
task on the session's Spark Connect server (`connect_url`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.deployment.airflow_deployment import AirflowDeployment
from tests.deployment.postgres import PostgresServer
from tests.sharing.conftest import moto_endpoint, s3_admin, s3_bucket

__all__ = ["moto_endpoint", "s3_admin", "s3_bucket"]  # the S3 server of tests/sharing, for odf_sharing


@pytest.fixture(scope="module")
def airflow(connect_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowDeployment]:
    root = tmp_path_factory.mktemp("deployment")
    with PostgresServer() as database, AirflowDeployment(root, database.url, connect_url) as deployment:
        yield deployment

"""How the executors' Python opens the files the engine wrote into a store, to hash them as streams.

Spark's own readers hand a file to Python only whole (`binaryFile`: one value per file, held two or
three times in the executor's heap, and refused above 2 GiB), so a slice of a few hundred megabytes would
need gigabytes of executor memory. Instead the driver reads the session's S3A settings (endpoint,
region, path-style access, credentials) and the executors open the objects with Arrow's S3 client, which
reads them in ranges: memory is bounded by a Parquet row group, whatever the file's size.

The settings travel inside the task (as the Hadoop configuration does); without keys in the session
Arrow's default chain applies (environment variables, the instance role), as Hadoop's does. A Spark
Connect client never reads the server's keys (they come back redacted): there the executors take them
from their environment, which `odf engine serve --s3a` sets (`with_executor_keys`).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow.fs as pafs
from pyspark.sql import SparkSession

from airflow_odf.engine.session import is_connect

_S3_SCHEMES = ("s3a", "s3", "s3n")
_REDACTED = "*********(redacted)"  # Spark's answer for a conf its redaction pattern matches
_SETTINGS = {
    "endpoint": "endpoint",
    "region": "endpoint.region",
    "path_style": "path.style.access",
    "access_key": "access.key",
    "secret_key": "secret.key",
    "session_token": "session.token",
    "provider": "aws.credentials.provider",
    "ssl": "connection.ssl.enabled",
}


@dataclass(frozen=True)
class StoreAccess:
    """What an executor needs to open a file of the store; `repr` hides the credentials (tasks and their
    errors may be logged)."""

    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False
    ssl: bool = True
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    anonymous: bool = False

    def __repr__(self) -> str:
        return f"StoreAccess(endpoint={self.endpoint!r}, region={self.region!r})"

    def open(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """The file system holding `uri` and the path of `uri` in it; runs on the executors."""
        parts = urlsplit(uri)
        if parts.scheme.lower() not in _S3_SCHEMES:
            return pafs.FileSystem.from_uri(uri)
        return self._s3(), f"{parts.netloc}{parts.path}"

    def _s3(self) -> pafs.S3FileSystem:
        options: dict[str, object] = {"anonymous": self.anonymous, "region": self.region or "us-east-1"}
        if self.endpoint:
            scheme = "https" if self.ssl else "http"
            endpoint = urlsplit(self.endpoint if "://" in self.endpoint else f"{scheme}://{self.endpoint}")
            options |= {"endpoint_override": endpoint.netloc, "scheme": endpoint.scheme}
            options["force_virtual_addressing"] = not self.path_style  # Hadoop's default, as S3A
        if self.access_key and self.secret_key:
            options |= {"access_key": self.access_key, "secret_key": self.secret_key}
            if self.session_token:
                options["session_token"] = self.session_token
        return pafs.S3FileSystem(**options)  # type: ignore[arg-type]


def store_access(spark: SparkSession) -> StoreAccess:
    """The session's S3A settings (its Hadoop configuration: `spark.hadoop.fs.s3a.*`, `core-site.xml`, and
    what `get_session` set on it; on Spark Connect, the session's conf)."""
    values = {field: _hadoop_setting(spark, f"fs.s3a.{name}") for field, name in _SETTINGS.items()}
    provider = values.pop("provider") or ""
    path_style = (values.pop("path_style") or "false").lower() == "true"
    ssl = (values.pop("ssl") or "true").lower() == "true"
    return StoreAccess(
        **values,  # type: ignore[arg-type]
        path_style=path_style,
        ssl=ssl,
        anonymous=provider.endswith("AnonymousAWSCredentialsProvider"),
    )


def _hadoop_setting(spark: SparkSession, name: str) -> str | None:
    """The setting, or None when unset or unknown: a Spark Connect server answers its keys redacted
    (`spark.redaction.regex`), so its executors' Arrow client takes them from the AWS default chain
    instead, which the server's executor environment gives (`with_executor_keys`)."""
    if is_connect(spark):
        value = spark.conf.get(f"spark.hadoop.{name}", None)
    else:
        value = spark.sparkContext._jsc.hadoopConfiguration().get(name)
    if not value or not value.strip() or value.strip() == _REDACTED:
        return None
    return value.strip()

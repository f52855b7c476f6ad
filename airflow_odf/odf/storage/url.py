"""Repository URLs -> object stores: `file://` / plain paths, `s3://`, `s3+http(s)://` and `http(s)://`.

A remote dataset lives at `<repository url>/<dataset name>/`: build its URL with `join_url` and open
it with `open_store`, so each backend gets its sub-prefix the same way. The S3 backend (and boto3) is
imported only when an S3 URL is opened.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.storage.http import DEFAULT_RETRIES, DEFAULT_TIMEOUT, HttpObjectStore
from airflow_odf.odf.storage.local import LocalObjectStore
from airflow_odf.odf.storage.redact import redact_url
from airflow_odf.odf.storage.store import ObjectStore
from airflow_odf.utils.s3a import S3aJarsMissing, s3a_conf

SUPPORTED_SCHEMES = ("file", "s3", "s3+http", "s3+https", "http", "https")
#: Set (`1`/`true`), the engine reads and writes S3 repositories itself over `s3a://` (`odf --spark-s3a`).
SPARK_S3A_ENV = "ODF_SPARK_S3A"


class StoreUrlError(OdfError, ValueError):
    """A repository URL that names no store this provider can open."""


class SparkS3aError(OdfError, ValueError):
    """The engine was to reach S3 itself (`spark_s3a`) but cannot: jars not fetched, settings invalid."""


@dataclass(frozen=True)
class StoreCredentials:
    """How to reach a remote store; every field is optional (None = default chain / environment).
    Secrets are left out of `repr` so they never end up in logs."""

    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = field(default=None, repr=False)
    aws_session_token: str | None = field(default=None, repr=False)
    region: str | None = None
    endpoint_url: str | None = None
    bearer_token: str | None = field(default=None, repr=False)
    http_timeout: float | None = None
    http_retries: int | None = None
    http_object_deadline: float | None = None  # None: $ODF_HTTP_OBJECT_DEADLINE or 600 s
    http_min_rate: float | None = None  # bytes/s; None: $ODF_HTTP_MIN_RATE or 1024, 0: off
    http_min_rate_window: float | None = None  # None: $ODF_HTTP_MIN_RATE_WINDOW or 30 s
    engine_scheme: str | None = None  # e.g. "s3a": the Spark cluster reads the bucket itself


def _scheme(url: str) -> str | None:
    """The URL scheme, or None for a plain local path (no `://`)."""
    if "://" not in url:
        return None
    return url.split("://", 1)[0].lower()


def open_store(url: str, *, credentials: StoreCredentials | None = None) -> ObjectStore:
    """The store a repository or dataset URL points to.

    - `file:///abs/path` or a plain path: a local directory;
    - `s3://bucket/prefix`: S3, endpoint from `credentials.endpoint_url` or the environment
      (`AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, read by boto3) or AWS itself;
    - `s3+http://host:port/bucket/prefix`, `s3+https://...`: an S3-compatible store at that endpoint
      (kamu's URL form for MinIO-style stores; path-style addressing);
    - `http(s)://host/path`: read-only HTTP (the simple transfer protocol's pull side).
    """
    creds = credentials or StoreCredentials()
    scheme = _scheme(url)
    if scheme is None:
        if not url.strip():
            raise StoreUrlError("empty repository URL")
        return LocalObjectStore(Path(url).expanduser())
    parts = urlsplit(url)
    if scheme not in SUPPORTED_SCHEMES:
        raise StoreUrlError(
            f"unsupported repository URL scheme {scheme!r} in {redact_url(url)}; supported: "
            + ", ".join(f"{s}://" for s in SUPPORTED_SCHEMES)
            + " and plain local paths"
        )
    if parts.query or parts.fragment:
        raise StoreUrlError(f"repository URLs take no query or fragment: {redact_url(url)}")
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise StoreUrlError(f"file URLs need an absolute path (file:///path), got {redact_url(url)}")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise StoreUrlError(f"file URLs need an absolute path (file:///path), got {redact_url(url)}")
        return LocalObjectStore(Path(path))
    if scheme in ("http", "https"):
        if not parts.hostname:
            raise StoreUrlError(f"HTTP repository URL without a host: {redact_url(url)}")
        if parts.username is not None or parts.password is not None:
            raise StoreUrlError(
                f"put credentials in the connection (bearer token), not the URL: {redact_url(url)}"
            )
        return HttpObjectStore(
            url,
            bearer_token=creds.bearer_token,
            timeout=creds.http_timeout if creds.http_timeout is not None else DEFAULT_TIMEOUT,
            retries=creds.http_retries if creds.http_retries is not None else DEFAULT_RETRIES,
            object_deadline=creds.http_object_deadline,
            min_rate=creds.http_min_rate,
            min_rate_window=creds.http_min_rate_window,
        )
    return _open_s3(url, scheme, creds)


def _s3_location(url: str, scheme: str) -> tuple[str, str, str | None]:
    """(bucket, prefix, endpoint) of an `s3://` or `s3+http(s)://` URL; the endpoint only when the URL
    names one (its stores are addressed path-style)."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        raise StoreUrlError(f"put S3 keys in the connection, not the URL: {redact_url(url)}")
    path = unquote(parts.path).strip("/")
    if scheme == "s3":
        if not parts.netloc:
            raise StoreUrlError(f"S3 URL without a bucket: {redact_url(url)} (expected s3://bucket/prefix)")
        return unquote(parts.netloc), path, None
    if not parts.hostname:
        raise StoreUrlError(f"S3 URL without an endpoint host: {redact_url(url)}")
    bucket, _, prefix = path.partition("/")
    if not bucket:
        raise StoreUrlError(
            f"S3 URL without a bucket: {redact_url(url)} (expected {scheme}://host:port/bucket/prefix)"
        )
    return bucket, prefix, f"{scheme.removeprefix('s3+')}://{parts.netloc}"


def _open_s3(url: str, scheme: str, creds: StoreCredentials) -> ObjectStore:
    bucket, prefix, url_endpoint = _s3_location(url, scheme)
    from airflow_odf.odf.storage.s3 import S3ObjectStore

    # no endpoint: boto3 reads AWS_ENDPOINT_URL(_S3) or uses AWS
    return S3ObjectStore(
        bucket,
        prefix,
        endpoint_url=url_endpoint or creds.endpoint_url,
        region=creds.region,
        aws_access_key_id=creds.aws_access_key_id,
        aws_secret_access_key=creds.aws_secret_access_key,
        aws_session_token=creds.aws_session_token,
        path_style=True if url_endpoint else None,
        timeout=creds.http_timeout,
        retries=creds.http_retries,
        engine_scheme=engine_scheme(creds),
    )


def engine_scheme(creds: StoreCredentials) -> str | None:
    """How the engine reaches an S3 repository: the credentials' scheme (a connection's `spark_s3a`),
    else `s3a` when $ODF_SPARK_S3A is set (`odf ... --spark-s3a`), else None (it works on staged copies)."""
    if creds.engine_scheme:
        return creds.engine_scheme
    return "s3a" if os.environ.get(SPARK_S3A_ENV, "").strip().lower() in ("1", "true", "yes") else None


def spark_s3a_conf(url: str, credentials: StoreCredentials | None = None) -> dict[str, str]:
    """The Spark conf an engine needs to read and write the repository at `url` over `s3a://`, or {}
    when it does not (not an S3 URL, or s3a off: `engine_scheme`). Each setting comes from the
    credentials, else from the environment boto3 reads too: `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`,
    `AWS_REGION` / `AWS_DEFAULT_REGION`, `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` /
    `AWS_SESSION_TOKEN` (without keys, Hadoop's own chain applies). A store at its own endpoint is
    addressed path-style, as MinIO-like stores need."""
    creds = credentials or StoreCredentials()
    scheme = _scheme(url)
    if scheme not in ("s3", "s3+http", "s3+https") or engine_scheme(creds) != "s3a":
        return {}
    return environment_s3a_conf(creds, endpoint=_s3_location(url, scheme)[2])


def environment_s3a_conf(
    credentials: StoreCredentials | None = None, *, endpoint: str | None = None
) -> dict[str, str]:
    """The s3a conf for the S3 store the credentials (else the environment, see `spark_s3a_conf`) name:
    what `odf engine serve --s3a` starts its server with."""
    creds = credentials or StoreCredentials()
    env = os.environ.get
    endpoint = endpoint or creds.endpoint_url or env("AWS_ENDPOINT_URL_S3") or env("AWS_ENDPOINT_URL") or None
    if creds.aws_access_key_id or creds.aws_secret_access_key:
        keys = (creds.aws_access_key_id, creds.aws_secret_access_key, creds.aws_session_token)
    else:
        keys = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"), env("AWS_SESSION_TOKEN"))
    try:
        return s3a_conf(
            endpoint=endpoint,
            region=creds.region or env("AWS_REGION") or env("AWS_DEFAULT_REGION") or None,
            path_style=endpoint is not None,
            access_key=keys[0] or None,
            secret_key=keys[1] or None,
            session_token=keys[2] or None,
        )
    except (S3aJarsMissing, ValueError) as e:
        raise SparkS3aError(f"spark_s3a: {e}") from None


def join_url(base: str, *parts: str) -> str:
    """`base` with path segments appended (`join_url("s3://b/repo", "ds")` -> `s3://b/repo/ds`).
    Segments are single names: no `/`, `.`, `..` or empty ones (they could escape the repository)."""
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\\" in part:
            raise StoreUrlError(f"invalid path segment {part!r} to join to {redact_url(base)}")
    if not parts:
        return base
    if _scheme(base) is None:
        return str(PurePosixPath(base, *parts))
    split = urlsplit(base)
    path = "/".join([split.path.rstrip("/"), *(quote(p, safe="") for p in parts)])
    return urlunsplit(split._replace(path=path))


__all__ = [
    "SPARK_S3A_ENV",
    "SUPPORTED_SCHEMES",
    "SparkS3aError",
    "StoreCredentials",
    "StoreUrlError",
    "engine_scheme",
    "environment_s3a_conf",
    "join_url",
    "open_store",
    "spark_s3a_conf",
]

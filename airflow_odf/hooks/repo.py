"""`OdfRepoHook`: where a repository lives and how to reach it, from an Airflow connection (`odf_repo`).

The connection's host is the repository URL — `file:///data/odf` (or a plain path), `s3://bucket/prefix`,
`http(s)://host/repo` — and its extras carry the credentials: `aws_conn_id` (or `aws_access_key_id` /
`aws_secret_access_key`, `aws_session_token`, `endpoint_url`) for S3, `token` for HTTP, `work_dir`
places the scratch space the engine works in, and `dataset_keys`, `node_key` and `keys_dir` the private
keys of the datasets owned here (docs/keys.md). Every secret the hook reads (passwords, tokens, keys, a
password in the URL) is registered with Airflow's secrets masker, and URLs in its messages are
redacted. The hook only resolves the connection; opening the repository is the core's job.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.identity.keys import KeyStore, default_keys_dir
from airflow_odf.odf.repo.repository import DatasetNotFoundError, Repository
from airflow_odf.odf.storage.redact import redact_text, redact_url
from airflow_odf.odf.storage.url import StoreCredentials, join_url, open_store, spark_s3a_conf
from airflow_odf.utils.s3a import S3A_SECRET_KEYS, with_s3a_conf

T = TypeVar("T")

SCHEMES = ("file", "s3", "s3+http", "s3+https", "http", "https")
#: Extras that hold secrets, masked whatever Airflow's list of sensitive field names says.
SECRET_EXTRAS = ("token", "aws_secret_access_key", "aws_session_token", "password")
#: Extras that hold private keys: `dataset_keys` (an object of dataset name or DID -> key), `node_key`.
KEY_EXTRAS = ("dataset_keys", "node_key")


class OdfRepoHook(BaseHook):
    """Access to an ODF repository through an `odf_repo` connection (default `odf_default`)."""

    conn_name_attr = "odf_conn_id"
    default_conn_name = "odf_default"
    conn_type = "odf_repo"
    hook_name = "ODF Repository"

    def __init__(self, odf_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.odf_conn_id = odf_conn_id

    def _connection(self, conn_id: str) -> Any:
        """The connection, its secrets registered with the secrets masker before any use."""
        conn = self.get_connection(conn_id)
        _mask_secrets(conn)
        return conn

    def repository_url(self) -> str:
        """The repository URL of the connection (`file://`, `s3://`, `http(s)://`)."""
        conn = self._connection(self.odf_conn_id)
        extra = conn.extra_dejson
        url = _url_of(conn.conn_type or "", (conn.host or "").strip(), conn.port, conn.schema, extra)
        if not url:
            raise OdfError(f"connection {self.odf_conn_id!r}: no repository URL (set the host field)")
        if "://" not in url:
            url = Path(url).absolute().as_uri()
        scheme = urlsplit(url).scheme
        if scheme not in SCHEMES:
            raise OdfError(
                f"connection {self.odf_conn_id!r}: repository URL {redact_url(url)!r} has scheme {scheme!r}, "
                f"expected one of {', '.join(SCHEMES)}"
            )
        return url

    def store_credentials(self) -> StoreCredentials:
        """What the core needs to reach an S3 or HTTP repository, from the connection's extras.

        S3: `aws_conn_id` names an AWS connection (login = access key id, password = secret, extras
        `endpoint_url`, `region_name`), or the keys are in this connection's extras; otherwise boto3's
        default chain applies; `spark_s3a: true` lets the engine read and write the bucket itself
        over `s3a://` (`engine_spark_conf` gives it the jars and settings). HTTP: `token` or the
        password field (a bearer token), `timeout`, `retries`, `object_deadline` (seconds per object;
        default `$ODF_HTTP_OBJECT_DEADLINE` or 600), `min_rate` and `min_rate_window` (a transfer slower
        than `min_rate` bytes/s over `min_rate_window` seconds is dropped; default `$ODF_HTTP_MIN_RATE`
        or 1024, 0 turns it off, and `$ODF_HTTP_MIN_RATE_WINDOW` or 30).
        """
        own = self._connection(self.odf_conn_id)
        extra = own.extra_dejson
        aws: dict[str, Any] = {}
        if extra.get("aws_conn_id"):
            conn = self._connection(extra["aws_conn_id"])
            aws = {
                "aws_access_key_id": conn.login or None,
                "aws_secret_access_key": conn.password or None,
                **{
                    k: v
                    for k, v in conn.extra_dejson.items()
                    if k in ("endpoint_url", "region_name", "aws_session_token")
                },
            }
        aws.update({k: v for k, v in extra.items() if k.startswith("aws_") and k != "aws_conn_id"})
        return StoreCredentials(
            aws_access_key_id=aws.get("aws_access_key_id"),
            aws_secret_access_key=aws.get("aws_secret_access_key"),
            aws_session_token=aws.get("aws_session_token"),
            region=extra.get("region_name") or aws.get("region_name"),
            endpoint_url=extra.get("endpoint_url") or aws.get("endpoint_url"),
            bearer_token=extra.get("token") or own.password or None,
            http_timeout=float(extra["timeout"]) if extra.get("timeout") else None,
            http_retries=int(extra["retries"]) if extra.get("retries") is not None else None,
            http_object_deadline=float(extra["object_deadline"]) if extra.get("object_deadline") else None,
            http_min_rate=float(extra["min_rate"]) if extra.get("min_rate") not in (None, "") else None,
            http_min_rate_window=float(extra["min_rate_window"]) if extra.get("min_rate_window") else None,
            engine_scheme="s3a" if extra.get("spark_s3a") in (True, "true", "True", "1") else None,
        )

    def engine_spark_conf(self, conf: dict[str, str] | None = None) -> dict[str, str]:
        """The Spark conf of an engine that works on this repository: `conf` (the task's), plus, with
        `spark_s3a: true` on an S3 repository, the s3a jars and settings from the connection (endpoint,
        region, path-style access, keys: see `spark_s3a_conf`). The keys are registered with the
        secrets masker; the runners keep them off command lines."""
        s3a = spark_s3a_conf(self.repository_url(), self.store_credentials())
        for key in S3A_SECRET_KEYS & s3a.keys():
            mask_secret(s3a[key])
        return with_s3a_conf(conf or {}, s3a)

    def dataset_url(self, name: str) -> str:
        """Where dataset `name` lives in this repository when it is a remote: `<repository URL>/<name>`."""
        return join_url(self.repository_url(), name)

    def get_conn(self) -> Repository:
        """The repository, opened (it must have been created with `odf init` or `create=True`)."""
        return self.open_repository()

    def open_repository(self, *, create: bool = False) -> Repository:
        """A `file://` repository, or one under an S3 prefix (the engine then works on local staged
        copies, or reaches the bucket itself when the extras say `"spark_s3a": true`)."""
        url = self.repository_url()
        parts = urlsplit(url)
        if parts.scheme in ("http", "https"):
            raise OdfError(
                f"connection {self.odf_conn_id!r}: an HTTP repository is read-only; it can be the "
                "remote of a pull, but tasks that write need a file:// or s3:// repository"
            )
        work_dir = self.work_dir()
        if parts.scheme != "file":
            store = open_store(url, credentials=self.store_credentials())
            keys = self.key_store(None)
            repo = Repository.in_store(store, url, create=create, work_dir=work_dir, keys=keys)
        else:
            root = Path(unquote(parts.path))
            keys = self.key_store(root)
            if create and not _is_repository(root):
                repo = Repository.init(root, work_dir=work_dir, keys=keys)
            else:
                repo = Repository.open(root, work_dir=work_dir, keys=keys)
        self._in_connection(partial(keys.check_given_names, partial(_dataset_or_none, repo)))
        return repo

    def key_store(self, local_root: Path | None) -> KeyStore:
        """The repository's private keys: those the extras give (`dataset_keys`: dataset name or DID ->
        PKCS#8 PEM or multibase key; `node_key`), best kept in a secrets backend, then the folder
        `keys_dir` (else the core's default for a repository at `local_root`, or in an object store
        when None), where the keys of datasets created by tasks are written."""
        extra = self._connection(self.odf_conn_id).extra_dejson
        folder = Path(extra["keys_dir"]) if extra.get("keys_dir") else default_keys_dir(local_root)
        return self._in_connection(
            lambda: KeyStore(folder, extra=_dataset_keys(extra), node_key=extra.get("node_key") or None)
        )

    def _in_connection(self, make: Callable[[], T]) -> T:
        """`make()`, its OdfError naming this connection (a key's problem says which key, never the key)."""
        try:
            return make()
        except OdfError as e:
            raise OdfError(f"connection {self.odf_conn_id!r}: {e}") from None

    def work_dir(self) -> Path | None:
        """The extra `work_dir`: the repository's scratch space (default: $ODF_WORK_DIR, else inside a
        local repository, else the temporary directory); the engine's Spark must see it at that path."""
        configured = self._connection(self.odf_conn_id).extra_dejson.get("work_dir")
        return Path(configured) if configured else None

    def test_connection(self) -> tuple[bool, str]:
        """For the UI's "Test" button: the URL parses and, for file://, the repository opens."""
        try:
            url = self.repository_url()
            if not url.startswith("http"):
                repo = self.open_repository()
                return True, f"ODF repository at {repo.location} with {len(repo.list())} dataset(s)"
            return True, f"repository URL {redact_url(url)} is well formed"
        except Exception as e:  # the UI shows the message
            return False, redact_text(str(e))

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Kept for Airflow 3.1 UIs; 3.2+ reads the declarative form from the provider info."""
        from airflow_odf.get_provider_info import REPO_UI_FIELD_BEHAVIOUR

        return REPO_UI_FIELD_BEHAVIOUR


def _mask_secrets(conn: Any) -> None:
    """Registers every secret of a connection with Airflow's secrets masker: the password, a password
    written into the host URL, the extras named in SECRET_EXTRAS, and any extra whose name Airflow
    deems sensitive (the dict form of `mask_secret`)."""
    if conn.password:
        mask_secret(conn.password)
    host = conn.host or ""
    if "@" in host:
        mask_secret(host.rpartition("@")[0].partition("://")[2].partition(":")[2])
    extra = conn.extra_dejson
    for key in SECRET_EXTRAS:
        if extra.get(key):
            mask_secret(str(extra[key]))
    for text in _key_texts(extra):
        mask_secret(text)
    mask_secret(extra)


def _key_texts(extra: dict[str, Any]) -> list[str]:
    """What to mask of the keys of a connection: each key text, and each line of it but PEM armour
    (a PKCS#8 ed25519 key is one base64 line, which a log could show alone); a `dataset_keys` that does
    not parse is masked whole."""
    texts = [str(extra[name]) for name in KEY_EXTRAS if isinstance(extra.get(name), str) and extra[name]]
    with contextlib.suppress(OdfError):
        texts += [str(text) for text in _dataset_keys(extra).values()]
    lines = [line.strip() for text in texts for line in text.splitlines()]
    return texts + [line for line in lines if line and not line.startswith("-----")]


def _dataset_keys(extra: dict[str, Any]) -> dict[str, str]:
    """The extra `dataset_keys`: an object, or a JSON text of one (as a secrets backend may store it)."""
    value = extra.get("dataset_keys") or {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise OdfError("extra dataset_keys: expected a JSON object of dataset name or DID -> key text")
    return value


def _dataset_or_none(repo: Repository, name: str) -> DatasetId | None:
    try:
        return repo.resolve(name, damaged=True)
    except DatasetNotFoundError:
        return None


def _url_of(conn_type: str, host: str, port: int | None, schema: str | None, extra: dict[str, Any]) -> str:
    """The URL a connection means: the host field holds it (or a plain path); a URI-style connection
    (`AIRFLOW_CONN_X='s3://bucket/prefix'`) was split by Airflow into type, host, port and schema."""
    if "://" in host or conn_type in ("", OdfRepoHook.conn_type):
        return host or str(extra.get("url") or "").strip()
    netloc = f"{host}:{port}" if port else host
    path = (schema or "").strip("/")
    return f"{conn_type}://{netloc}/{path}" if path else f"{conn_type}://{netloc}"


def _is_repository(root: Path) -> bool:
    try:
        Repository.open(root)
    except OdfError:
        return False
    return True

"""S3 object store: a bucket and key prefix on AWS S3 or any S3-compatible store (MinIO, Ceph, ...).

boto3 is optional at runtime, so it is imported only when a store is created (never when this module
is imported). Refs move with S3 conditional writes (`If-None-Match: *` to create, `If-Match: <etag>`
to update or delete): the store itself rejects a write based on a stale read, so two writers can never
both move a head from the same old value — there is no read-then-blind-overwrite window.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.storage.redact import redact_text, redact_url
from airflow_odf.odf.storage.store import (
    ConflictError,
    ObjectNotFoundError,
    ObjectStore,
    check_key,
    object_too_large,
    read_limit,
    writing_atomically,
)

#: Above this size `put_file` / `get_file` switch to multipart / ranged parallel transfers.
MULTIPART_THRESHOLD = 64 * 1024 * 1024
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
#: 412: the condition did not hold; 409: another conditional write to the key was in flight (AWS).
_PRECONDITION_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})


class S3StoreError(OdfError):
    """An S3 request failed for another reason than a missing object (access, bucket, network)."""

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class _PreconditionFailedError(S3StoreError):
    """A conditional write was rejected: the object changed since it was read."""


_PARALLEL_PUTS = 8  # within botocore's default pool of 10 connections


@functools.cache
def _botocore_errors() -> tuple[type[Exception], type[Exception]]:
    """(ClientError, BotoCoreError), imported on first use so the module loads without boto3."""
    from botocore.exceptions import BotoCoreError, ClientError

    return ClientError, BotoCoreError


@dataclass(frozen=True)
class S3ClientSettings:
    """How to build a client; None = boto3's default chain and environment. Hashable: the cache key."""

    endpoint_url: str | None = None
    region: str | None = None
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = field(default=None, repr=False)
    aws_session_token: str | None = field(default=None, repr=False)
    path_style: bool | None = None
    timeout: float | None = None
    retries: int | None = None


def make_s3_client(settings: S3ClientSettings) -> Any:
    """A boto3 S3 client; settings left None come from the default credential chain and environment
    (including `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3`). Clients are thread-safe but costly to
    build (the service model is parsed per session), so one is shared per distinct set of settings
    and `AWS_*` environment."""
    aws_env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    return _cached_s3_client(aws_env, settings)


@functools.lru_cache(maxsize=32)
def _cached_s3_client(aws_env: tuple[tuple[str, str], ...], settings: S3ClientSettings) -> Any:
    """`make_s3_client`'s work; `aws_env` is only part of the cache key (boto3 reads it itself)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise S3StoreError(
            "s3:// stores need boto3: install it with `pip install boto3` (or the provider's test extra)"
        ) from e
    path_style = settings.path_style
    if path_style is None:
        path_style = settings.endpoint_url is not None  # MinIO-style stores rarely resolve bucket subdomains
    options: dict[str, Any] = {
        # Only the checksums S3 requires: newer default checksums break many S3-compatible stores.
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
        "retries": {"mode": "standard"},
    }
    if path_style:
        options["s3"] = {"addressing_style": "path"}
    if settings.timeout is not None:
        options["connect_timeout"] = settings.timeout
        options["read_timeout"] = settings.timeout
    if settings.retries is not None:
        options["retries"] = {"mode": "standard", "total_max_attempts": settings.retries + 1}
    session = boto3.session.Session(
        aws_access_key_id=settings.aws_access_key_id,
        aws_secret_access_key=settings.aws_secret_access_key,
        aws_session_token=settings.aws_session_token,
        region_name=settings.region,
    )
    return session.client("s3", endpoint_url=settings.endpoint_url, config=Config(**options))


class S3ObjectStore(ObjectStore):
    """Objects under `s3://<bucket>/<prefix>/`. Pass a ready boto3 client, or connection settings."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any | None = None,
        endpoint_url: str | None = None,
        region: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        path_style: bool | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        page_size: int = 1000,
        multipart_threshold: int = MULTIPART_THRESHOLD,
        engine_scheme: str | None = None,
    ) -> None:
        if not bucket or "/" in bucket:
            raise S3StoreError(f"invalid S3 bucket name {bucket!r}")
        if page_size < 1:
            raise ValueError(f"page_size must be positive, got {page_size}")
        settings = S3ClientSettings(
            endpoint_url, region, aws_access_key_id, aws_secret_access_key, aws_session_token,
            path_style, timeout, retries,
        )  # fmt: skip
        if client is not None and settings != S3ClientSettings():
            raise ValueError("pass either a ready S3 client or connection settings, not both")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_key(self.prefix)
        self.client = client or make_s3_client(settings)
        self.page_size = page_size
        self.multipart_threshold = multipart_threshold
        self.engine_scheme = engine_scheme

    def child(self, prefix: str) -> S3ObjectStore:
        return S3ObjectStore(
            self.bucket,
            self._key(prefix),
            client=self.client,
            page_size=self.page_size,
            multipart_threshold=self.multipart_threshold,
            engine_scheme=self.engine_scheme,
        )

    def engine_uri(self, key: str) -> str | None:
        """`s3a://bucket/key` when the Spark cluster reads the bucket itself (`engine_scheme`); by
        default None: local Spark gets a staged copy."""
        return (
            None if self.engine_scheme is None else f"{self.engine_scheme}://{self.bucket}/{self._key(key)}"
        )

    @property
    def engine_writes_in_place(self) -> bool:
        """With `s3a` the cluster writes its output into the bucket (the operation's staging area)."""
        return self.engine_scheme == "s3a"

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    @property
    def endpoint_url(self) -> str | None:
        return getattr(getattr(self.client, "meta", None), "endpoint_url", None)

    @property
    def _shown_endpoint(self) -> str | None:
        """The endpoint for messages: without user-info or query (see `redact_url`)."""
        return None if self.endpoint_url is None else redact_url(self.endpoint_url)

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.url!r}, endpoint={self._shown_endpoint!r})"

    # ----- plumbing -----

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, op: str, key: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Runs one client call, turning botocore errors into the store's errors (naming the URL)."""
        client_error, boto_error = _botocore_errors()
        try:
            return fn(*args, **kwargs)
        except client_error as e:
            raise self._translate(op, key, e) from e
        except boto_error as e:
            raise S3StoreError(f"{op} {self.url}/{key} failed: {redact_text(str(e))}") from e

    def _translate(self, op: str, key: str, e: Any) -> OdfError:
        error = e.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _NOT_FOUND_CODES:
            return ObjectNotFoundError(f"{key} not found in {self.url}")
        if code in _PRECONDITION_CODES:
            return _PreconditionFailedError(
                f"{op} {self.url}/{key}: precondition failed", code=code, status=status
            )
        if code == "NoSuchBucket":
            return S3StoreError(
                f"bucket {self.bucket!r} does not exist (endpoint {self._shown_endpoint})",
                code=code,
                status=status,
            )
        message = redact_text(str(error.get("Message") or ""))
        return S3StoreError(
            f"{op} {self.url}/{key} failed: {code} (HTTP {status}) {message}".rstrip(),
            code=code,
            status=status,
        )

    def _transfer_config(self) -> Any:
        from boto3.s3.transfer import TransferConfig

        return TransferConfig(
            multipart_threshold=self.multipart_threshold, multipart_chunksize=self.multipart_threshold
        )

    def _read(self, key: str) -> tuple[bytes, str]:
        """The object's bytes and ETag (the ETag conditions the next write); at most `read_limit(key)`
        bytes: a larger object (a hostile peer's endless attestation) is refused, not read whole."""
        response = self._call("GET", key, self.client.get_object, Bucket=self.bucket, Key=self._key(key))
        capped = read_limit(key)
        with contextlib.closing(response["Body"]) as body:
            if capped is None:
                return self._call("GET", key, body.read), response["ETag"]
            limit, why = capped
            too_large = object_too_large(key, self.url, limit, why)
            if int(response.get("ContentLength") or 0) > limit:
                raise too_large
            data = self._call("GET", key, body.read, limit + 1)
        if len(data) > limit:
            raise too_large
        return data, response["ETag"]

    # ----- the store interface -----

    def get(self, key: str) -> bytes:
        return self._read(key)[0]

    def get_file(self, key: str, target: Path, *, max_bytes: int | None = None) -> None:
        """Streams to a temp file next to `target` (ranged parallel parts for big objects); the
        transfer reads the size the store reports, so a larger one than `max_bytes` is refused first."""
        if max_bytes is not None and (size := self.size(key)) > max_bytes:
            raise object_too_large(key, self.url, max_bytes, f"the store reports {size} bytes")
        full = self._key(key)
        with writing_atomically(target) as f:
            self._call(
                "GET",
                key,
                self.client.download_fileobj,
                Bucket=self.bucket,
                Key=full,
                Fileobj=f,
                Config=self._transfer_config(),
            )

    def put(self, key: str, data: bytes) -> None:
        self._call("PUT", key, self.client.put_object, Bucket=self.bucket, Key=self._key(key), Body=data)

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Concurrent PUTs (each is atomic and durable once acknowledged): a thousand received blocks
        in a row would cost a thousand round trips."""
        with ThreadPoolExecutor(max_workers=_PARALLEL_PUTS, thread_name_prefix="odf-s3-put") as pool:
            list(pool.map(lambda item: self.put(*item), items))

    def put_file(self, key: str, source: Path, *, move: bool = False) -> None:
        """Managed (multipart above the threshold) upload; a multipart object appears only when complete.
        `move` removes the local file once the object is stored."""
        self._call(
            "PUT",
            key,
            self.client.upload_file,
            Filename=str(source),
            Bucket=self.bucket,
            Key=self._key(key),
            Config=self._transfer_config(),
        )
        if move:
            Path(source).unlink(missing_ok=True)

    def _head(self, key: str) -> dict[str, Any]:
        return self._call("HEAD", key, self.client.head_object, Bucket=self.bucket, Key=self._key(key))

    def size(self, key: str) -> int:
        return int(self._head(key)["ContentLength"])

    def list(self, prefix: str) -> Iterator[str]:
        """Direct children only (`Delimiter="/"`); names starting with "." are hidden as on local disk."""
        check_key(prefix)
        full = f"{self._key(prefix)}/"
        paginator = self.client.get_paginator("list_objects_v2")
        pages = paginator.paginate(
            Bucket=self.bucket,
            Prefix=full,
            Delimiter="/",
            PaginationConfig={"PageSize": self.page_size},
        )
        iterator = iter(pages)
        while True:
            page = self._call("LIST", prefix, next, iterator, None)
            if page is None:
                return
            for obj in page.get("Contents", []):
                name = obj["Key"][len(full) :]
                if name and "/" not in name and not name.startswith("."):
                    yield f"{prefix}/{name}"

    def delete(self, key: str) -> None:
        self._call("DELETE", key, self.client.delete_object, Bucket=self.bucket, Key=self._key(key))

    def copy(self, source: str, key: str) -> None:
        """A server-side copy: one CopyObject, or above the multipart threshold a multipart copy of
        ranges (`UploadPartCopy`; one CopyObject takes at most 5 GB). The object appears whole or not
        at all; nothing passes through this process."""
        self._call(
            "COPY",
            key,
            self.client.copy,
            CopySource={"Bucket": self.bucket, "Key": self._key(source)},
            Bucket=self.bucket,
            Key=self._key(key),
            Config=self._transfer_config(),
        )

    def list_tree(self, prefix: str) -> Iterator[tuple[str, float]]:
        """Every key under `prefix/` (no delimiter), with its LastModified time."""
        check_key(prefix)
        full = f"{self._key(prefix)}/"
        paginator = self.client.get_paginator("list_objects_v2")
        pages = iter(
            paginator.paginate(Bucket=self.bucket, Prefix=full, PaginationConfig={"PageSize": self.page_size})
        )
        while True:
            page = self._call("LIST", prefix, next, pages, None)
            if page is None:
                return
            for obj in page.get("Contents", []):
                yield f"{prefix}/{obj['Key'][len(full) :]}", obj["LastModified"].timestamp()

    def compare_and_swap(self, key: str, expected: bytes | None, new: bytes | None) -> None:
        """Conditional writes only: create with `If-None-Match: *`, update / delete with `If-Match`
        on the ETag of the value that was compared; a rejected condition is a ConflictError. A write
        whose answer was lost (the retry refused, or no answer at all) counts as done when the key
        reads back as `new`, and fails otherwise: the caller never sees an error for a ref it moved."""
        full = self._key(key)
        try:
            if expected is None:
                if new is None:
                    current = self.get_or_none(key)
                    if current is not None:
                        raise ConflictError.changed(key, expected, current)
                    return
                self._call(
                    "PUT",
                    key,
                    self.client.put_object,
                    Bucket=self.bucket,
                    Key=full,
                    Body=new,
                    IfNoneMatch="*",
                )
                return
            try:
                current, etag = self._read(key)
            except ObjectNotFoundError:
                raise ConflictError.changed(key, expected, None) from None
            if current != expected:
                raise ConflictError.changed(key, expected, current)
            if new is None:
                self._call(
                    "DELETE", key, self.client.delete_object, Bucket=self.bucket, Key=full, IfMatch=etag
                )
            else:
                self._call(
                    "PUT",
                    key,
                    self.client.put_object,
                    Bucket=self.bucket,
                    Key=full,
                    Body=new,
                    IfMatch=etag,
                )
        except (_PreconditionFailedError, ObjectNotFoundError):
            current = self.get_or_none(key)
            if current == new:
                # Our own write landed and its answer was lost: botocore's retry of it was refused.
                # (Another writer storing the very same value leaves the same state.)
                return
            # Someone wrote (or deleted) the ref between our read and our conditional write.
            raise ConflictError.changed(key, expected, current) from None
        except S3StoreError:
            # The write's outcome is unknown (a 5xx, a connection dropped after the request went
            # out): the ref itself tells whether it was applied.
            with contextlib.suppress(S3StoreError):
                if self.get_or_none(key) == new:
                    return
            raise

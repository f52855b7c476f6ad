"""FilesGlob over `s3://bucket/prefix/pattern` (or `s3a://`, the same objects): S3 ListObjectsV2 in key
order, resuming with `StartAfter` after the last ingested name, so a poll costs in proportion to the new
objects, not to everything under the prefix.

Only the key prefix before the first wildcard is listed; the rest of the pattern is matched here, by
segments, as the local glob matches paths (`*`, `?`, `[...]` within a segment, not a leading dot; `**`
for any number of segments). The manifest chooses only the bucket and the pattern: the endpoint and the
keys come from the worker's environment and the AWS default chain (boto3 reads `AWS_ENDPOINT_URL`),
and the bucket and prefix must be allowed by the deployment (`SourceTrust.s3_source_prefixes`).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from glob import has_magic
from pathlib import Path, PurePosixPath
from typing import Any

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.fetch.types import (
    FetchedFile,
    FetchError,
    FetchOptions,
    SourceNotFoundError,
    SourceUnreachableError,
)
from airflow_odf.odf.ingest.trust import S3_SOURCE_PREFIXES_HINT
from airflow_odf.odf.storage.redact import redact_text, redact_url
from airflow_odf.odf.storage.s3 import S3ClientSettings, S3ObjectStore, S3StoreError, make_s3_client
from airflow_odf.odf.storage.store import ObjectNotFoundError, ObjectTooLargeError

S3_SCHEMES = ("s3", "s3a")
#: Keys per ListObjectsV2 page (the most S3 returns).
PAGE_SIZE = 1000
_WHERE = "fetch.path"
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IP_ADDRESS = re.compile(r"\d+\.\d+\.\d+\.\d+")
_MAX_KEY_BYTES = 1024
_UNSAFE_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")
_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,16}")
#: botocore error codes that mean "try again later".
_RETRYABLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError"}
)


def is_s3_path(path: str) -> bool:
    """Is this FilesGlob `path` an S3 one (`s3://` or `s3a://`)?"""
    return path.partition("://")[0].lower() in S3_SCHEMES and "://" in path


@dataclass(frozen=True)
class S3Object:
    """One listed object: its key, the size the listing gave (a download may not exceed it) and its
    modification time (the event time of `FromMetadata`)."""

    key: str
    size: int
    last_modified: Timestamp


@dataclass(frozen=True)
class S3Pattern:
    """A FilesGlob path over S3, checked: `directory` is the literal key segments before the first
    wildcard one (each followed by `/`), `parts` the segments from there on (at least the last one)."""

    bucket: str
    directory: str
    parts: tuple[str, ...]

    @classmethod
    def parse(cls, path: str) -> S3Pattern:
        """The pattern of `s3://bucket/key-pattern`; one `FetchError` naming what is wrong otherwise:
        not a bucket name, `.`/`..`/empty segments, control characters or backslashes in the key."""
        scheme, _, rest = path.partition("://")
        bucket, slash, pattern = rest.partition("/")
        if not _BUCKET.fullmatch(bucket) or ".." in bucket or _IP_ADDRESS.fullmatch(bucket):
            shown = redact_url(path)
            named = shown.partition("://")[2].partition("/")[0]
            raise FetchError(
                f"{_WHERE}: {named!r} in {shown} is not an S3 bucket name; expected "
                f"{scheme}://bucket/key-pattern with a bucket of 3-63 lowercase letters, digits, '.' and '-'"
            )
        segments = pattern.split("/")
        if (
            not slash
            or not pattern
            or any(s in ("", ".", "..") for s in segments)
            or _UNSAFE_CHARS.search(pattern)
            or len(pattern.encode()) > _MAX_KEY_BYTES
        ):
            raise FetchError(
                f"{_WHERE}: the key pattern of {path} is not a plain one; expected "
                f"{scheme}://{bucket}/prefix/pattern with no '.', '..' or empty segments, no control "
                f"characters or backslashes, at most {_MAX_KEY_BYTES} bytes"
            )
        fixed = next((i for i, s in enumerate(segments) if has_magic(s)), len(segments) - 1)
        fixed = min(fixed, len(segments) - 1)
        return cls(bucket, "".join(f"{s}/" for s in segments[:fixed]), tuple(segments[fixed:]))

    @property
    def list_prefix(self) -> str:
        """What is listed: the key up to the first wildcard character."""
        first = self.parts[0]
        literal = re.split(r"[*?\[]", first, maxsplit=1)[0]
        return self.directory + literal

    @property
    def one_level(self) -> bool:
        """Do matches lie directly in `directory`? Then key order is name order, and the listing may
        start after the last ingested name."""
        return len(self.parts) == 1 and self.parts[0] != "**"

    def matches(self, key: str) -> bool:
        if not key.startswith(self.directory):
            return False
        segments = tuple(key[len(self.directory) :].split("/"))
        if any(s in ("", ".", "..") for s in segments) or _UNSAFE_CHARS.search(key):
            return False  # not a file-like key (a folder marker `a/`, `a//b`, `a\\b`): never matched
        return _match(segments, self.parts)

    def within(self, allowed: str) -> bool:
        """Does an allowed `s3://bucket[/prefix]` cover this pattern (whole segments of the directory)?"""
        scheme, _, rest = allowed.partition("://")
        if scheme.lower() not in S3_SCHEMES:
            raise FetchError(
                f"{_WHERE}: allowed S3 source {allowed!r} is not an s3://bucket[/prefix]; "
                f"fix {S3_SOURCE_PREFIXES_HINT}"
            )
        bucket, _, prefix = rest.partition("/")
        prefix_segments = [s for s in prefix.split("/") if s]
        directory_segments = self.directory.split("/")[:-1]
        return bucket == self.bucket and directory_segments[: len(prefix_segments)] == prefix_segments


def _match(segments: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    """Glob matching by segments, as `local_files` walks directories; memoised per call so that several
    `**` cost (segments x parts), not an exponential number of splits."""

    @cache
    def match(i: int, j: int) -> bool:
        if j == len(parts):
            return i == len(segments)
        part = parts[j]
        if part == "**":
            if j == len(parts) - 1:  # any non-hidden file at any depth
                return i < len(segments) and not any(s.startswith(".") for s in segments[i:])
            return match(i, j + 1) or (
                i < len(segments) - 1 and not segments[i].startswith(".") and match(i + 1, j)
            )
        if i == len(segments) or not fnmatchcase(segments[i], part):
            return False
        if segments[i].startswith(".") and not part.startswith("."):
            return False
        return match(i + 1, j + 1)

    return match(0, 0)


class S3GlobListing:
    """The objects of one S3 FilesGlob path, listed from after a name, and their hand-over to the ingest:
    an `s3a://` URI when the engine reads that endpoint itself, else a local download."""

    def __init__(self, path: str, options: FetchOptions) -> None:
        self.pattern = S3Pattern.parse(path)
        self._path = path
        self._options = options
        self._client: Any = None

    @property
    def in_name_order(self) -> bool:
        return self.pattern.one_level

    def objects(self, after_name: str | None = None) -> Iterator[tuple[PurePosixPath, S3Object]]:
        """`(key as a path, object)` of the matching objects in key order, page by page as consumed.
        With a one-level pattern and `after_name`, only keys after `directory/after_name` are listed
        (`StartAfter`); else everything under the prefix (`after_name` is then the caller's to apply)."""
        pattern = self.pattern
        request: dict[str, Any] = {
            "Bucket": pattern.bucket,
            "Prefix": pattern.list_prefix,
            "MaxKeys": PAGE_SIZE,
        }
        if pattern.one_level:
            request["Delimiter"] = "/"  # deeper keys come back as one common prefix each, not listed
            if after_name is not None:
                request["StartAfter"] = pattern.directory + after_name
        client = self._client_for_listing()
        while True:
            page = self._call(client.list_objects_v2, **request)
            for item in page.get("Contents", []):
                key = item["Key"]
                if pattern.matches(key):
                    modified = Timestamp.from_datetime(item["LastModified"])
                    yield PurePosixPath(key), S3Object(key, int(item["Size"]), modified)
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            request["ContinuationToken"] = token

    def fetched(self, obj: S3Object, event_time: Timestamp | None, name: str) -> FetchedFile:
        """The object as the ingest reads it: in place when the engine reads this endpoint itself
        (`FetchOptions.engine_s3`), else downloaded into the cache folder (streamed, all or nothing,
        no larger than listed)."""
        engine = self._options.engine_s3
        if engine is not None and engine.endpoint_url == self._client.meta.endpoint_url:
            return FetchedFile(
                None,
                event_time,
                name,
                uri=f"{engine.scheme}://{self.pattern.bucket}/{obj.key}",
                size=obj.size,
            )
        cache_dir = self._options.cache_dir
        cache_dir.mkdir(parents=True, exist_ok=True)
        suffix = PurePosixPath(name).suffix
        fd, target = tempfile.mkstemp(
            prefix="fetch-s3-", suffix=suffix if _SUFFIX.fullmatch(suffix) else "", dir=cache_dir
        )
        os.close(fd)
        shown = f"s3://{self.pattern.bucket}/{obj.key}"
        store = S3ObjectStore(self.pattern.bucket, client=self._client)
        try:
            store.get_file(obj.key, Path(target), max_bytes=obj.size)
        except BaseException as e:
            Path(target).unlink(missing_ok=True)
            if isinstance(e, ObjectNotFoundError):
                raise SourceNotFoundError(
                    f"{_WHERE}: {shown} was listed but is gone; run the fetch again"
                ) from None
            if isinstance(e, ObjectTooLargeError):
                raise FetchError(
                    f"{_WHERE}: {shown} grew after it was listed ({obj.size} bytes); expected the object "
                    "as listed: run the fetch again"
                ) from None
            if isinstance(e, S3StoreError):
                raise SourceUnreachableError(
                    f"{_WHERE}: download of {shown} failed: {e}", status=e.status
                ) from None
            raise
        self._options.log(f"{_WHERE}: downloaded {shown} ({obj.size} bytes)")
        return FetchedFile(Path(target), event_time, name)

    def _client_for_listing(self) -> Any:
        """The S3 client, made on first use, once the deployment's trust allows the pattern."""
        allowed = self._options.trust.s3_source_prefixes
        if not any(self.pattern.within(a) for a in allowed):
            shown = ", ".join(allowed) or "none"
            raise FetchError(
                f"{_WHERE}: {self._path} is outside the S3 prefixes sources may read ({shown}); "
                f"allow it with {S3_SOURCE_PREFIXES_HINT}"
            )
        if self._client is None:
            endpoint_from_env = bool(
                os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            )
            settings = S3ClientSettings(path_style=endpoint_from_env or None, timeout=self._options.timeout)
            try:
                self._client = make_s3_client(settings)
            except (OdfError, ValueError) as e:
                raise FetchError(f"{_WHERE}: cannot make an S3 client: {redact_text(str(e))}") from None
        return self._client

    def _call(self, method: Any, **request: Any) -> dict[str, Any]:
        """One ListObjectsV2 request; botocore's errors as fetch errors that name the bucket and prefix."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        shown = f"s3://{self.pattern.bucket}/{self.pattern.list_prefix}"
        try:
            return method(**request)
        except ClientError as e:
            error = e.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            detail = redact_text(str(error.get("Message") or ""))
            message = f"{_WHERE}: listing {shown} failed: {code} (HTTP {status}) {detail}"
            if code == "NoSuchBucket":
                raise SourceNotFoundError(
                    f"{_WHERE}: bucket {self.pattern.bucket!r} does not exist"
                ) from None
            retryable = code in _RETRYABLE_CODES or (status is not None and status >= 500)
            raise SourceUnreachableError(message.rstrip(), status=status, retryable=retryable) from None
        except NoCredentialsError:
            raise FetchError(
                f"{_WHERE}: no AWS credentials to list {shown}; they come from the worker's environment "
                "(AWS_ACCESS_KEY_ID, AWS_PROFILE, an instance role, ...), never from the manifest"
            ) from None
        except BotoCoreError as e:
            raise SourceUnreachableError(
                f"{_WHERE}: listing {shown} failed: {redact_text(str(e))}; expected an answer within "
                f"{self._options.timeout:g} s"
            ) from None

"""What every fetch step shares: options, results and errors (the step modules import these, not
`fetcher`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from airflow_odf.odf.errors import OdfError, OdfFormatError
from airflow_odf.odf.format.model import SourceState
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.fetch.templating import TemplateError, render
from airflow_odf.odf.ingest.trust import TEMPLATE_ENV_HINT, SourceTrust

SOURCE_NAME = "default"
STATE_ETAG = "odf/etag"
STATE_LAST_MODIFIED = "odf/last-modified"

_logger = logging.getLogger("airflow_odf.odf.ingest.fetch.fetcher")


@dataclass(frozen=True)
class EngineS3:
    """An S3 endpoint whose objects the engine reads itself, and the scheme it reads them by (`s3a`)."""

    scheme: str
    endpoint_url: str | None


@dataclass(frozen=True)
class FetchOptions:
    """Per-run settings of a fetch; the ingest layer builds them from the task and its connections.

    `trust` says what the manifest may do here (Container steps, which variables templates read, which
    local directories it may read); by default what the environment variables allow (`SourceTrust`).
    `engine_s3`: set by the ingest layer when the engine reads S3 itself and the source has no prepare
    step (which needs a local file); S3 FilesGlob objects on that endpoint are then handed over in place.
    """

    cache_dir: Path
    has_previous_data: bool = False
    fetch_uncacheable: bool = False
    files_per_batch: int = 1
    env: Mapping[str, str] | None = None
    timeout: float = 30.0
    # relative FilesGlob paths are resolved here (default: the first allowed local source directory, else
    # the working directory: `SourceTrust.source_directory`)
    base_dir: Path | None = None
    engine_s3: EngineS3 | None = None
    trust: SourceTrust = field(default_factory=SourceTrust.resolve)
    log: Callable[[str], None] = field(default=_logger.info)

    def variable(self, name: str, where: str) -> str | None:
        """The value of `name` for a template or a Container pass-through variable (None: unset).

        `env` if given (what the caller chose to hand over), else the process environment, of which a
        manifest reads only the names the trust allows: a disallowed name is an error even when the
        template has a default, so that a misconfiguration never passes unnoticed.
        """
        if self.env is not None:
            return self.env.get(name)
        if not self.trust.env_allowed(name):
            allowed = ", ".join(self.trust.template_env_allow) or "none"
            raise TemplateError(
                f"{where}: environment variable {name} may not be read by a manifest (allowed: {allowed}); "
                f"allow it with {TEMPLATE_ENV_HINT}"
            )
        return os.environ.get(name)

    def render(self, text: str, where: str) -> str:
        """`text` with its `${{ env.NAME }}` templates filled in; `where` names the field in errors."""
        return render(text, lambda name: self.variable(name, where), where)


@dataclass(frozen=True)
class FetchedFile:
    """One fetched file, ready for the prepare steps; `source_event_time` None means "use system time".
    `uri` instead of `path`: an object the engine reads where it is (`s3a://bucket/key`), not downloaded;
    `size` its bytes as listed (the engine sizes its partitions by the input's bytes)."""

    path: Path | None
    source_event_time: Timestamp | None
    name: str | None = None
    uri: str | None = None
    size: int | None = None


@dataclass(frozen=True)
class FetchResult:
    """Files to ingest in order, and the source state to record in the AddData block of this iteration."""

    files: list[FetchedFile]
    new_source_state: SourceState | None
    has_more: bool = False
    up_to_date: bool = False
    uncacheable: bool = False


def up_to_date(prev_state: SourceState | None, *, uncacheable: bool = False) -> FetchResult:
    """Nothing new at the source: no files, and the state stays what it was."""
    return FetchResult(files=[], new_source_state=prev_state, up_to_date=True, uncacheable=uncacheable)


def make_state(kind: str, value: str) -> SourceState:
    return SourceState(source_name=SOURCE_NAME, kind=kind, value=value)


@dataclass(frozen=True)
class PollingState:
    """A previous `SourceState` understood: an ETag or a Last-Modified time (the reference's two kinds)."""

    etag: str | None = None
    last_modified: Timestamp | None = None

    @classmethod
    def of(cls, state: SourceState | None, where: str) -> PollingState:
        if state is None:
            return cls()
        if state.kind == STATE_ETAG:
            return cls(etag=state.value)
        if state.kind == STATE_LAST_MODIFIED:
            try:
                return cls(last_modified=Timestamp.parse(state.value))
            except OdfFormatError as e:
                raise FetchError(f"{where}: previous source state {state.kind} is unreadable: {e}") from None
        raise FetchError(
            f"{where}: previous source state has kind {state.kind!r}; "
            f"expected {STATE_ETAG!r} or {STATE_LAST_MODIFIED!r}"
        )


def file_mtime(stat: os.stat_result) -> Timestamp:
    """Modification time rounded to milliseconds, as the reference records it in a Last-Modified state."""
    return Timestamp.from_epoch_nanos((stat.st_mtime_ns + 500_000) // 1_000_000 * 1_000_000)


class FetchError(OdfError):
    """A fetch failed; `retryable` tells the scheduler whether trying again later may help."""

    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable


class SourceNotFoundError(FetchError):
    """The source does not exist (HTTP 404, a glob matching nothing, a missing file)."""


class SourceUnreachableError(FetchError):
    """The source exists but did not answer properly (HTTP 5xx, refused connection, timeout)."""

    retryable = True

    def __init__(
        self, message: str, *, status: int | None = None, body: str = "", retryable: bool | None = None
    ) -> None:
        super().__init__(message, retryable=retryable)
        self.status = status
        self.body = body


class ContainerRuntimeError(FetchError):
    """No usable docker/podman engine, or the fetch container failed."""

"""Does a root dataset's polling source have new data? Answered without ingesting anything.

This is what `OdfSourceChangedSensor` asks on every poke, so it has to be cheap: a Url source gets a
conditional request carrying the ETag / Last-Modified recorded in the dataset's source state (the body
is never read), a FilesGlob source is listed and compared with the last ingested file name, in the
order the ingest uses. Sources that can only tell by running (Container), or that gave no caching
headers last time, are "unknown", which answers yes: the ingest that follows finds out, and commits
nothing if there was nothing. The check obeys the same `SourceTrust` as the ingest: it reads only
allowed variables and local directories, and a disallowed Container source is refused here already.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.ingest.fetch.container import ContainerSource
from airflow_odf.odf.ingest.fetch.files_glob import GlobSource
from airflow_odf.odf.ingest.fetch.types import SOURCE_NAME, FetchOptions, SourceNotFoundError
from airflow_odf.odf.ingest.fetch.url import UrlSource
from airflow_odf.odf.ingest.trust import SourceTrust

_log = logging.getLogger(__name__)
#: A check downloads nothing; a fetch step that tried to would fail here instead of filling a cache.
_NO_DOWNLOADS = Path(os.devnull)


class SourceCheckError(OdfError):
    """The dataset has no polling source to check (not a root, or no SetPollingSource)."""


@dataclass(frozen=True)
class SourceCheck:
    """The answer: `changed` (worth running the ingest) and a sentence saying why."""

    changed: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"changed": self.changed, "reason": self.reason}


def check_source(
    dataset: Dataset,
    alias: str,
    *,
    source_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    trust: SourceTrust | None = None,
    timeout: float = 30.0,
    log: Callable[[str], None] = _log.info,
) -> SourceCheck:
    """Whether the polling source of `dataset` (named `alias` in messages) has data not ingested yet.

    `source_dir` resolves relative FilesGlob paths (as the ingest's), `env` fills `${{ env.NAME }}`
    templates (default: the process environment, as far as `trust` allows; default trust: what the
    environment variables allow). A missing source (HTTP 404, no matching file) is "no new data"; an
    unreachable one raises `SourceUnreachableError` (retryable).
    """
    state = dataset.state()
    if state.kind is not model.DatasetKind.ROOT or state.polling_source is None:
        raise SourceCheckError(f"{alias} has no polling source (SetPollingSource) to check")
    step = state.polling_source.fetch
    ingested = state.last_offset is not None
    prev_state = state.source_states.get(SOURCE_NAME)
    options = FetchOptions(
        cache_dir=_NO_DOWNLOADS,
        has_previous_data=ingested,
        env=env,
        timeout=timeout,
        base_dir=source_dir,
        trust=trust or SourceTrust.resolve(),
        log=log,
    )
    if ingested and isinstance(getattr(step, "cache", None), model.SourceCachingForever):
        return SourceCheck(False, f"{alias}: the source is cached forever and was ingested already")
    try:
        if isinstance(step, model.FetchStepUrl):
            if ingested and prev_state is None:
                return SourceCheck(
                    True,
                    f"{alias}: the source gave no ETag or Last-Modified last time, so only fetching it "
                    "can tell; assuming new data",
                )
            changed, reason = UrlSource(step, options).check(prev_state)
            return SourceCheck(changed, f"{alias}: {reason}")
        if isinstance(step, model.FetchStepFilesGlob):
            return _glob_check(GlobSource(step, options).pending(prev_state), prev_state, alias)
        if isinstance(step, model.FetchStepContainer):
            ContainerSource(step, options)  # refuses a step the ingest would refuse, runs nothing
    except SourceNotFoundError as e:
        return SourceCheck(False, f"{alias}: {e}")
    kind = type(step).__name__.removeprefix("FetchStep")
    return SourceCheck(True, f"{alias}: a {kind} source tells what is new only by running; assuming new data")


def _glob_check(pending: list[Path], prev_state: model.SourceState | None, alias: str) -> SourceCheck:
    after = f"after {prev_state.value}" if prev_state is not None else "(nothing ingested yet)"
    if not pending:
        return SourceCheck(False, f"{alias}: no file {after}")
    shown = ", ".join(p.name for p in pending[:3]) + (", ..." if len(pending) > 3 else "")
    return SourceCheck(True, f"{alias}: {len(pending)} new file(s) {after}: {shown}")

"""Waiting for a polling source to have new data: `OdfSourceChangedTrigger` (a deferred
`OdfSourceChangedSensor`). The question itself is the core's `check_source`; this module only asks it
for a dataset of an `odf_repo` connection, off the event loop.

`${{ env.NAME }}` templates in the source's URL are filled from the environment of the process that
checks: the worker for poke / reschedule mode, the triggerer when deferred. Either way the check obeys
the sensor's trust arguments, else the `[odf]` options and environment of that process
(`airflow_odf.source_trust`): a template reads only allowed variables, a local source only allowed
directories.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.odf.ingest.source_check import check_source
from airflow_odf.source_trust import source_trust
from airflow_odf.triggers.base import OdfPollingTrigger

_log = logging.getLogger(__name__)


def source_status(
    odf_conn_id: str,
    dataset: str,
    *,
    source_dir: str | None = None,
    request_timeout: float = 30.0,
    trust: dict[str, Any] | None = None,
    log: Callable[[str], None] = _log.info,
) -> dict[str, Any]:
    """`{"dataset", "dataset_id", "changed", "reason"}` for the polling source of `dataset` (blocking I/O).
    `trust`: the sensor's trust arguments (`SourceTrustArguments.trust_arguments()`)."""
    resolved = source_trust(**(trust or {}))
    repo = OdfRepoHook(odf_conn_id).open_repository()
    did = repo.resolve(dataset)
    found = check_source(
        repo.dataset_by_id(did),
        dataset,
        source_dir=Path(source_dir) if source_dir else None,
        trust=resolved,
        timeout=request_timeout,
        log=log,
    )
    return {"dataset": dataset, "dataset_id": str(did), **found.as_dict()}


class OdfSourceChangedTrigger(OdfPollingTrigger):
    """Fires once, when the polling source of `dataset` has data that was not ingested yet.

    Events: `{"status": "changed", "dataset", "dataset_id", "changed", "reason"}`,
    `{"status": "error", "dataset", "message"}` (a permanent failure: a missing variable, an unknown
    dataset, a malformed source), `{"status": "timeout", "dataset", "message"}`; a source that does
    not answer (network, HTTP 5xx) is logged and asked again (`OdfPollingTrigger`).

    :param source_dir: where relative FilesGlob paths are resolved (as the ingest task's `source_dir`).
    :param request_timeout: seconds an HTTP source has to answer.
    :param trust: the sensor's trust arguments; what they leave open comes from the triggerer's `[odf]`
        options and environment.
    """

    def __init__(
        self,
        *,
        source_dir: str | None = None,
        request_timeout: float = 30.0,
        trust: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source_dir = source_dir
        self.request_timeout = float(request_timeout)
        self.trust = dict(trust or {})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{__name__}.OdfSourceChangedTrigger",
            {
                **self.common_kwargs(),
                "source_dir": self.source_dir,
                "request_timeout": self.request_timeout,
                "trust": self.trust,
            },
        )

    def check(self) -> dict[str, Any] | None:
        status = source_status(
            self.odf_conn_id,
            self.dataset,
            source_dir=self.source_dir,
            request_timeout=self.request_timeout,
            trust=self.trust,
            log=self.log.info,
        )
        return {"status": "changed", **status} if status["changed"] else None

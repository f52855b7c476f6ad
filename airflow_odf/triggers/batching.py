"""Waiting for a derivative's batch: `OdfBatchingTrigger` (a deferred `OdfBatchingSensor`).

The question is the core's `check_batching` (kamu's batching rule: at least `min_records_to_await`
unprocessed input records, or `max_batching_interval` seconds since the first unprocessed input
change); this module asks it for a derivative of an `odf_repo` connection, off the event loop. Each
check reads `refs/head` and the summary of the derivative and of its inputs; blocks are read only to
date the first unprocessed change, each once per trigger (`BacklogCache`). The trigger wakes at the
moment the interval ends, not at the next poll after it.
"""

from __future__ import annotations

from typing import Any

from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.odf.transform.batching import BacklogCache, BatchingRule, BatchingStatus, check_batching
from airflow_odf.triggers.base import OdfPollingTrigger


def batching_status(
    odf_conn_id: str, dataset: str, rule: BatchingRule, *, cache: BacklogCache | None = None
) -> BatchingStatus:
    """The batching rule evaluated now for the derivative `dataset` (blocking I/O)."""
    repo = OdfRepoHook(odf_conn_id).open_repository()
    return check_batching(repo, dataset, rule, cache=cache)


def ready_payload(status: BatchingStatus) -> dict[str, Any]:
    """What a satisfied rule reports, as event payload and (without `status`) as the sensor's XCom."""
    return {"status": "ready", **status.as_dict()}


class OdfBatchingTrigger(OdfPollingTrigger):
    """Fires once, when the derivative `dataset` has a batch to transform under its batching rule.

    Events: `{"status": "ready", "dataset", "dataset_id", "satisfied", "reason", "new_records",
    "minRecordsToAwait", "maxBatchingInterval", "first_change", "deadline", "input_heads", "inputs"}`
    (`input_heads`: input DID -> the head counted, the transform's pins), `{"status": "error",
    "dataset", "message"}` (a permanent failure), `{"status": "timeout", "dataset", "message"}`;
    transient failures are logged and checked again (`OdfPollingTrigger`).

    :param dataset: the derivative's name in the repository of `odf_conn_id`.
    :param min_records_to_await: run once the inputs hold this many unprocessed records together.
    :param max_batching_interval: seconds after the first unprocessed input change to run anyway
        (None: only the records count).
    """

    def __init__(
        self,
        *,
        min_records_to_await: int = 1,
        max_batching_interval: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.rule = BatchingRule(min_records_to_await, max_batching_interval)
        self._cache = BacklogCache()
        self._deadline_in: float | None = None
        self._last_line = ""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{__name__}.OdfBatchingTrigger",
            {
                **self.common_kwargs(),
                "min_records_to_await": self.rule.min_records_to_await,
                "max_batching_interval": self.rule.max_batching_interval,
            },
        )

    def check(self) -> dict[str, Any] | None:
        status = batching_status(self.odf_conn_id, self.dataset, self.rule, cache=self._cache)
        line = status.describe()
        if line != self._last_line:  # a line per change, not per poll
            self.log.info("%s", line)
            self._last_line = line
        self._deadline_in = status.seconds_to_deadline()
        return ready_payload(status) if status.satisfied else None

    def next_check_in(self) -> float:
        if self._deadline_in is None:
            return self.poll_interval
        return min(self.poll_interval, self._deadline_in)

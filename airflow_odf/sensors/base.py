"""What the ODF sensors share: a dataset of an `odf_repo` connection, failed checks that never hide
errors, and the deferrable mode.

Only "nothing new yet" is a soft outcome. A check that fails transiently (network, HTTP 5xx) is logged
at WARNING with its message and counts as "not yet": the poke (or the trigger) tries again. A
permanent failure (a bad template, a missing variable, an unknown dataset, an unreadable repository, a
malformed source) fails the task at once with the core's message (`AirflowFailException`, no retry);
`airflow_odf.triggers.base.check_failure` decides which is which. `soft_fail` keeps the meaning
Airflow documents for sensors, a timeout ends *skipped*, and no longer turns such a failure into a skip
(`never_fail`, which asks for exactly that, still does); every skip logs its reason.

`poke` / `reschedule` mode run `poke()` on the worker. `deferrable=True` hands the whole wait to a
trigger (`trigger()`), with an absolute deadline of now + `timeout`; `execute_complete` turns its
event into the sensor's result, or raises: `AirflowSensorTimeout` on timeout, `AirflowFailException`
with the check's message on a permanent failure.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from airflow.sdk import BaseSensorOperator, Context
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
)

from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.triggers.base import OdfPollingTrigger, check_failure

T = TypeVar("T")


class OdfBaseSensor(BaseSensorOperator):
    """Base of the ODF sensors: waits on `dataset` in the repository of `odf_conn_id`.

    :param deferrable: wait in the triggerer instead of a worker slot (default:
        `[operators] default_deferrable`).
    """

    template_fields: tuple[str, ...] = ("dataset",)
    ui_color = "#e8f1d5"
    #: The `status` of the trigger event that means "done".
    done_status: str = ""

    def __init__(
        self,
        *,
        dataset: str,
        odf_conn_id: str = OdfRepoHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        if not dataset:
            raise ValueError("dataset: the name of an ODF dataset is required")
        super().__init__(**kwargs)
        self.dataset = dataset
        self.odf_conn_id = odf_conn_id
        self.deferrable = deferrable

    def call(self, fn: Callable[[], T]) -> T | None:
        """Runs one check: its result, or None ("not yet") after a transient failure, logged at WARNING;
        a permanent failure raises `AirflowFailException` with its message."""
        try:
            return fn()
        except Exception as e:
            failure = check_failure(self.dataset, e)
            if not failure.transient:
                raise AirflowFailException(failure.message) from None
            self.log.warning("%s (transient: checking again at the next poke)", failure.message)
            return None

    @abstractmethod
    def trigger(self, end_time: float) -> OdfPollingTrigger:
        """The trigger that waits for what `poke` checks, giving up at `end_time` (epoch seconds)."""

    def execute(self, context: Context) -> Any:
        if self.deferrable:
            self.defer(trigger=self.trigger(time.time() + self.timeout), method_name="execute_complete")
        with self.skipping_only_on_timeout():
            return super().execute(context)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        with self.skipping_only_on_timeout():
            return super().resume_execution(next_method, next_kwargs, context)

    @contextmanager
    def skipping_only_on_timeout(self) -> Iterator[None]:
        """Around Airflow's sensor logic, whose `soft_fail` skips on any failure: re-raises the failure
        unless it was a timeout (or `never_fail` asked to skip), and logs the reason of every skip."""
        try:
            yield
        except AirflowSkipException as skip:
            cause = skip.__cause__
            failed = isinstance(cause, AirflowException) and not isinstance(cause, AirflowSensorTimeout)
            if failed and not self.never_fail:
                raise cause from None
            self.log.warning("%s: skipped: %s", self.dataset, cause or skip)
            raise

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """The deferred wait ended: the same XCom as `poke` gives, or the failure as an exception."""
        event = event if isinstance(event, dict) else {"status": "error", "message": f"bad event {event!r}"}
        status = event.get("status")
        if status == self.done_status:
            self.log.info("%s: %s", self.dataset, event)
            return {k: v for k, v in event.items() if k != "status"}
        message = str(event.get("message", event))
        message = message if message.startswith(f"{self.dataset}:") else f"{self.dataset}: {message}"
        if status == "timeout":
            raise AirflowSensorTimeout(message)
        raise AirflowFailException(message)

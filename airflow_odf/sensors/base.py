"""What the ODF sensors share: a dataset of an `odf_repo` connection, ODF errors mapped onto Airflow's
retry semantics, and the deferrable mode.

`poke` / `reschedule` mode run `poke()` on the worker. `deferrable=True` hands the whole wait to a
trigger (`trigger()`), with an absolute deadline of now + `timeout`; `execute_complete` turns its
event into the sensor's result, or raises: `AirflowSensorTimeout` on timeout, on error
`AirflowException` or, when retrying cannot help, `AirflowFailException` — as a failed poke would
(`soft_fail` / `never_fail` apply too).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

from airflow.sdk import BaseSensorOperator, Context
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from airflow_odf.exceptions import airflow_error
from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.odf.errors import OdfError
from airflow_odf.triggers.base import OdfPollingTrigger

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

    def call(self, fn: Callable[[], T]) -> T:
        """Runs a core call, turning ODF errors into the Airflow exception with the right retry semantics."""
        try:
            return fn()
        except OdfError as e:
            raise airflow_error(self.dataset, e) from None

    @abstractmethod
    def trigger(self, end_time: float) -> OdfPollingTrigger:
        """The trigger that waits for what `poke` checks, giving up at `end_time` (epoch seconds)."""

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        self.defer(trigger=self.trigger(time.time() + self.timeout), method_name="execute_complete")

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """The deferred wait ended: the same XCom as `poke` gives, or the failure as an exception."""
        event = event if isinstance(event, dict) else {"status": "error", "message": f"bad event {event!r}"}
        status = event.get("status")
        if status == self.done_status:
            self.log.info("%s: %s", self.dataset, event)
            return {k: v for k, v in event.items() if k != "status"}
        if status == "timeout":
            raise AirflowSensorTimeout(f"{self.dataset}: {event.get('message', 'timed out')}")
        failure = AirflowException if event.get("retryable", True) else AirflowFailException
        raise failure(f"{self.dataset}: {event.get('message', event)}")

"""What the ODF wait-triggers share: poll a blocking check off the event loop until it reports, fails,
or an absolute deadline passes.

A deferred sensor hands the triggerer its wait; the check itself (open the repository, read a head,
ask a source) is blocking I/O, so it runs in `asyncio.to_thread`. Every wait ends with exactly one
event: the check's own payload, `{"status": "error", "message", "retryable"}` or
`{"status": "timeout"}`. The deadline is absolute (epoch seconds) so that a triggerer restart does not
extend it. Keyword arguments are JSON values only: they are stored in the metadata DB and rebuilt in
another process.
"""

from __future__ import annotations

import asyncio
import time
from abc import abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk.exceptions import AirflowFailException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_odf.exceptions import airflow_error
from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.odf.errors import OdfError


def retryable(dataset: str, error: Exception) -> bool:
    """Whether a retry may help, as the operators decide it (`airflow_odf.exceptions`)."""
    if not isinstance(error, OdfError):
        return True  # a missing connection, an I/O error: may be fixed or pass
    return not isinstance(airflow_error(dataset, error), AirflowFailException)


class OdfPollingTrigger(BaseTrigger):
    """Base of the deferrable waits: `check()` (blocking) every `poll_interval` s until `end_time`.

    :param dataset: the dataset's name in the repository of `odf_conn_id`.
    :param poll_interval: seconds between two checks.
    :param end_time: give up at this time (seconds since the epoch); None waits forever.
    """

    def __init__(
        self,
        *,
        dataset: str,
        odf_conn_id: str = OdfRepoHook.default_conn_name,
        poll_interval: float = 60.0,
        end_time: float | None = None,
    ) -> None:
        super().__init__()
        self.dataset = dataset
        self.odf_conn_id = odf_conn_id
        self.poll_interval = float(poll_interval)
        self.end_time = None if end_time is None else float(end_time)

    def common_kwargs(self) -> dict[str, Any]:
        """The constructor arguments of this base, for the subclasses' `serialize()`."""
        return {
            "dataset": self.dataset,
            "odf_conn_id": self.odf_conn_id,
            "poll_interval": self.poll_interval,
            "end_time": self.end_time,
        }

    @abstractmethod
    def check(self) -> dict[str, Any] | None:
        """One blocking check (runs in a thread): the event payload when done, else None."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                found = await asyncio.to_thread(self.check)
            except Exception as e:  # the task decides what a failure means; the triggerer must not die
                yield TriggerEvent(
                    {
                        "status": "error",
                        "dataset": self.dataset,
                        "message": f"{type(e).__name__}: {e}",
                        "retryable": retryable(self.dataset, e),
                    }
                )
                return
            if found is not None:
                yield TriggerEvent(found)
                return
            left = None if self.end_time is None else self.end_time - time.time()
            if left is not None and left <= 0:
                until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.end_time))
                message = f"nothing yet at the deadline {until}"
                yield TriggerEvent({"status": "timeout", "dataset": self.dataset, "message": message})
                return
            await asyncio.sleep(self.poll_interval if left is None else min(self.poll_interval, left))

"""What the ODF wait-triggers share: poll a blocking check off the event loop until it reports, fails
for good, or an absolute deadline passes; and what a failed check means (`check_failure`), for the
sensors as well.

Only "nothing new yet" is a soft outcome. A check that fails is either transient (a network error, an
HTTP 5xx, a timeout: logged at WARNING with its message, and checked again at the next poll) or
permanent (a bad template, a missing variable or connection, an unknown dataset, an unreadable
repository, a malformed source: it ends the wait with the core's message, and the task fails without
retry). The core's own classification decides (`airflow_odf.exceptions.airflow_error`,
`FetchError.retryable`).

A deferred sensor hands the triggerer its wait; the check itself (open the repository, read a head,
ask a source) is blocking I/O, so it runs in `asyncio.to_thread`. Every wait ends with exactly one
event: the check's own payload, `{"status": "error", "message"}` (a permanent failure) or
`{"status": "timeout", "message"}` (naming the last transient failure, if any). The deadline is
absolute (epoch seconds) so that a triggerer restart does not extend it. Keyword arguments are JSON
values only: they are stored in the metadata DB and rebuilt in another process.
"""

from __future__ import annotations

import asyncio
import time
from abc import abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from airflow.sdk.exceptions import AirflowFailException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_odf.exceptions import airflow_error
from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.odf.errors import OdfError


@dataclass(frozen=True)
class CheckFailure:
    """A check that raised: its message (naming the dataset) and whether checking again may succeed."""

    message: str
    transient: bool


def check_failure(dataset: str, error: Exception) -> CheckFailure:
    """What a failed check of `dataset` means. ODF errors as the operators map them: retryable ones
    (unreachable source or remote, HTTP 5xx, S3) are transient, the rest permanent. Other errors are
    permanent (a missing connection, an unreadable folder), except a refused connection or a timeout."""
    if isinstance(error, OdfError):
        transient = not isinstance(airflow_error(dataset, error), AirflowFailException)
        text = str(error)
    else:
        transient = isinstance(error, ConnectionError | TimeoutError)
        text = f"{type(error).__name__}: {error}"
    return CheckFailure(text if text.startswith(f"{dataset}:") else f"{dataset}: {text}", transient)


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

    def next_check_in(self) -> float:
        """Seconds until the next check: `poll_interval`, or less when the last check knows the moment
        its answer changes (a batching interval ending)."""
        return self.poll_interval

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last_failure: CheckFailure | None = None
        while True:
            try:
                found = await asyncio.to_thread(self.check)
                last_failure = None
            except Exception as e:  # the triggerer must not die: the failure becomes an event or a retry
                last_failure = check_failure(self.dataset, e)
                if not last_failure.transient:
                    yield TriggerEvent(
                        {"status": "error", "dataset": self.dataset, "message": last_failure.message}
                    )
                    return
                self.log.warning(
                    "%s (transient: checking again in %s s)", last_failure.message, self.poll_interval
                )
                found = None
            if found is not None:
                yield TriggerEvent(found)
                return
            left = None if self.end_time is None else self.end_time - time.time()
            if left is not None and left <= 0:
                until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.end_time))
                message = f"nothing yet at the deadline {until}"
                if last_failure is not None:
                    message += f"; the last check failed: {last_failure.message}"
                yield TriggerEvent({"status": "timeout", "dataset": self.dataset, "message": message})
                return
            wait = self.next_check_in()
            await asyncio.sleep(wait if left is None else min(wait, left))

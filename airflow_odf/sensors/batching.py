"""`OdfBatchingSensor`: waits until a derivative has a batch worth transforming (kamu's batching rule).

Put it before the derivative's `OdfTransformOperator`: it succeeds once the derivative's inputs hold
at least `min_records_to_await` records it has not processed, or `max_batching_interval` has passed
since the first unprocessed input change — whichever comes first — and hands the transform the input
heads it counted, so the transform processes exactly that batch:

    batch = OdfBatchingSensor(task_id="await_batch", dataset="...", min_records_to_await=1000,
                              max_batching_interval=timedelta(hours=1), deferrable=True)
    transform = OdfTransformOperator(task_id="transform", dataset="...",
                                     input_heads=batch.output["input_heads"])

Its XCom: the rule's status (`reason` is `records` or `interval`, `new_records`, `first_change`,
`deadline`, `inputs`, `input_heads`), and `input_heads` alone under the key `input_heads`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import Context, PokeReturnValue

from airflow_odf.odf.transform.batching import BacklogCache, BatchingRule, BatchingRuleError
from airflow_odf.sensors.base import OdfBaseSensor
from airflow_odf.triggers.batching import OdfBatchingTrigger, batching_status, ready_payload

#: The XCom key under which the sensor leaves the transform's pins (input DID -> head).
INPUT_HEADS_KEY = "input_heads"


class OdfBatchingSensor(OdfBaseSensor):
    """Succeeds when the derivative `dataset` has a batch under its batching rule.

    :param dataset: the derivative's name in the repository of `odf_conn_id` (templated).
    :param min_records_to_await: N, the unprocessed records of all inputs together that start a run
        (default 1: any new record).
    :param max_batching_interval: T (a `timedelta`, seconds, or `30s`/`15m`/`1h`/`2d`): run anyway
        once T has passed since the first unprocessed input change; None waits for N alone. Keep the
        sensor's `timeout` longer, or it gives up before T can end.
    :param deferrable: wait in the triggerer (`OdfBatchingTrigger`), which wakes exactly when T ends;
        poke and reschedule modes check every `poke_interval`.
    """

    template_fields = ("dataset",)
    done_status = "ready"
    ui_color = "#d5e8f1"

    def __init__(
        self,
        *,
        min_records_to_await: int = 1,
        max_batching_interval: timedelta | float | str | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            rule = BatchingRule(min_records_to_await, max_batching_interval)
        except BatchingRuleError as e:
            raise ValueError(str(e)) from None
        super().__init__(**kwargs)
        self.min_records_to_await = rule.min_records_to_await
        self.max_batching_interval = rule.max_batching_interval
        self._cache = BacklogCache()  # across the pokes of one try

    @property
    def rule(self) -> BatchingRule:
        return BatchingRule(self.min_records_to_await, self.max_batching_interval)

    def poke(self, context: Context) -> PokeReturnValue:
        status = self.call(
            lambda: batching_status(self.odf_conn_id, self.dataset, self.rule, cache=self._cache)
        )
        if status is None:  # a transient failure, logged
            return PokeReturnValue(False)
        self.log.info("%s", status.describe())
        if not status.satisfied:
            return PokeReturnValue(False)
        context["ti"].xcom_push(key=INPUT_HEADS_KEY, value=status.input_heads())
        payload = ready_payload(status)
        return PokeReturnValue(True, xcom_value={k: v for k, v in payload.items() if k != "status"})

    def trigger(self, end_time: float) -> OdfBatchingTrigger:
        return OdfBatchingTrigger(
            dataset=self.dataset,
            odf_conn_id=self.odf_conn_id,
            poll_interval=self.poke_interval,
            end_time=end_time,
            min_records_to_await=self.min_records_to_await,
            max_batching_interval=self.max_batching_interval,
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().execute_complete(context, event)
        context["ti"].xcom_push(key=INPUT_HEADS_KEY, value=result["input_heads"])
        return result

"""`OdfHeadChangedSensor`: waits until a dataset's head moves past a known block hash.

Typical use: template `known_head` from the XCom of the task that last processed the dataset, and
let the DAG continue as soon as someone (another DAG, another deployment pulling into this repository)
commits on top of it. Its XCom is `{dataset, dataset_id, head, prev_head}`, so the downstream task can
pin itself to exactly that head.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.sensors.base import OdfBaseSensor
from airflow_odf.triggers.head import OdfHeadTrigger, head_moved, moved_payload, read_head


class OdfHeadChangedSensor(OdfBaseSensor):
    """Succeeds when the head of `dataset` is not `known_head`; with no `known_head`, when it has one.

    :param dataset: the dataset's name in the repository of `odf_conn_id` (templated).
    :param known_head: the block hash already seen (templated; empty or "None" means none).
    :param deferrable: wait in the triggerer (`OdfHeadTrigger`) instead of poking from a worker.
    """

    template_fields = ("dataset", "known_head")
    done_status = "moved"

    def __init__(self, *, known_head: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.known_head = known_head

    def known(self) -> str | None:
        """`known_head` after templating: a rendered None or nothing means "no head seen yet"."""
        value = (self.known_head or "").strip()
        if value in ("", "None"):
            return None
        try:  # a typo would otherwise count as "moved" at once
            return str(Multihash.parse(value))  # the form refs/head has, whatever base was given
        except OdfError as e:
            raise AirflowFailException(
                f"{self.dataset}: known_head {value!r} is not a block hash: {e}"
            ) from None

    def poke(self, context: Context) -> PokeReturnValue:
        known = self.known()
        reading = self.call(lambda: read_head(self.odf_conn_id, self.dataset))
        if reading is None:  # a transient failure, logged
            return PokeReturnValue(False)
        if not head_moved(reading.head, known):
            self.log.info("%s: head is still %s", self.dataset, reading.head or "(no dataset yet)")
            return PokeReturnValue(False)
        payload = moved_payload(self.dataset, reading, known)
        self.log.info("%s: head moved from %s to %s", self.dataset, known, reading.head)
        return PokeReturnValue(True, xcom_value={k: v for k, v in payload.items() if k != "status"})

    def trigger(self, end_time: float) -> OdfHeadTrigger:
        return OdfHeadTrigger(
            dataset=self.dataset,
            known_head=self.known(),
            odf_conn_id=self.odf_conn_id,
            poll_interval=self.poke_interval,
            end_time=end_time,
        )

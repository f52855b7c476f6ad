"""`OdfSourceChangedSensor`: waits until a root dataset's polling source has data not ingested yet.

It asks the source the way the ingest would (a conditional request with the recorded ETag /
Last-Modified, or the files after the last ingested one) but downloads nothing, so a DAG can poll a
source often and start the Spark ingest only when there is something to ingest. Sources that cannot
tell without running (Container, URLs without caching headers) always answer yes.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context, PokeReturnValue

from airflow_odf.sensors.base import OdfBaseSensor
from airflow_odf.source_trust import SourceTrustArguments
from airflow_odf.triggers.source import OdfSourceChangedTrigger, source_status


class OdfSourceChangedSensor(SourceTrustArguments, OdfBaseSensor):
    """Succeeds when the polling source (SetPollingSource) of `dataset` has new data.

    XCom: `{dataset, dataset_id, changed, reason}`. A missing source (HTTP 404, no matching file) is
    "not yet"; an unreachable one (network, HTTP 5xx) is logged at WARNING and asked again at the next
    poke; a permanent error (a template variable that is not set, an unknown dataset, a malformed
    source) fails the task with the core's message, `soft_fail` or not.

    :param dataset: the root dataset's name in the repository of `odf_conn_id` (templated).
    :param source_dir: where relative FilesGlob paths are resolved, as for the ingest task (templated).
    :param request_timeout: seconds an HTTP source has to answer.
    :param deferrable: wait in the triggerer (`OdfSourceChangedTrigger`) instead of poking from a worker.

    The check obeys the same trust arguments as the ingest task (`template_env_allow`,
    `local_source_dirs`, `allow_container_sources`; `SourceTrustArguments`), resolved where it runs.
    """

    template_fields = ("dataset", "source_dir")
    done_status = "changed"

    def __init__(
        self, *, source_dir: str | None = None, request_timeout: float = 30.0, **kwargs: Any
    ) -> None:
        if request_timeout <= 0:
            raise ValueError(f"request_timeout={request_timeout}: must be positive")
        super().__init__(**kwargs)
        self.source_dir = source_dir
        self.request_timeout = request_timeout

    def poke(self, context: Context) -> PokeReturnValue:
        status = self.call(
            lambda: source_status(
                self.odf_conn_id,
                self.dataset,
                source_dir=self.source_dir,
                request_timeout=self.request_timeout,
                trust=self.trust_arguments(),
                log=self.log.info,
            )
        )
        if status is None:  # a transient failure, logged
            return PokeReturnValue(False)
        self.log.info("%s", status["reason"])
        return PokeReturnValue(status["changed"], xcom_value=status if status["changed"] else None)

    def trigger(self, end_time: float) -> OdfSourceChangedTrigger:
        return OdfSourceChangedTrigger(
            dataset=self.dataset,
            odf_conn_id=self.odf_conn_id,
            poll_interval=self.poke_interval,
            end_time=end_time,
            source_dir=self.source_dir,
            request_timeout=self.request_timeout,
            trust=self.trust_arguments(),
        )

"""Airflow-side exceptions: how ODF failures map onto Airflow's retry semantics.

Bad input, a broken chain or a schema violation will not get better by retrying: those fail the task
at once (`AirflowFailException`), as does tampered or diverged data met while syncing. A source or a
remote repository that is unreachable, a concurrent writer, a crashed Spark job or an engine that
stopped under the request (`engine-stopped`: a Spark Connect server restarted mid-request) may: those
fail with `AirflowException`, and the task's retries apply.
"""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_odf.odf.checks.results import ChecksFailed
from airflow_odf.odf.engine_client.contract import ENGINE_STOPPED
from airflow_odf.odf.engine_client.runner import EngineRunError
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.ingest.fetch.types import FetchError
from airflow_odf.odf.operation import IngestError
from airflow_odf.odf.schema.evolution import SchemaChange, SchemaEvolutionError
from airflow_odf.odf.storage.http import HttpStoreError
from airflow_odf.odf.storage.s3 import S3StoreError
from airflow_odf.odf.storage.store import ConflictError


class OdfSchemaViolationException(AirflowFailException):
    """New data or a new query breaks the schema-evolution rules; `changes` is the structured diff."""

    def __init__(self, dataset: str, message: str, changes: list[SchemaChange]) -> None:
        super().__init__(message)
        self.dataset = dataset
        self.changes = changes


class OdfChecksFailedException(AirflowFailException):
    """Quality checks failed on the new slice (docs/checks.md): nothing was committed, no retry (the same
    data would fail again). `failure` holds every check's result and where the slice was kept."""

    def __init__(self, failure: ChecksFailed) -> None:
        super().__init__(str(failure))
        self.failure = failure


def airflow_error(dataset: str, error: OdfError) -> AirflowException:
    """The Airflow exception to raise for an ODF error of `dataset`."""
    if isinstance(error, SchemaEvolutionError):
        return OdfSchemaViolationException(dataset, str(error), error.changes)
    if isinstance(error, ChecksFailed):
        return OdfChecksFailedException(error)
    if isinstance(error, FetchError) and error.retryable:
        return AirflowException(str(error))
    if isinstance(error, ConflictError | EngineRunError | HttpStoreError | S3StoreError):
        return AirflowException(f"{dataset}: {error}")
    if isinstance(error, IngestError) and error.kind == ENGINE_STOPPED:  # its message names the dataset
        return AirflowException(str(error))
    return AirflowFailException(str(error))

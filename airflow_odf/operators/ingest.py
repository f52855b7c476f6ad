"""Root-dataset ingestion as Airflow tasks: a polling source (`OdfIngestOperator`) or pushed files
(`OdfPushIngestOperator`).

Both record the task's run in the AddData blocks they commit (`extra`), so that a retry whose first
try already committed adds nothing and reports that commit instead. An overlapping run that commits
first does not fail them: the core ingests again from its head (`chain.reconcile`) and the XCom says so
(`reconciled`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import Context

from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.polling import pull_polling
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.operation import IngestResult, committed_with_extra
from airflow_odf.odf.schema.policy import SCHEMA_POLICIES
from airflow_odf.operators.base import RUN_EXTRA_KEY, OdfBaseOperator, default_schema_policy
from airflow_odf.operators.checks import check_suite, declared_checks
from airflow_odf.source_trust import SourceTrustArguments


class _IngestOperator(OdfBaseOperator):
    """What both ingest operators share: the ingest options and the retry check."""

    def __init__(
        self,
        *,
        schema_policy: str | None = None,
        max_records_per_slice: int | None = None,
        quarantine_bad_records: bool = False,
        checks: Any = None,
        quarantine: bool = False,
        **kwargs: Any,
    ) -> None:
        schema_policy = schema_policy or default_schema_policy()
        if schema_policy not in SCHEMA_POLICIES:
            raise ValueError(f"schema_policy={schema_policy!r}: expected one of {', '.join(SCHEMA_POLICIES)}")
        super().__init__(**kwargs)
        self.schema_policy = schema_policy
        self.max_records_per_slice = max_records_per_slice
        self.quarantine_bad_records = quarantine_bad_records
        self.checks = declared_checks(checks)
        self.quarantine = quarantine

    def options(self, context: Context, work_dir: Path, **kwargs: Any) -> IngestOptions:
        return IngestOptions(
            work_dir=work_dir,
            max_records_per_slice=self.max_records_per_slice,
            bad_records="quarantine" if self.quarantine_bad_records else "fail",
            schema_policy=self.schema_policy,
            extra={RUN_EXTRA_KEY: self.run_marker(context)},
            checks=check_suite(self.checks),
            quarantine=self.quarantine,
            log=self.log.info,
            **kwargs,
        )

    def landed(self, context: Context, dataset: Any) -> IngestResult | None:
        """On a retry: what an earlier try of this task run already committed (found by the run marker)."""
        if context["ti"].try_number <= 1:
            return None
        landed = committed_with_extra(dataset, self.dataset, {RUN_EXTRA_KEY: self.run_marker(context)})
        if landed is not None:
            self.log.info(
                "%s: an earlier try of this task already committed %s (%d record(s))",
                self.dataset,
                landed.new_head,
                landed.records,
            )
        return landed

    def ingest(self, context: Context, fn: Any) -> dict[str, Any]:
        repo = self.repository()
        dataset = self.call(lambda: repo.dataset(self.dataset))
        landed = self.landed(context, dataset)
        if landed is not None:
            return self.report(context, landed.as_dict())
        result: IngestResult = self.call(lambda: fn(dataset, self.runner(), self.work_dir(repo)))
        return self.report(context, result.as_dict())


class OdfIngestOperator(SourceTrustArguments, _IngestOperator):
    """Ingests from the dataset's polling source (SetPollingSource) until it has nothing new.

    Both ingest operators take `checks` (a mapping in the checks file's form, or the path of a checks
    file) judged on each new slice before it is committed, and `quarantine` to keep a slice that failed
    them (docs/checks.md); a failure fails the task without retry and commits nothing.

    :param dataset: the root dataset's name in the repository of `odf_conn_id`.
    :param fetch_uncacheable: re-fetch sources that give no caching headers.
    :param set_watermark: advance the watermark to this RFC 3339 time (templated).
    :param files_per_batch: FilesGlob: files per AddData block.
    :param source_dir: the directory relative FilesGlob paths are resolved against (templated; default:
        the first of `local_source_dirs`, else the worker's working directory); also the one local
        sources may read unless `local_source_dirs` (or `[odf] local_source_dirs`) says otherwise.

    What the source's manifest may do: `allow_shell_steps`, `allow_container_sources`,
    `template_env_allow`, `local_source_dirs` (see `SourceTrustArguments`; default: `[odf]`, then the
    environment, then off / `ODF_*` / `source_dir`).
    """

    template_fields = ("dataset", "set_watermark", "source_dir")

    def __init__(
        self,
        *,
        fetch_uncacheable: bool = False,
        set_watermark: str | None = None,
        files_per_batch: int = 1,
        source_dir: str | None = None,
        **kwargs: Any,
    ) -> None:
        if files_per_batch < 1:
            raise ValueError(f"files_per_batch={files_per_batch}: must be at least 1")
        super().__init__(**kwargs)
        self.fetch_uncacheable = fetch_uncacheable
        self.set_watermark = set_watermark
        self.files_per_batch = files_per_batch
        self.source_dir = source_dir

    def execute(self, context: Context) -> dict[str, Any]:
        watermark = None if not self.set_watermark else self.call(lambda: Timestamp.parse(self.set_watermark))
        repo = self.repository()
        dataset = self.call(lambda: repo.dataset(self.dataset))
        # A retry after a landed commit pulls on from the source state that commit recorded (what it
        # ingested is not fetched again; an uncacheable source is not re-read) and reports both parts.
        landed = self.landed(context, dataset)
        options = self.options(
            context,
            self.work_dir(repo),
            fetch_uncacheable=self.fetch_uncacheable and landed is None,
            set_watermark=watermark,
            files_per_batch=self.files_per_batch,
            source_dir=Path(self.source_dir) if self.source_dir else None,
            trust=self.call(self.source_trust),
        )
        result = self.call(lambda: pull_polling(dataset, self.dataset, self.runner(), options))
        if landed is not None:
            result = _after(landed, result)
        return self.report(context, result.as_dict())


def _after(landed: IngestResult, rest: IngestResult) -> IngestResult:
    """One result for an earlier try's commit followed by what the retry added."""
    combined = IngestResult(
        landed.dataset,
        landed.dataset_id,
        landed.prev_head,
        rest.new_head if rest.new_blocks else landed.new_head,
        [*landed.new_blocks, *rest.new_blocks],
    )
    combined.records = landed.records + rest.records
    combined.quarantined = landed.quarantined + rest.quarantined
    combined.reconciliation = rest.reconciliation
    combined.checks = rest.checks  # the retry's own commits' (the earlier try's were not reported)
    return combined


class OdfPushIngestOperator(_IngestOperator):
    """Pushes files into one of the dataset's push sources (AddPushSource).

    :param files: paths of the files to ingest (templated).
    :param source_name: the push source (needed when the dataset has several).
    :param event_time: event time for records that carry none (RFC 3339, templated).
    """

    template_fields = ("dataset", "files", "event_time")

    def __init__(
        self,
        *,
        files: Sequence[str] | str,
        source_name: str | None = None,
        event_time: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.files = files
        self.source_name = source_name
        self.event_time = event_time

    def execute(self, context: Context) -> dict[str, Any]:
        files = [self.files] if isinstance(self.files, str) else list(self.files)
        if not files:
            raise ValueError(f"{self.dataset}: no files to ingest")
        event_time = None if not self.event_time else self.call(lambda: Timestamp.parse(self.event_time))
        return self.ingest(
            context,
            lambda dataset, runner, work_dir: push_ingest(
                dataset,
                self.dataset,
                runner,
                [Path(f).absolute() for f in files],
                self.options(context, work_dir),
                source_name=self.source_name,
                event_time=event_time,
            ),
        )

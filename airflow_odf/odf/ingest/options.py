"""How an ingest runs: the switches a task or `odf pull` / `odf ingest` gives it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_odf.odf.checks.spec import CheckSuite
from airflow_odf.odf.engine_client.contract import BAD_RECORDS_FAIL
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.trust import SourceTrust
from airflow_odf.odf.schema.policy import STRICT

_log = logging.getLogger("airflow_odf.odf.ingest")


@dataclass(frozen=True)
class IngestOptions:
    """How to ingest: scratch space, fetch switches, slicing and the broken-record policy.

    `extra` is recorded in every AddData's `extra` attributes (e.g. the Airflow run that committed it).
    `schema_policy` (`strict` or `additive`) decides whether new data may evolve the schema.
    `source_dir` is where relative FilesGlob paths are resolved (default: the first directory `trust`
    lets local sources read, else the working directory).
    `checks` are judged on each new slice before it is committed (docs/checks.md); `quarantine` keeps a
    rejected slice in the scratch space for `odf inspect rejected`.
    `trust` is what the source's manifest may do (shell steps, Container sources, which variables its
    templates read, which local directories it reads); by default what the environment allows.
    """

    work_dir: Path
    fetch_uncacheable: bool = False
    set_watermark: Timestamp | None = None
    files_per_batch: int = 1
    max_records_per_slice: int | None = None
    target_slice_bytes: int = 1024 * 1024 * 1024
    bad_records: str = BAD_RECORDS_FAIL
    trust: SourceTrust = field(default_factory=SourceTrust.resolve)
    max_iterations: int | None = None
    extra: dict[str, Any] | None = None
    schema_policy: str = STRICT
    source_dir: Path | None = None
    checks: CheckSuite | None = None
    quarantine: bool = False
    log: Callable[[str], None] = _log.info

"""`OdfCompactOperator`: hard compaction of a dataset, for maintenance DAGs (docs/compaction.md).

Compaction rewrites the whole chain (every block hash changes), so the derivatives that read the
dataset must then re-derive: give their OdfTransformOperator `recover_diverged=True`, or compact them
with `keep_metadata_only=True`. A compaction that loses the race against a concurrent ingest changes
nothing and fails (a retry starts over from the new head).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from airflow_odf.odf.compaction.execute import run_compaction
from airflow_odf.odf.compaction.plan import (
    DEFAULT_MAX_SLICE_RECORDS,
    DEFAULT_MAX_SLICE_SIZE,
    CompactionError,
    CompactionOptions,
    parse_byte_size,
)
from airflow_odf.operators.base import OdfBaseOperator


class OdfCompactOperator(OdfBaseOperator):
    """Merges the dataset's consecutive small slices into slices of at most `max_slice_size` bytes and
    `max_slice_records` records, rebuilding its chain (root datasets; see `keep_metadata_only`).

    :param dataset: the dataset's name.
    :param max_slice_size: the largest merged slice, in bytes or as text such as `300MB` (the default).
    :param max_slice_records: the most records in a merged slice (default 10,000).
    :param keep_metadata_only: drop all data blocks instead, keeping the metadata (roots and
        derivatives): the next ingest or transform starts over.
    :param verify: check that every merged record is unchanged before committing.

    XCom: `{dataset, dataset_id, prev_head, new_head, new_blocks, up_to_date, blocks_before,
    blocks_after, slices_before, slices_after, merged_groups, keep_metadata_only, verified}`.
    """

    template_fields = ("dataset",)

    def __init__(
        self,
        *,
        max_slice_size: int | str = DEFAULT_MAX_SLICE_SIZE,
        max_slice_records: int = DEFAULT_MAX_SLICE_RECORDS,
        keep_metadata_only: bool = False,
        verify: bool = False,
        **kwargs: Any,
    ) -> None:
        try:  # bad limits fail the DAG's parse, not a run
            options = CompactionOptions(
                max_slice_size=parse_byte_size(max_slice_size),
                max_slice_records=max_slice_records,
                keep_metadata_only=keep_metadata_only,
                verify=verify,
            )
            options.check()
        except CompactionError as e:
            raise ValueError(str(e)) from None
        super().__init__(**kwargs)
        self.max_slice_size = options.max_slice_size
        self.max_slice_records = max_slice_records
        self.keep_metadata_only = keep_metadata_only
        self.verify = verify

    def execute(self, context: Context) -> dict[str, Any]:
        repo = self.repository()
        options = CompactionOptions(
            max_slice_size=self.max_slice_size,
            max_slice_records=self.max_slice_records,
            keep_metadata_only=self.keep_metadata_only,
            verify=self.verify,
        )
        result = self.call(
            lambda: run_compaction(repo, self.dataset, self.runner(), options, log=self.log.info)
        )
        return self.report(context, result.as_dict())

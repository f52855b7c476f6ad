"""`OdfSqlOperator`: a Spark SQL query over the repository's datasets, for reporting tasks (docs/sql.md).

Read-only, like `odf sql`: each dataset is a table by its name (dotted names in backticks), optionally
as of a block of its chain (`as_of`, e.g. the head an upstream ODF task returned). With `output_path`
the whole result is written to that file; without, a small result is the task's XCom (rows as JSON
objects), and a result above `max_rows` fails the task with a message saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.odf.query.output import plain_rows
from airflow_odf.odf.query.run import (
    DEFAULT_MAX_ROWS,
    FILE_FORMATS,
    QueryOptions,
    file_format,
    query_rows,
    query_to_file,
)
from airflow_odf.operators.base import OdfBaseOperator

if TYPE_CHECKING:
    from airflow_odf.lineage import OdfLineage


class OdfSqlOperator(OdfBaseOperator):
    """Runs one query on Spark over the repository's datasets.

    :param sql: one query (SELECT, WITH, VALUES, TABLE; templated, or a `.sql` template file).
    :param output_path: write the result to this file (templated); None: return the rows as XCom.
    :param format: of the file: parquet, csv or json (JSON lines); default from the path's suffix.
    :param as_of: dataset name -> block hash: the table shows the data up to that block (templated:
        values may pull XCom, e.g. `{"trades": "{{ ti.xcom_pull(task_ids='ingest')['new_head'] }}"}`).
    :param max_rows: without `output_path`: fail above this many rows.
    :param overwrite: replace an existing `output_path` (a retry writes the same file again).
    """

    template_fields = ("sql", "output_path", "as_of")
    template_ext = (".sql",)
    operator_extra_links = ()

    def __init__(
        self,
        *,
        sql: str,
        output_path: str | None = None,
        format: str | None = None,
        as_of: dict[str, str] | str | None = None,
        max_rows: int = DEFAULT_MAX_ROWS,
        overwrite: bool = True,
        **kwargs: Any,
    ) -> None:
        if format is not None and format not in FILE_FORMATS:
            raise ValueError(f"format={format!r}: expected one of {', '.join(FILE_FORMATS)}")
        if max_rows < 1:
            raise ValueError(f"max_rows={max_rows}: must be at least 1")
        kwargs.setdefault("dataset", "sql")
        kwargs.setdefault("outlets", [])
        super().__init__(**kwargs)
        self.sql = sql
        self.output_path = output_path
        self.format = format
        self.as_of = as_of or {}
        self.max_rows = max_rows
        self.overwrite = overwrite

    def execute(self, context: Context) -> Any:
        if not isinstance(self.as_of, dict):
            raise AirflowFailException(
                f"as_of rendered to {self.as_of!r}: expected a mapping of dataset name -> block hash "
                "(set render_template_as_native_obj=True on the DAG when it is one template)"
            )
        repo = self.repository()
        options = QueryOptions(work_dir=self.work_dir(repo), as_of={k: str(v) for k, v in self.as_of.items()})
        if self.as_of:
            self.log.info("tables as of %s", options.as_of)
        if self.output_path:
            path = Path(self.output_path)
            fmt = file_format(path, self.format)
            written = self.call(
                lambda: query_to_file(repo, self.sql, self.runner(), options, path, fmt, force=self.overwrite)
            )
            self.log.info("wrote the result to %s (%s)", written, fmt)
            return {"path": str(written), "format": fmt}
        table = self.call(lambda: query_rows(repo, self.sql, self.runner(), options, self.max_rows))
        self.log.info("%d row(s): %s", table.num_rows, ", ".join(table.column_names))
        return plain_rows(table)

    def lineage(self) -> OdfLineage:
        """It writes no dataset: nothing to report."""
        from airflow_odf.lineage import OdfLineage

        return OdfLineage()

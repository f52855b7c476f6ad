"""`OdfDatasetLink`: an extra link from an ODF task to the dataset it wrote, in any web UI of the repository.

Where datasets can be browsed is a deployment's choice, so the link is `[odf] dataset_url_template`
formatted with `{dataset_name}`, `{dataset_id}` (the DID) and `{head}` (the head after the task), e.g.
`http://127.0.0.1:8080/{dataset_name}/blocks/{head}` for a repository served by `odf serve`; empty (the
default) means no link. Airflow 3 computes the link on the worker when the task ends and stores it in
XCom (the API server only reads it back), so the values come from the task's own XCom `return_value`.
"""

from __future__ import annotations

from string import Formatter
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink
from airflow.sdk.configuration import conf
from airflow.sdk.execution_time.xcom import XCom  # the configured XCom backend (what common.compat resolves)

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

FIELDS = ("dataset_name", "dataset_id", "head")


def dataset_url(template: str, result: Any) -> str:
    """`template` filled in from a task's XCom result; "" when the result lacks a value it names (a failed
    task, a task of several datasets) or no template is configured."""
    if not template or not isinstance(result, dict):
        return ""
    values = {
        "dataset_name": result.get("dataset"),
        "dataset_id": result.get("dataset_id"),
        "head": result.get("new_head") or result.get("head"),
    }
    used = {name for _, name, _, _ in Formatter().parse(template) if name is not None}
    unknown = used - set(FIELDS)
    if unknown:
        raise ValueError(f"[odf] dataset_url_template: unknown field(s) {sorted(unknown)}; use {FIELDS}")
    if any(not values[name] for name in used):
        return ""
    return template.format_map({name: quote(str(value), safe=":") for name, value in values.items()})


class OdfDatasetLink(BaseOperatorLink):
    """The dataset an ODF task wrote (button "ODF dataset"), per `[odf] dataset_url_template`."""

    name = "ODF dataset"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        template = conf.get("odf", "dataset_url_template", fallback="")
        if not template:
            return ""
        return dataset_url(template, XCom.get_value(ti_key=ti_key, key="return_value"))

"""`OdfDatasetLink`: an extra link from an ODF task to the dataset it wrote.

By default it opens the provider's ODF view (docs/airflow-ui.md) on the task's dataset as of the head the
task committed: `<[api] base_url>/odf/connections/<odf_conn_id>/datasets/<name>?head=<head>`. A
deployment that browses datasets elsewhere sets `[odf] dataset_url_template`, formatted with
`{dataset_name}`, `{dataset_id}` (the DID) and `{head}` (the head after the task), e.g.
`http://127.0.0.1:8080/{dataset_name}/blocks/{head}` for a repository served by `odf serve`; with
`[odf] dataset_view = False` and no template there is no link. Airflow 3 computes the link on the worker
when the task ends and stores it in XCom (the API server only reads it back), so the values come from the
task's own XCom `return_value`.
"""

from __future__ import annotations

from string import Formatter
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink
from airflow.sdk.configuration import conf
from airflow.sdk.execution_time.xcom import XCom  # the configured XCom backend (what common.compat resolves)

from airflow_odf.ui.plugin import MOUNT, view_enabled

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

FIELDS = ("dataset_name", "dataset_id", "head")


def _values(result: Any) -> dict[str, Any]:
    return {
        "dataset_name": result.get("dataset"),
        "dataset_id": result.get("dataset_id"),
        "head": result.get("new_head") or result.get("head"),
    }


def dataset_url(template: str, result: Any) -> str:
    """`template` filled in from a task's XCom result; "" when the result lacks a value it names (a failed
    task, a task of several datasets) or no template is configured."""
    if not template or not isinstance(result, dict):
        return ""
    values = _values(result)
    used = {name for _, name, _, _ in Formatter().parse(template) if name is not None}
    unknown = used - set(FIELDS)
    if unknown:
        raise ValueError(f"[odf] dataset_url_template: unknown field(s) {sorted(unknown)}; use {FIELDS}")
    if any(not values[name] for name in used):
        return ""
    return template.format_map({name: quote(str(value), safe=":") for name, value in values.items()})


def view_url(base_url: str, conn_id: str, result: Any) -> str:
    """The ODF view's page of the task's dataset as of its head (root-relative without a `base_url`);
    "" when the result lacks the dataset or the head."""
    if not conn_id or not isinstance(result, dict):
        return ""
    values = _values(result)
    if not values["dataset_name"] or not values["head"]:
        return ""
    name, head = (quote(str(values[k]), safe="") for k in ("dataset_name", "head"))
    path = f"{MOUNT}/connections/{quote(conn_id, safe='')}/datasets/{name}?head={head}"
    return base_url.rstrip("/") + path


class OdfDatasetLink(BaseOperatorLink):
    """The dataset an ODF task wrote (button "ODF dataset"): in the ODF view, or per
    `[odf] dataset_url_template`."""

    name = "ODF dataset"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        template = conf.get("odf", "dataset_url_template", fallback="")
        if not template and not view_enabled():
            return ""
        result = XCom.get_value(ti_key=ti_key, key="return_value")
        if template:
            return dataset_url(template, result)
        base_url = conf.get("api", "base_url", fallback="") or ""
        return view_url(base_url, getattr(operator, "odf_conn_id", ""), result)

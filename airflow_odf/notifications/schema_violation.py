"""`OdfSchemaViolationNotifier`: a failed schema-evolution check becomes an alert, sent where the user wants.

Attach it as `on_failure_callback` (to one task, or to all through `default_args`). When the task failed
with `OdfSchemaViolationException` — new data or a new query that breaks the dataset's schema; the task
failed without retry and nothing was committed — it builds a plain-text alert (dataset, DAG / task / run,
one line per column change) and delivers it through:

- any Airflow notifier (`SmtpNotifier`, `SlackNotifier`, ...): it is called with the task context plus
  `odf_alert` (the text) and `odf_schema_violation` (the same as data), so its templated fields can say
  `{{ odf_alert }}`;
- or a plain callable `(message, context) -> None` (a webhook post, a file, a ticket system).

It alerts the same way when quality checks failed (`OdfChecksFailedException`, docs/checks.md): the
text names each failed check with a sample of its failing rows, and `odf_checks` holds the results.

Other failures are ignored unless `forward_other_failures=True`, which sends a short generic alert.

Airflow runs failure callbacks inside the task log's collapsed "Post Execute" group, so the alert's
text is not logged here: the failing operator logs it at ERROR in the main section
(`violation_summary`), right before "Task failed with exception".
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from airflow.sdk import BaseNotifier

from airflow_odf.exceptions import OdfChecksFailedException, OdfSchemaViolationException

AlertCallable = Callable[[str, Any], Any]
ALERT_KEY = "odf_alert"
VIOLATION_KEY = "odf_schema_violation"
CHECKS_KEY = "odf_checks"


def _where(context: Mapping[str, Any]) -> str:
    ti = context.get("ti") or context.get("task_instance")
    dag_id = getattr(ti, "dag_id", None) or getattr(context.get("dag"), "dag_id", "?")
    task_id = getattr(ti, "task_id", None) or getattr(context.get("task"), "task_id", "?")
    run_id = getattr(ti, "run_id", None) or context.get("run_id", "?")
    where = f"DAG {dag_id}, task {task_id}, run {run_id}"
    try_number = getattr(ti, "try_number", None)
    return f"{where}, try {try_number}" if try_number else where


def _name(target: Any) -> str:
    return getattr(target, "__qualname__", None) or type(target).__name__


def violation_data(error: OdfSchemaViolationException) -> dict[str, Any]:
    """The violation as JSON-ready data: dataset, message, changes (column, old, new, rule, allowed)."""
    return {
        "dataset": error.dataset,
        "message": str(error),
        "changes": [
            {"column": c.column, "old": c.old, "new": c.new, "rule": c.rule, "allowed": c.allowed}
            for c in error.changes
        ],
    }


def violation_summary(error: OdfSchemaViolationException) -> str:
    """What broke and every column change with its verdict: the alert without where it ran. The failing
    task logs it at ERROR in its main log section (`OdfBaseOperator.call`), where the failure is."""
    return "\n".join(_alert_lines(error, where=None))


def schema_violation_alert(error: OdfSchemaViolationException, context: Mapping[str, Any]) -> str:
    """The alert text: what broke, where it ran, and every column change with its verdict."""
    return "\n".join(_alert_lines(error, where=_where(context)))


def _alert_lines(error: OdfSchemaViolationException, where: str | None) -> list[str]:
    denied = [c for c in error.changes if not c.allowed]
    lines = [
        f"ODF schema violation in dataset {error.dataset}",
        *([where] if where else []),
        f"{len(denied)} of {len(error.changes)} change(s) denied by the schema-evolution rules; "
        "nothing was committed (the dataset's head is unchanged) and the task will not retry.",
        "Changes (column: old -> new, rule, verdict):",
    ]
    lines += [
        f"  - {c.column}: {c.old or '-'} -> {c.new or '-'}, {c.rule}, {'allowed' if c.allowed else 'denied'}"
        for c in error.changes
    ] or ["  (none: the new schema is identical to the current one)"]
    lines.append(f"Error: {error}")
    return lines


def checks_alert(error: OdfChecksFailedException, context: Mapping[str, Any]) -> str:
    """The alert text of failed checks: where it ran, one line per failed check, their failing rows."""
    failure = error.failure
    lines = [
        f"ODF quality checks failed in dataset {failure.dataset}",
        _where(context),
        *failure.lines(),
        "The task will not retry; the dataset's head is unchanged.",
        *failure.sample_lines(),
    ]
    return "\n".join(lines)


def failure_alert(error: BaseException | str | None, context: Mapping[str, Any]) -> str:
    """The short alert sent for other failures when they are forwarded."""
    return f"Task failed: {_where(context)}\nError: {error if error is not None else 'unknown'}"


class OdfSchemaViolationNotifier(BaseNotifier):
    """Sends an alert when a task fails on a schema-evolution violation or on failed quality checks.

    :param target: an Airflow notifier (called with `odf_alert` / `odf_schema_violation` added to the
        context, for its templated fields) or a callable `(message, context) -> None`.
    :param forward_other_failures: also alert (with a short generic message) when the task failed for
        another reason.
    """

    def __init__(self, target: BaseNotifier | AlertCallable, *, forward_other_failures: bool = False) -> None:
        if not isinstance(target, BaseNotifier) and not callable(target):
            raise TypeError(f"target: expected a notifier or a callable, got {type(target).__name__}")
        super().__init__()
        self.target = target
        self.forward_other_failures = forward_other_failures

    def alert(self, context: Mapping[str, Any]) -> tuple[str, dict[str, Any] | None] | None:
        """(message, data) for the failure in `context`, or None when there is nothing to send; the data
        of a violation, or of failed checks (with a `checks` key)."""
        error = context.get("exception")
        if isinstance(error, OdfSchemaViolationException):
            return schema_violation_alert(error, context), violation_data(error)
        if isinstance(error, OdfChecksFailedException):
            return checks_alert(error, context), error.failure.as_dict()
        if self.forward_other_failures:
            return failure_alert(error, context), None
        return None

    def _target_context(self, context: Mapping[str, Any], message: str, data: Any) -> dict[str, Any]:
        checks = isinstance(data, dict) and "checks" in data
        return {
            **context,
            ALERT_KEY: message,
            VIOLATION_KEY: None if checks else data,
            CHECKS_KEY: data if checks else None,
        }

    def notify(self, context: Any) -> None:
        found = self.alert(context)
        if found is None:
            return
        message, data = found
        # the alert itself is in the task's main log section, at ERROR (logged where the task failed)
        self.log.info("sending the alert (%s) to %s", message.splitlines()[0], _name(self.target))
        if isinstance(self.target, BaseNotifier):
            # a copy: rendering templated fields is in place and would freeze the first alert's text
            copy.copy(self.target)(self._target_context(context, message, data))
        else:
            self.target(message, context)

    async def async_notify(self, context: Any) -> None:
        found = self.alert(context)
        if found is None:
            return
        message, data = found
        if isinstance(self.target, BaseNotifier):
            target = copy.copy(self.target)
            target.context = self._target_context(context, message, data)
            try:
                await target
            except NotImplementedError:  # a sync-only notifier
                await asyncio.to_thread(copy.copy(self.target), target.context)
        elif inspect.iscoroutinefunction(self.target):
            await self.target(message, context)
        else:
            await asyncio.to_thread(self.target, message, context)

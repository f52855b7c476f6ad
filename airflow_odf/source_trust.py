"""What a source manifest may do on a worker or triggerer: the task's arguments, else the `[odf]`
options, else the core's environment variables and safe defaults (`airflow_odf.odf.ingest.trust`).

Resolved where the task or trigger runs, so that the configuration and environment that count are
those of the process that fetches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk.configuration import conf

from airflow_odf.odf.ingest.trust import SourceTrust, parse_flag

#: The task arguments (and `[odf]` options of the same names) that make a `SourceTrust`.
TRUST_ARGUMENTS = ("allow_shell_steps", "allow_container_sources", "template_env_allow", "local_source_dirs")


def source_trust(
    *,
    allow_shell_steps: bool | None = None,
    allow_container_sources: bool | None = None,
    template_env_allow: Sequence[str] | str | None = None,
    local_source_dirs: Sequence[str] | str | None = None,
) -> SourceTrust:
    """The trust of a task whose arguments are these (None: not given)."""
    return SourceTrust.resolve(
        allow_shell_steps=_flag(allow_shell_steps, "allow_shell_steps"),
        allow_container_sources=_flag(allow_container_sources, "allow_container_sources"),
        template_env_allow=_option(template_env_allow, "template_env_allow"),
        local_source_dirs=_option(local_source_dirs, "local_source_dirs"),
    )


class SourceTrustArguments:
    """Mixin of the tasks that run a source: the four trust arguments (None: use `[odf]`, then the
    environment), documented in docs/sources.md ("What a manifest may do").

    :param allow_shell_steps: run Pipe prepare steps.
    :param allow_container_sources: run Container fetch steps.
    :param template_env_allow: variables `${{ env.NAME }}` may read: names, `PREFIX*`, or `*`.
    :param local_source_dirs: directories `file://` URLs and FilesGlob paths may read.
    """

    def __init__(
        self,
        *,
        allow_shell_steps: bool | None = None,
        allow_container_sources: bool | None = None,
        template_env_allow: Sequence[str] | str | None = None,
        local_source_dirs: Sequence[str] | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.allow_shell_steps = allow_shell_steps
        self.allow_container_sources = allow_container_sources
        self.template_env_allow = template_env_allow
        self.local_source_dirs = local_source_dirs

    def trust_arguments(self) -> dict[str, Any]:
        """The trust arguments given (JSON values, as a trigger stores them)."""
        return {name: getattr(self, name) for name in TRUST_ARGUMENTS if getattr(self, name) is not None}

    def source_trust(self) -> SourceTrust:
        """The trust where the task runs: its arguments, else `[odf]`, else the environment."""
        return source_trust(**self.trust_arguments())


def _flag(value: bool | None, option: str) -> bool | None:
    if value is not None:
        return value
    raw = conf.get("odf", option, fallback=None)
    return None if raw is None else parse_flag(raw, f"[odf] {option}")


def _option(value: Sequence[str] | str | None, option: str) -> Sequence[str] | str | None:
    return value if value is not None else conf.get("odf", option, fallback=None)

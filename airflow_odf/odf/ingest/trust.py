"""What a deployment trusts a source manifest to do on the worker that runs it.

A manifest is data, often written by someone other than whoever runs the worker. Five things it may
ask for reach beyond fetching a public URL, so each is off or confined unless the deployment allows it:
Pipe prepare steps (any program on the worker), Container fetch steps (any image, run by the worker's
docker/podman), `${{ env.NAME }}` templates (the worker's environment, secrets included, sent to any
URL), local files (`file://` URLs and FilesGlob paths) and S3 objects (`s3://` FilesGlob paths, read
with the worker's AWS credentials).

Each setting comes from, highest first: the task's argument or CLI flag, the Airflow `[odf]` option
(the Airflow layer passes it on as an explicit value: the core never reads Airflow's configuration),
the environment variable named below, then the safe default.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from airflow_odf.odf.errors import OdfError

SHELL_STEPS_ENV = "ODF_ALLOW_SHELL_STEPS"
CONTAINER_SOURCES_ENV = "ODF_ALLOW_CONTAINER_SOURCES"
TEMPLATE_ENV_ALLOW_ENV = "ODF_TEMPLATE_ENV_ALLOW"
LOCAL_SOURCE_DIRS_ENV = "ODF_LOCAL_SOURCE_DIRS"
S3_SOURCE_PREFIXES_ENV = "ODF_S3_SOURCE_PREFIXES"
DEFAULT_TEMPLATE_ENV_ALLOW = ("ODF_*",)

#: How to change each setting, for the message that refuses what it does not allow.
SHELL_STEPS_HINT = (
    f"{SHELL_STEPS_ENV}=1, `[odf] allow_shell_steps = True`, the task's allow_shell_steps=True "
    "or `odf --allow-shell-steps`"
)
CONTAINER_SOURCES_HINT = (
    f"{CONTAINER_SOURCES_ENV}=1, `[odf] allow_container_sources = True`, the task's "
    "allow_container_sources=True or `odf --allow-container-sources`"
)
TEMPLATE_ENV_HINT = (
    f"{TEMPLATE_ENV_ALLOW_ENV}, `[odf] template_env_allow`, the task's template_env_allow "
    "or `odf --allow-env NAME`"
)
LOCAL_SOURCE_DIRS_HINT = (
    f"{LOCAL_SOURCE_DIRS_ENV}, `[odf] local_source_dirs`, the task's local_source_dirs "
    "or `odf --source-root DIR`"
)
S3_SOURCE_PREFIXES_HINT = f"{S3_SOURCE_PREFIXES_ENV} (`s3://bucket/prefix` entries, comma or space separated)"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")
_ENV_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?|\*")
_PATTERN_SEPARATORS = re.compile(r"[\s,]+")


class SourceTrustError(OdfError):
    """A trust setting has a value that cannot be understood (e.g. `ODF_ALLOW_SHELL_STEPS=maybe`)."""


@dataclass(frozen=True)
class SourceTrust:
    """The resolved settings. `template_env_allow`: names, `PREFIX*` patterns, or `*` for everything.
    `local_source_dirs`: None means the directory relative paths resolve against (the task's
    `source_dir`, else the working directory); relative paths resolve against the first of them when the
    task has no `source_dir` (`source_directory`). `s3_source_prefixes`: the `s3://bucket[/prefix]` that
    FilesGlob may list and read with the worker's credentials (none by default)."""

    allow_shell_steps: bool = False
    allow_container_sources: bool = False
    template_env_allow: tuple[str, ...] = DEFAULT_TEMPLATE_ENV_ALLOW
    local_source_dirs: tuple[Path, ...] | None = None
    s3_source_prefixes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for pattern in self.template_env_allow:
            if not _ENV_PATTERN.fullmatch(pattern):
                raise SourceTrustError(
                    f"template_env_allow: {pattern!r} is not a variable name, a NAME* prefix or *"
                )

    @classmethod
    def resolve(
        cls,
        *,
        allow_shell_steps: bool | None = None,
        allow_container_sources: bool | None = None,
        template_env_allow: Iterable[str] | str | None = None,
        local_source_dirs: Iterable[str | Path] | str | None = None,
        s3_source_prefixes: Iterable[str] | str | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> SourceTrust:
        """The settings from explicit values where given (not None), else from `environ`, else the
        defaults. A string list is comma/space separated (patterns) or os.pathsep separated (dirs)."""
        if allow_shell_steps is None:
            allow_shell_steps = _flag(environ, SHELL_STEPS_ENV)
        if allow_container_sources is None:
            allow_container_sources = _flag(environ, CONTAINER_SOURCES_ENV)
        if template_env_allow is None:
            template_env_allow = environ.get(TEMPLATE_ENV_ALLOW_ENV) or DEFAULT_TEMPLATE_ENV_ALLOW
        if local_source_dirs is None:
            local_source_dirs = environ.get(LOCAL_SOURCE_DIRS_ENV) or None
        if s3_source_prefixes is None:
            s3_source_prefixes = environ.get(S3_SOURCE_PREFIXES_ENV) or ()
        return cls(
            allow_shell_steps=allow_shell_steps,
            allow_container_sources=allow_container_sources,
            template_env_allow=env_patterns(template_env_allow),
            local_source_dirs=None if local_source_dirs is None else directories(local_source_dirs),
            s3_source_prefixes=env_patterns(s3_source_prefixes),
        )

    def env_allowed(self, name: str) -> bool:
        """May a template read the worker's variable `name`?"""
        return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in self.template_env_allow)

    def source_directory(self, source_dir: Path | None) -> Path:
        """Where relative FilesGlob paths resolve: the task's `source_dir`, else the first directory local
        sources may read (`odf --source-root DIR`, ODF_LOCAL_SOURCE_DIRS, `[odf] local_source_dirs`), else
        the working directory — never the working directory while it may not be read anyway."""
        if source_dir is not None:
            return source_dir
        return self.local_source_dirs[0] if self.local_source_dirs else Path.cwd()

    def source_roots(self, source_dir: Path | None) -> tuple[Path, ...]:
        """The real (symlink-free) directories local sources must lie in."""
        roots = self.local_source_dirs if self.local_source_dirs is not None else (source_dir or Path.cwd(),)
        return tuple(Path(os.path.realpath(root)) for root in roots)


def env_patterns(value: Iterable[str] | str) -> tuple[str, ...]:
    """`"ODF_*, RATES_TOKEN"` or `["ODF_*", "RATES_TOKEN"]` as a tuple of patterns."""
    items = [value] if isinstance(value, str) else list(value)
    return tuple(p for item in items for p in _PATTERN_SEPARATORS.split(item) if p)


def directories(value: Iterable[str | Path] | str) -> tuple[Path, ...]:
    """`"/a:/b"` (os.pathsep separated) or a list of directories, made absolute."""
    items = value.split(os.pathsep) if isinstance(value, str) else [str(v) for v in value]
    return tuple(Path(os.path.abspath(item)) for item in items if item)


def parse_flag(raw: str, setting: str) -> bool:
    """`1/true/yes/on` or `0/false/no/off/` (any case); anything else is an error naming `setting`."""
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SourceTrustError(f"{setting}={raw!r}: expected 1/true/yes/on or 0/false/no/off")


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return parse_flag(environ.get(name, ""), name)

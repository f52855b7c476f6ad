"""`${{ env.NAME }}` templates in source manifests, as the reference resolves them (`template.rs`).

Secrets (tokens, passwords) stay out of the metadata chain: a manifest names the variable, the
coordinator fills it in at fetch time. `${{ env.NAME || 'default' }}` gives a fallback.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from airflow_odf.odf.errors import OdfError

_EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}")
_ENV_REFERENCE = re.compile(r"\s*env\.([A-Za-z_][A-Za-z0-9_]*)\s*(?:\|\|\s*'([^']*)'\s*)?")


class TemplateError(OdfError):
    """A template names an unset variable or is not of the form `${{ env.NAME || 'default' }}`."""


def render(text: str, lookup: Callable[[str], str | None], where: str) -> str:
    """Replace every `${{ env.NAME }}` in `text` by `lookup(NAME)` (None: unset); `where` names the
    manifest field in errors. `lookup` may raise to refuse a name."""

    def substitute(match: re.Match[str]) -> str:
        reference = _ENV_REFERENCE.fullmatch(match.group(1))
        if reference is None:
            raise TemplateError(
                f"{where}: unsupported template {match.group(0)!r}; "
                "expected ${{ env.NAME }} or ${{ env.NAME || 'default' }}"
            )
        name, default = reference.groups()
        value = lookup(name)
        if value is not None:
            return value
        if default is not None:
            return default
        raise TemplateError(
            f"{where}: environment variable {name} is not set (used as ${{{{ env.{name} }}}}); "
            f"set it or give a default: ${{{{ env.{name} || 'value' }}}}"
        )

    return _EXPRESSION.sub(substitute, text)

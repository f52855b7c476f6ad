"""Errors of the ODF core. Each names where the problem is and what was expected, never a bare traceback."""

from __future__ import annotations

from dataclasses import dataclass


def quoted(text: str, limit: int = 60) -> str:
    """`repr` of untrusted text, cut after `limit` characters so that a message stays one short line."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}… ({len(text)} characters)"


class OdfError(Exception):
    """Base of every error the ODF core raises on bad input or a broken invariant."""


class OdfFormatError(OdfError, ValueError):
    """A value does not have the expected textual or binary form (multihash, DID, timestamp, ...)."""


# every character `str.splitlines` breaks at, as its escape sequence
_ESCAPED_LINE_BREAKS = str.maketrans({c: repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"})


@dataclass(frozen=True)
class Problem:
    """One problem in an input: `path` to the field (e.g. `content.metadata[1].merge.primaryKey`)."""

    path: str
    message: str

    def __str__(self) -> str:
        """One line: line breaks in the path or message (e.g. from a mapping key) are escaped."""
        text = f"{self.path}: {self.message}" if self.path else self.message
        return text.translate(_ESCAPED_LINE_BREAKS)


class ManifestError(OdfError):
    """A YAML manifest is invalid; carries every problem found, each with its field path."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [f"{self.source}: {p}" for p in self.problems]


class BlockDecodeError(OdfError):
    """A block file is not a valid ODF metadata block (corrupt, truncated or of another kind)."""


class BlockEncodeError(OdfError):
    """A block cannot be written, e.g. it would be larger than the maximum block size."""


class ChainRuleError(OdfError):
    """A block breaks a metadata chain rule; `rule` is a stable short name of the rule."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{message} [rule: {rule}]")
        self.rule = rule

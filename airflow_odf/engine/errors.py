"""The engine's one error type: bad input named precisely, returned to the core in the response."""

from __future__ import annotations


class EngineInputError(Exception):
    """Input the engine cannot process. `kind` is stable for callers (`bad-input`, `bad-schema`, `sql`,
    `missing-column`, `unsupported`, ...); `message` names the file, the column and what was expected."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

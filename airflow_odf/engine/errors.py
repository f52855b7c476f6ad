"""The engine's one error type: bad input named precisely, returned to the core in the response."""

from __future__ import annotations


class EngineInputError(Exception):
    """Input the engine cannot process. `kind` is stable for callers (`bad-input`, `bad-schema`, `sql`,
    `missing-column`, `unsupported`, ...); `message` names the file, the column and what was expected."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class ConnectUnreachableError(Exception):
    """No Spark Connect server answers at `url` (or it is no Spark Connect URL): the request was not
    started. The message names the URL (without its token) and how to start a server."""

    def __init__(self, url: str, problem: str) -> None:
        super().__init__(
            f"Spark Connect server {url}: {problem}; start one with `odf engine serve` "
            "(it prints its sc:// URL), or point the connection at a running server"
        )
        self.url = url

"""The engine's one error type: bad input named precisely, returned to the core in the response."""

from __future__ import annotations


class EngineInputError(Exception):
    """Input the engine cannot process. `kind` is stable for callers (`bad-input`, `bad-schema`, `sql`,
    `missing-column`, `unsupported`, ...); `message` names the file, the column and what was expected."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


ENGINE_STOPPED = "engine-stopped"
"""The response's error kind of a request whose engine stopped under it (docs/engine-contract.md)."""


class EngineStoppedError(Exception):
    """The engine went away during the request (its SparkContext stopped, its server restarted or
    unreachable): no fault of the input, and worth trying again once the engine is back. `reason` says
    what was seen, in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the engine stopped during the request ({reason})")
        self.reason = reason


_START_A_SERVER = (
    "start one with `odf engine serve` (it prints its sc:// URL), or point the connection at a running server"
)

RUN_AGAIN = (
    "nothing was committed: run it again once the server is back (Airflow retries the task; "
    "`odf engine serve` starts a server)"
)


class ConnectUnreachableError(Exception):
    """No Spark Connect server answers at `url` (or it is no Spark Connect URL): the request was not
    started. The message names the URL (without its token) and how to start a server."""

    def __init__(self, url: str, problem: str, remedy: str = _START_A_SERVER) -> None:
        super().__init__(f"Spark Connect server {url}: {problem}; {remedy}")
        self.url = url


class ConnectTokenRefusedError(ConnectUnreachableError):
    """The server at `url` refused the client's token (none, or not the server's): the request was not
    started, and callers report it as an unreachable server, in one line. The message shows no token."""

    def __init__(self, url: str, token_sent: bool) -> None:
        problem = "refused the token the client sent" if token_sent else "refused a client without a token"
        super().__init__(
            url,
            problem,
            "give the server's token (`odf engine serve --token`, $ODF_ENGINE_TOKEN) as the password of "
            "the spark_connect connection or as the URL parameter ;token=TOKEN",
        )

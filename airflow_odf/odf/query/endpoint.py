"""kamu's query API for `odf serve --query`: `GET /query`, `POST /query` and `POST /verify`, answered
in kamu's shapes (docs/query-commitments.md), apart from any HTTP server.

The server hands over the method, the path, the query string and the body (which it has bounded by
`max_body_bytes`); the answer is an HTTP status and a JSON value. Errors are kamu's `ApiError` shape,
`{"message": …}`: 400 for a malformed request or a query the SQL policy or Spark refuses, 404 for a
pinned dataset or block that is not here, 405 for another method, 503 when the node stays busy, 500 for
anything else (its detail only in the server's log). Queries run one at a time by default (`concurrency`):
a local Spark session is shared by all of them, and each holds its result in memory.
"""

from __future__ import annotations

import json
import sys
import threading
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.query.commitment import (
    InputBlockNotFound,
    InputDatasetNotFound,
    answer_query,
    node_did,
    verify_commitment,
)
from airflow_odf.odf.query.data_json import DataEncodingError
from airflow_odf.odf.query.request import QueryInput, RequestError
from airflow_odf.odf.query.tables import QueryError
from airflow_odf.odf.repo.repository import Repository

MAX_BODY_BYTES = 8 * 1024 * 1024  # a /verify body may carry an output of MAX_LIMIT rows
DEFAULT_BUSY_WAIT = 60.0  # seconds a request waits for a running query before 503
_MAX_PARAMETERS = 16


class QueryEndpoint:
    """Answers kamu's query API over one repository with one engine, signing with the node's key."""

    max_body_bytes = MAX_BODY_BYTES

    def __init__(
        self,
        repo: Repository,
        runner: EngineRunner,
        *,
        work_dir: Path,
        node_key: bytes,
        concurrency: int = 1,
        busy_wait: float = DEFAULT_BUSY_WAIT,
    ) -> None:
        if concurrency < 1 or busy_wait < 0:
            raise ValueError(f"concurrency {concurrency} and busy wait {busy_wait} must be positive")
        self.repo = repo
        self.runner = runner
        self.work_dir = work_dir
        self._node_key = node_key
        self._slots = threading.BoundedSemaphore(concurrency)
        self._busy_wait = busy_wait

    def __repr__(self) -> str:  # never shows the key
        return f"QueryEndpoint({self.repo.location}, {self.did})"

    @property
    def did(self) -> str:
        """The node's identity (`did:key:z6Mk…`): the `verificationMethod` of its proofs."""
        return node_did(self._node_key)

    @staticmethod
    def handles(path: str) -> bool:
        return path in ("/query", "/verify")

    def answer(self, method: str, path: str, query: str, body: bytes | None) -> tuple[int, Any]:
        """The HTTP status and JSON answer of one request to `/query` or `/verify`."""
        allowed = ("GET", "POST") if path == "/query" else ("POST",)
        if method not in allowed:
            return HTTPStatus.METHOD_NOT_ALLOWED, {"message": f"{path} answers {' and '.join(allowed)}"}
        try:
            document = _params(query) if method == "GET" else _json(body)
            if not self._slots.acquire(timeout=self._busy_wait):
                return HTTPStatus.SERVICE_UNAVAILABLE, {"message": "the node is busy with other queries"}
            try:
                return self._run(path, method, document)
            finally:
                self._slots.release()
        except (RequestError, QueryError, DataEncodingError) as e:
            return HTTPStatus.BAD_REQUEST, {"message": str(e)}
        except (InputDatasetNotFound, InputBlockNotFound) as e:
            return HTTPStatus.NOT_FOUND, {"message": str(e)}
        except OdfError as e:
            print(f"odf serve: {method} {path}: {e}", file=sys.stderr)
            return HTTPStatus.INTERNAL_SERVER_ERROR, {"message": "Internal error"}

    def _run(self, path: str, method: str, document: Any) -> tuple[int, Any]:
        if path == "/verify":
            verdict = verify_commitment(self.repo, self.runner, document, work_dir=self.work_dir)
            return (HTTPStatus.OK if verdict["ok"] else HTTPStatus.BAD_REQUEST), verdict
        request = QueryInput.from_params(document) if method == "GET" else QueryInput.from_json(document)
        answer = answer_query(
            self.repo, self.runner, request, work_dir=self.work_dir, node_key=self._node_key
        )
        return HTTPStatus.OK, answer


def _params(query: str) -> dict[str, str]:
    try:
        parsed = parse_qs(query, keep_blank_values=True, strict_parsing=False, max_num_fields=_MAX_PARAMETERS)
    except ValueError as e:
        raise RequestError(f"the parameters: {e}") from None
    twice = sorted(name for name, values in parsed.items() if len(values) > 1)
    if twice:
        raise RequestError(f"parameter {twice[0]!r} is given more than once")
    return {name: values[0] for name, values in parsed.items()}


def _json(body: bytes | None) -> Any:
    try:
        return json.loads(body or b"")
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise RequestError(f"the body is not JSON: {e}") from None

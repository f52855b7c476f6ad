"""The ODF view's FastAPI app, which the plugin mounts on Airflow's API server (under /odf).

Read-only, and behind Airflow's auth: Airflow does not protect a plugin's app by itself, so every route
asks the configured auth manager. A page reads a repository with its connection's credentials, so it
needs the right to read that connection (`requires_access_connection("GET")`, the same check as the
connections API); the index lists only the `odf_repo` connections the user may read. Errors are pages
with one clear message (status 404 for an unknown connection, dataset or block; 500 when the repository
cannot be read), never a traceback; messages pass through the URL redactor.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NoReturn

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_connection
from airflow.sdk.exceptions import AirflowNotFoundException
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse
from starlette.exceptions import HTTPException

from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.odf.chain.dataset import Dataset, block_key
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.repo.history import schema_history
from airflow_odf.odf.repo.lineage import lineage
from airflow_odf.odf.repo.lineage_picture import GraphvizMissingError, LineageGraphError, lineage_svg
from airflow_odf.odf.repo.overview import dataset_overview, repository_overview
from airflow_odf.odf.repo.repository import DatasetNotFoundError, Repository, RepositoryError
from airflow_odf.odf.storage.redact import redact_text, redact_url
from airflow_odf.ui import facts, pages

ENV_CONNECTION_PREFIX = "AIRFLOW_CONN_"
# No scripts at all; styles inline; the page may be framed by Airflow's own UI only.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'self'; "
    "base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

ConnectionReader = Depends(requires_access_connection("GET"))


class ViewError(Exception):
    """What the user asked for cannot be shown: rendered as an error page with `status`."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message


def _html(content: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(content, status_code=status, headers=HEADERS)


def _paths(request: Request) -> pages.Paths:
    return pages.Paths(request.scope.get("root_path", "").rstrip("/"))


def _message(e: Exception) -> str:
    return redact_text(str(e))


def _not_found(message: str) -> NoReturn:
    raise ViewError(404, "Not found", message)


def _unreadable(where: str, e: Exception) -> NoReturn:
    raise ViewError(500, "Cannot read the repository", f"{where}: {_message(e)}")


# ----- connections -----


def _connection_type(conn_id: str) -> str | None:
    try:
        return OdfRepoHook.get_connection(conn_id).conn_type
    except AirflowNotFoundException:
        return None


def _repository(conn_id: str) -> tuple[Repository, str]:
    """The repository of an `odf_repo` connection, opened read-only, and its URL (redacted)."""
    conn_type = _connection_type(conn_id)
    if conn_type is None:
        _not_found(f"no connection {conn_id!r}")
    if conn_type != OdfRepoHook.conn_type:
        _not_found(f"connection {conn_id!r} is of type {conn_type!r}, not an ODF repository (odf_repo)")
    hook = OdfRepoHook(conn_id)
    try:
        url = hook.repository_url()
        if url.startswith(("http://", "https://")):
            _not_found(
                f"connection {conn_id!r} is an HTTP remote ({redact_url(url)}), which lists no datasets: "
                "the view shows file:// and s3:// repositories"
            )
        return facts.open_read_only(url, hook.store_credentials()), redact_url(url)
    except (OdfError, ValueError) as e:
        _unreadable(f"connection {conn_id!r}", e)


def _odf_connection_ids() -> Iterator[str]:
    """`odf_repo` connections in the metadata database and in `AIRFLOW_CONN_*` environment variables."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        stored = session.scalars(
            select(Connection.conn_id).where(Connection.conn_type == OdfRepoHook.conn_type)
        ).all()
    yield from stored
    for name in os.environ:
        if name.startswith(ENV_CONNECTION_PREFIX):
            conn_id = name.removeprefix(ENV_CONNECTION_PREFIX).lower()
            if conn_id not in stored and _connection_type(conn_id) == OdfRepoHook.conn_type:
                yield conn_id


# ----- datasets -----


def _dataset(repo: Repository, name: str) -> Dataset:
    """The dataset of that name: 404 for a name that is not one or names nothing, 500 when it is there
    but cannot be read (e.g. a damaged alias file or a missing head)."""
    try:
        repo.check_name(name)
    except RepositoryError as e:
        _not_found(_message(e))
    try:
        return repo.dataset(name)
    except DatasetNotFoundError as e:
        _not_found(_message(e))
    except OdfError as e:
        _unreadable(name, e)


def _block_hash(dataset: Dataset, name: str, text: str) -> Multihash:
    try:
        block_hash = Multihash.parse(text)
    except OdfError as e:
        raise ViewError(400, "Bad request", f"{text!r} is not a block hash: {e}") from None
    if not dataset.store.exists(block_key(block_hash)):
        _not_found(f"no block {block_hash} in dataset {name}")
    return block_hash


def create_app() -> FastAPI:
    """The view's app (the plugin mounts it under /odf)."""
    app = FastAPI(title="ODF view", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(ViewError)
    async def view_error(request: Request, e: ViewError) -> HTMLResponse:
        return _html(pages.error_page(_paths(request), e.status, e.title, e.message), e.status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> HTMLResponse:
        """Airflow's auth answers (401, 403) and unknown routes, as pages; a 403 under a connection says
        what the user lacks (the right to read that connection)."""
        conn_id = request.path_params.get("connection_id")
        if e.status_code == 403 and conn_id:
            return _html(pages.forbidden_connection_page(_paths(request), conn_id), 403)
        titles = {401: "Not signed in", 403: "Forbidden", 404: "Not found"}
        page = pages.error_page(
            _paths(request), e.status_code, titles.get(e.status_code, "Error"), str(e.detail)
        )
        return _html(page, e.status_code)

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, user: GetUserDep) -> HTMLResponse:
        auth = get_auth_manager()
        known = list(dict.fromkeys(_odf_connection_ids()))
        readable = [
            conn_id
            for conn_id in known
            if auth.is_authorized_connection(
                method="GET", details=ConnectionDetails(conn_id=conn_id), user=user
            )
        ]
        listed = []
        for conn_id in sorted(readable):
            try:
                url = redact_url(OdfRepoHook(conn_id).repository_url())
            except OdfError as e:
                url = f"(unusable: {_message(e)})"
            listed.append((conn_id, url))
        page = pages.index_page(
            _paths(request),
            listed,
            hidden=len(readable) < len(known),
            may_read=auth.is_authorized_connection(method="GET", user=user),
            may_add=auth.is_authorized_connection(method="POST", user=user),
        )
        return _html(page)

    @app.get("/connections/{connection_id}", response_class=HTMLResponse, dependencies=[ConnectionReader])
    def repository(request: Request, connection_id: str) -> HTMLResponse:
        paths = _paths(request)
        repo, location = _repository(connection_id)
        try:
            rows = repository_overview(repo)
        except OdfError as e:
            _unreadable(location, e)
        graph = lineage(rows)
        names = {r.dataset_id: r.name for r in rows if r.dataset_id and r.error is None}
        svg, graph_error = None, None
        try:
            svg = lineage_svg(
                graph, lambda key: paths.dataset(connection_id, names[key]) if key in names else None
            )
        except GraphvizMissingError:
            graph_error = "No picture of the lineage: Graphviz is not installed on the API server (no `dot`)"
        except LineageGraphError as e:
            graph_error = f"No picture of the lineage: {e}"
        return _html(pages.repository_page(paths, connection_id, location, rows, graph, svg, graph_error))

    dataset_path = "/connections/{connection_id}/datasets/{name}"

    @app.get(dataset_path, response_class=HTMLResponse, dependencies=[ConnectionReader])
    def dataset(request: Request, connection_id: str, name: str, head: str | None = None) -> HTMLResponse:
        repo, _ = _repository(connection_id)
        ds = _dataset(repo, name)
        as_of = _block_hash(ds, name, head) if head else None
        try:
            row, state = dataset_overview(ds, name)
            start = as_of or state.head
            view = pages.DatasetView(
                row=row,
                as_of=str(start),
                schema=facts.current_schema(state),
                chain=facts.chain_page(ds, start),
                records=facts.latest_records(ds, start),
            )
        except OdfError as e:
            _unreadable(name, e)
        return _html(pages.dataset_page(_paths(request), connection_id, view))

    @app.get(f"{dataset_path}/blocks/{{block}}", response_class=HTMLResponse, dependencies=[ConnectionReader])
    def block(request: Request, connection_id: str, name: str, block: str) -> HTMLResponse:
        repo, _ = _repository(connection_id)
        ds = _dataset(repo, name)
        block_hash = _block_hash(ds, name, block)
        try:
            detail = facts.block_detail(ds, block_hash)
        except OdfError as e:
            _unreadable(name, e)
        return _html(pages.block_page(_paths(request), connection_id, name, detail))

    @app.get(f"{dataset_path}/schema", response_class=HTMLResponse, dependencies=[ConnectionReader])
    def schema(request: Request, connection_id: str, name: str) -> HTMLResponse:
        repo, _ = _repository(connection_id)
        ds = _dataset(repo, name)
        try:
            history = schema_history(ds, ds.existing_head(), max_blocks=facts.SCAN_BLOCKS)
        except OdfError as e:
            _unreadable(name, e)
        return _html(pages.schema_page(_paths(request), connection_id, name, history))

    return app

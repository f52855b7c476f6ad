"""`OdfViewPlugin`: the ODF view on Airflow's API server (`/odf`) and its entry in the Browse menu.

Registered through the `airflow.plugins` entry point, which every Airflow process loads — so the module
imports next to nothing, and the view's app (FastAPI, the auth checks, the core) is built on its first
request. Not through `plugins` in the provider info: Airflow reads that only when providers are
discovered eagerly, and would then report the plugin twice. `[odf] dataset_view = False` turns the view
(and the extra link to it) off.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.configuration import conf
from airflow.sdk.plugins_manager import AirflowPlugin

MOUNT = "/odf"


def view_enabled() -> bool:
    return conf.getboolean("odf", "dataset_view", fallback=True)


class LazyViewApp:
    """The view's ASGI app, made when the API server first hands it a request."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            from airflow_odf.ui.app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class OdfViewPlugin(AirflowPlugin):
    name = "odf"
    fastapi_apps = [{"app": LazyViewApp(), "url_prefix": MOUNT, "name": "ODF view"}] if view_enabled() else []
    external_views = (
        [
            {
                "name": "ODF datasets",
                "href": MOUNT.lstrip("/") + "/",
                "destination": "nav",
                "category": "browse",
                "url_route": "odf",
            }
        ]
        if view_enabled()
        else []
    )

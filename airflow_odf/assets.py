"""The `odf://<dataset id>` asset URI scheme: one Airflow asset per ODF dataset, named by its stable DID.

The DID (its multibase part, `fed01…`) survives renames and is the same in every repository the dataset
travels to, so DAGs in other deployments can be scheduled on it. Asset events carry the new head:
`{"head": …, "prev_head": …}`. Registered in the provider info with a validating handler, a factory
(hook-level lineage) and an OpenLineage converter.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import SplitResult

from airflow.sdk import Asset

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import DatasetId

SCHEME = "odf"
_DID_PREFIX = "did:odf:"


def dataset_uri(dataset_id: DatasetId | str) -> str:
    """`odf://<multibase dataset id>` for a DatasetId or its `did:odf:…` text."""
    did = dataset_id if isinstance(dataset_id, DatasetId) else DatasetId.parse(dataset_id)
    return f"{SCHEME}://{str(did).removeprefix(_DID_PREFIX)}"


def odf_asset(dataset_id: DatasetId | str, name: str) -> Asset:
    """The asset of a dataset: URI by DID, name the dataset's alias (what the UI shows)."""
    return Asset(name=name, uri=dataset_uri(dataset_id))


def declared_assets(dataset: str) -> list[Asset]:
    """The asset a task writing `dataset` declares as an outlet when its DAG file is parsed, so that the
    Assets page shows the task as its producer. Only a `did:odf:` reference names the dataset id without
    reading the repository; a dataset name has none (its tasks report through their `AssetAlias`)."""
    if not dataset.startswith(_DID_PREFIX):
        return []
    try:
        return [odf_asset(dataset, dataset)]
    except OdfError:
        return []  # not a dataset id: the task fails when it runs, naming it


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's URI handler: the host must be a dataset id, with no path, query or user info.

    Airflow normalises every URI of a registered scheme before calling this, turning an empty path
    into `/`; the path is emptied again so that the stored URI is exactly `odf://<dataset id>`."""
    if uri.path not in ("", "/") or uri.query or uri.fragment or "@" in uri.netloc:
        raise ValueError(f"odf asset URI {uri.geturl()!r}: expected odf://<dataset id> and nothing after it")
    try:
        DatasetId.parse(_DID_PREFIX + uri.netloc)
    except OdfError as e:
        raise ValueError(f"odf asset URI {uri.geturl()!r}: the host is not a dataset id: {e}") from None
    return uri._replace(netloc=uri.netloc.lower(), path="")


def create_asset(*, dataset_id: str, name: str | None = None, extra: dict[str, Any] | None = None) -> Asset:
    """The factory Airflow's hook-level lineage calls with the `odf` scheme."""
    uri = dataset_uri(dataset_id)
    return Asset(name=name or uri, uri=uri, extra=extra or {})


def convert_asset_to_openlineage(asset: Asset, lineage_context: Any) -> Any:
    """The OpenLineage dataset of an `odf` asset: namespace `odf`, name the dataset id."""
    from airflow.providers.common.compat.openlineage.facet import Dataset as OpenLineageDataset

    return OpenLineageDataset(namespace=SCHEME, name=asset.uri.removeprefix(f"{SCHEME}://"))

"""The checkpoint of a derivative transform: the watermark of each input as of the consumed blocks.

As the reference Spark engine does, the checkpoint is a tar of one `<dataset id multibase>.watermark`
file per input holding an RFC 3339 instant. It lets the next run find the watermark of an input that
brought no new explicit watermark without walking that input's chain. Our tar is written
byte-deterministically (sorted members, zero times and owners), so equal watermarks give the same
checkpoint hash.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from pathlib import Path

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.format.timestamps import Timestamp

_SUFFIX = ".watermark"
_DID_PREFIX = "did:odf:"


def write_checkpoint(watermarks: Mapping[DatasetId, Timestamp], path: Path) -> None:
    """Writes the inputs' watermarks as a tar at `path`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for did, watermark in sorted(watermarks.items(), key=lambda item: str(item[0])):
            data = watermark.isoformat().encode()
            info = tarfile.TarInfo(str(did).removeprefix(_DID_PREFIX) + _SUFFIX)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())


def read_checkpoint(data: bytes) -> dict[DatasetId, Timestamp] | None:
    """The inputs' watermarks, or None when the checkpoint is not of this form (another engine's)."""
    out: dict[DatasetId, Timestamp] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar.getmembers():
                name = member.name.rsplit("/", 1)[-1]
                if not member.isfile() or not name.endswith(_SUFFIX):
                    continue
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                did = DatasetId.parse(_DID_PREFIX + name.removesuffix(_SUFFIX))
                out[did] = Timestamp.parse(handle.read().decode().strip())
    except (tarfile.TarError, OdfError, UnicodeDecodeError, ValueError):
        return None
    return out

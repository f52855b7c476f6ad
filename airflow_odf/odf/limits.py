"""Bounds on untrusted input: the largest block, ref, manifest and multibase text the core accepts.

Blocks, refs and manifests come from peers, repositories and manifest authors the core does not trust;
every reader checks the size before it decodes, so a hostile input costs bounded time and memory. The
defaults are far above any real block (kilobytes) or ref (under 100 bytes); a deployment can move them
with the environment variables named below.
"""

from __future__ import annotations

import os

from airflow_odf.odf.errors import OdfError

MAX_BLOCK_BYTES_ENV = "ODF_MAX_BLOCK_BYTES"
MAX_MANIFEST_BYTES_ENV = "ODF_MAX_MANIFEST_BYTES"

DEFAULT_MAX_BLOCK_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_MANIFEST_BYTES = 4 * 1024 * 1024
# A ref holds one multibase multihash (a SHA3-256 one is 67 characters) and perhaps a newline.
MAX_REF_BYTES = 1024
# Longer than any multibase-encoded multihash or DID this core knows; base58 decoding is quadratic, so
# longer text is refused before decoding.
MAX_MULTIBASE_CHARS = 256


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise OdfError(f"{name}={raw!r}: expected a positive number of bytes")
    return value


def max_block_bytes() -> int:
    """The largest metadata block read, received or written (`ODF_MAX_BLOCK_BYTES`, default 16 MiB)."""
    return _positive_int(MAX_BLOCK_BYTES_ENV, DEFAULT_MAX_BLOCK_BYTES)


def max_manifest_bytes() -> int:
    """The largest YAML manifest read (`ODF_MAX_MANIFEST_BYTES`, default 4 MiB)."""
    return _positive_int(MAX_MANIFEST_BYTES_ENV, DEFAULT_MAX_MANIFEST_BYTES)

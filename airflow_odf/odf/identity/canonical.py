"""Canonical JSON and its hash: the bytes that are signed and hashed must be the same for every party.

Matrix's canonical JSON (sorted keys, no whitespace, UTF-8), through the `canonicaljson` library —
the one kamu's own query-commitment client uses, so hashes computed here match what it recomputes.
"""

from __future__ import annotations

from typing import Any

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.multiformats import Multihash


def canonical_json(value: Any) -> bytes:
    """`value` as canonical JSON bytes; OdfFormatError for what JSON cannot hold (NaN, bytes, ...)."""
    import canonicaljson  # only when something is signed or hashed

    try:
        return canonicaljson.encode_canonical_json(value)
    except (TypeError, ValueError) as e:
        raise OdfFormatError(f"not canonical JSON: {e}") from None


def canonical_hash(value: Any) -> str:
    """`f1620…`: the SHA3-256 multihash of `value`'s canonical JSON, in base16 multibase."""
    return str(Multihash.sha3_256(canonical_json(value)))

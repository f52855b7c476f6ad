"""Bounds on untrusted input: the largest block, ref, manifest and multibase text the core accepts,
and the most inputs, schema fields, steps and field-name characters a manifest or a schema may hold.

Blocks, refs and manifests come from peers, repositories and manifest authors the core does not trust;
every reader checks the size before it decodes, so a hostile input costs bounded time and memory. The
defaults are far above any real block (kilobytes), ref (under 100 bytes) or schema (hundreds of
columns); a deployment can move them with the environment variables named below.
"""

from __future__ import annotations

import os

from airflow_odf.odf.errors import OdfError

MAX_BLOCK_BYTES_ENV = "ODF_MAX_BLOCK_BYTES"
MAX_MANIFEST_BYTES_ENV = "ODF_MAX_MANIFEST_BYTES"
MAX_FIELD_NAME_CHARS_ENV = "ODF_MAX_FIELD_NAME_CHARS"
MAX_SCHEMA_FIELDS_ENV = "ODF_MAX_SCHEMA_FIELDS"
MAX_TRANSFORM_INPUTS_ENV = "ODF_MAX_TRANSFORM_INPUTS"
MAX_MANIFEST_STEPS_ENV = "ODF_MAX_MANIFEST_STEPS"

DEFAULT_MAX_BLOCK_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_MANIFEST_BYTES = 4 * 1024 * 1024
#: Spark, Parquet and Arrow set no length on a column name; names beyond this are mistakes or attacks.
DEFAULT_MAX_FIELD_NAME_CHARS = 1024
#: Fields of one schema, nested struct fields included: wide tables have hundreds of columns.
DEFAULT_MAX_SCHEMA_FIELDS = 10_000
DEFAULT_MAX_TRANSFORM_INPUTS = 1_000
#: Entries of each list of steps: a snapshot's events, a source's prepare steps, a transform's queries.
DEFAULT_MAX_MANIFEST_STEPS = 1_000
# A ref holds one multibase multihash (a SHA3-256 one is 67 characters) and perhaps a newline.
MAX_REF_BYTES = 1024
# Longer than any multibase-encoded multihash or DID this core knows; base58 decoding is quadratic, so
# longer text is refused before decoding.
MAX_MULTIBASE_CHARS = 256
# A head attestation is a few hundred bytes of canonical JSON (identity/attestation.py); stores and
# readers refuse a larger one unread.
MAX_ATTESTATION_BYTES = 4096


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise OdfError(f"{name}={raw!r}: expected a positive whole number")
    return value


def max_block_bytes() -> int:
    """The largest metadata block read, received or written (`ODF_MAX_BLOCK_BYTES`, default 16 MiB)."""
    return _positive_int(MAX_BLOCK_BYTES_ENV, DEFAULT_MAX_BLOCK_BYTES)


def max_manifest_bytes() -> int:
    """The largest YAML manifest read (`ODF_MAX_MANIFEST_BYTES`, default 4 MiB)."""
    return _positive_int(MAX_MANIFEST_BYTES_ENV, DEFAULT_MAX_MANIFEST_BYTES)


def max_field_name_chars() -> int:
    """The longest schema field name (`ODF_MAX_FIELD_NAME_CHARS`, default 1024 characters)."""
    return _positive_int(MAX_FIELD_NAME_CHARS_ENV, DEFAULT_MAX_FIELD_NAME_CHARS)


def max_schema_fields() -> int:
    """The most fields one schema holds, nested ones included (`ODF_MAX_SCHEMA_FIELDS`, default 10,000)."""
    return _positive_int(MAX_SCHEMA_FIELDS_ENV, DEFAULT_MAX_SCHEMA_FIELDS)


def max_transform_inputs() -> int:
    """The most inputs of one transform (`ODF_MAX_TRANSFORM_INPUTS`, default 1,000)."""
    return _positive_int(MAX_TRANSFORM_INPUTS_ENV, DEFAULT_MAX_TRANSFORM_INPUTS)


def max_manifest_steps() -> int:
    """The most entries of one list of steps in a manifest (`ODF_MAX_MANIFEST_STEPS`, default 1,000)."""
    return _positive_int(MAX_MANIFEST_STEPS_ENV, DEFAULT_MAX_MANIFEST_STEPS)

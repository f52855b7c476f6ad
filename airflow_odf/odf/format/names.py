"""Dataset names and references as the spec's grammar defines them (section "Dataset Identity")."""

from __future__ import annotations

import re

from airflow_odf.odf.errors import quoted

_SUBDOMAIN = r"[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*"
_HOSTNAME = rf"{_SUBDOMAIN}(?:\.{_SUBDOMAIN})*"
DATASET_NAME = re.compile(rf"{_HOSTNAME}\Z")
DATASET_ALIAS = re.compile(rf"(?:{_HOSTNAME}/)?{_HOSTNAME}\Z")
# The grammar sets no length; a repository keeps a file named after the dataset, and a file name has
# at most 255 bytes (with room left for the suffixes of temporary files).
MAX_DATASET_NAME_CHARS = 200


def is_dataset_name(text: str) -> bool:
    return len(text) <= MAX_DATASET_NAME_CHARS and bool(DATASET_NAME.match(text))


def dataset_name_problem(text: str) -> str | None:
    """Why a repository would refuse `text` as the name of one of its datasets; None when it would not."""
    if len(text) > MAX_DATASET_NAME_CHARS:
        return f"{quoted(text)} is too long for a dataset name (at most {MAX_DATASET_NAME_CHARS} characters)"
    if DATASET_NAME.match(text):
        return None
    account = "; an account prefix such as 'acme/' is not supported" if DATASET_ALIAS.match(text) else ""
    rule = f"letters, digits and inner '-', parts separated by '.'{account}"
    return f"{quoted(text)} is not a valid dataset name ({rule})"


def is_dataset_alias(text: str) -> bool:
    """`(account "/")? name`; both parts are hostnames (letters, digits, inner '-', '.' separators)."""
    return len(text) <= MAX_DATASET_NAME_CHARS and bool(DATASET_ALIAS.match(text))


def is_dataset_ref(text: str) -> bool:
    """A local reference: a `did:odf:` identity or a dataset alias."""
    return text.startswith("did:odf:") or is_dataset_alias(text)

"""Dataset names and references as the spec's grammar defines them (section "Dataset Identity")."""

from __future__ import annotations

import re

_SUBDOMAIN = r"[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*"
_HOSTNAME = rf"{_SUBDOMAIN}(?:\.{_SUBDOMAIN})*"
DATASET_NAME = re.compile(rf"{_HOSTNAME}\Z")
DATASET_ALIAS = re.compile(rf"(?:{_HOSTNAME}/)?{_HOSTNAME}\Z")


def is_dataset_name(text: str) -> bool:
    return bool(DATASET_NAME.match(text))


def is_dataset_alias(text: str) -> bool:
    """`(account "/")? name`; both parts are hostnames (letters, digits, inner '-', '.' separators)."""
    return bool(DATASET_ALIAS.match(text))


def is_dataset_ref(text: str) -> bool:
    """A local reference: a `did:odf:` identity or a dataset alias."""
    return text.startswith("did:odf:") or is_dataset_alias(text)

"""The `odf` commands of odf sql and odf export (queries over datasets, as of any block)."""

from __future__ import annotations

import argparse
from typing import Any


def register(groups: Any, repo_arg: argparse.ArgumentParser) -> None:
    """Adds the commands of this module to the `odf` parser."""

"""The `odf` commands of odf delete, odf rename and odf inspect lineage|query|schema."""

from __future__ import annotations

import argparse
from typing import Any


def register(groups: Any, repo_arg: argparse.ArgumentParser) -> None:
    """Adds the commands of this module to the `odf` parser."""

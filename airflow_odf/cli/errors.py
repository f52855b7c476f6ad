"""The errors every command group raises and the exit codes `main` turns them into: one module that
all command modules import, so that none imports `main` back."""

from __future__ import annotations

import argparse

from airflow_odf.odf.errors import OdfError

EXIT_BAD_INPUT = 2
EXIT_CONFLICT = 3
EXIT_VERIFICATION_FAILED = 4  # also: `odf list` / `odf gc` found damaged datasets (each named on stderr)


class CliError(Exception):
    """Bad input reported as `lines`, one problem per line."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class VerificationFailed(Exception):
    """A check found problems (`odf verify`, a denied `odf schema diff`): exit code 4."""


class CommandError(OdfError):
    """A bad command-line value (reported like other bad input: exit code 2)."""


class SchemaCommandError(OdfError):
    """A schema cannot be shown in the asked format (reported like other bad input: exit code 2)."""


def positive_int(text: str) -> int:
    """An argparse type for counts and limits, where 0 or less would silently do nothing."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of at least 1")
    return value

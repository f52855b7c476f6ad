"""Processes that die with their parent: a Spark application must not outlive the task (or `odf`
command) that started it, also when that process is killed with SIGKILL and no handler of its runs.

Linux's parent-death signal (`prctl(PR_SET_PDEATHSIG)`): the kernel sends SIGKILL to a process when
the thread that started it ends. The setting survives `exec`, so `spark-submit`, a shell script that
execs the driver JVM, hands it on to that JVM; the Python driver the JVM starts sets it again for
itself (`die_with_parent`). On other systems both are no-ops.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
_SIGKILL = int(signal.SIGKILL)


def _prctl() -> Callable[..., int] | None:
    """libc's `prctl`, resolved here (never between fork and exec), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent() -> None:
    """This process gets SIGKILL when its parent ends; at once if the parent has already ended."""
    prctl = _prctl()
    if prctl is None:
        return
    parent = os.getppid()
    prctl(_PR_SET_PDEATHSIG, _SIGKILL)
    if os.getppid() != parent:  # reparented before the setting took effect
        os.kill(os.getpid(), _SIGKILL)


def parent_death_preexec() -> Callable[[], None] | None:
    """A `preexec_fn` for `subprocess.Popen` that makes the child die with the calling process (None
    where there is no such signal). Call `Popen` from a thread that lives as long as the child."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def set_parent_death_signal() -> None:  # in the child, between fork and exec: no imports, no locks
        prctl(_PR_SET_PDEATHSIG, _SIGKILL)
        if os.getppid() != parent:
            os.kill(os.getpid(), _SIGKILL)

    return set_parent_death_signal

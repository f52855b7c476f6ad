"""What every benchmark prints about the machine it ran on (imported by the scripts beside it)."""

from __future__ import annotations

import platform
import subprocess


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (else what `platform` knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def java_version() -> str:
    """The first line of `java -version`."""
    out = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
    return out.splitlines()[0] if out else "java ?"

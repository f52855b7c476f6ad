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


def cpu_seconds() -> tuple[float, float]:
    """User + system CPU seconds used so far by this process, and by its live descendants (the local
    Spark JVM), so a benchmark can tell work from waiting, and the Python side's work from the JVM's:
    on a machine of C cores, a step that needs W CPU-seconds cannot take less than W / C of wall time."""
    import psutil  # an Airflow dependency; imported here so the other helpers work without it

    def used(process: psutil.Process) -> float:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            return 0.0
        return times.user + times.system

    me = psutil.Process()
    return used(me), sum(used(child) for child in me.children(recursive=True))

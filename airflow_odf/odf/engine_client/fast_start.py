"""Fast start of small local engine jobs: driver JVM options that cut what starting Spark costs.

A tiny ingest through `spark-submit` spends most of its time starting a JVM and running Spark's first
query on it (loading classes, interpreting bytecode, JIT-compiling), not on its data. Two JVM features
cut that cost. Neither changes what a job computes, and both apply to `local` masters only: there the
driver JVM, started on this machine, is the whole engine.

- **A class-data sharing archive** (`-XX:SharedArchiveFile`) of the classes an engine job loads, made
  once per Spark and Java installation by `odf engine warm-up` (`warm_up.build_class_archive`).
  The JVM checks the archive against its class path and JVM build, and ignores it (with one warning
  line) when they differ; its name carries a fingerprint of both installations, so an upgrade simply
  looks for a new archive.
- **The client JIT compiler only** (`-XX:TieredStopAtLevel=1`) when the request's inputs are small (up
  to `SMALL_INPUT_BYTES`): the optimising compiler's work pays off only in jobs long enough to run its
  code, and on a few cores it competes with the job itself.

The user's own `spark.driver.extraJavaOptions` (of the job's conf, else of spark-defaults.conf, which
our `--conf` would otherwise replace) come after ours, so any flag they set wins. The same
archive serves the long-lived local session of the CLI and of `engine="local"` tasks (its JVM starts
once per process).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SMALL_INPUT_BYTES = 16 * 1024 * 1024
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
DRIVER_CLASS_PATH = "spark.driver.extraClassPath"
CLIENT_JIT_ONLY = "-XX:TieredStopAtLevel=1"
_PROPERTY = re.compile(r"(?P<key>[^#!=:\s][^=:\s]*)\s*[=:]?\s*(?P<value>.*)")


def is_local_master(master: str | None) -> bool:
    """`local`, `local[N]`, `local[*]`, `local[N,F]`: the driver JVM is the engine (not `local-cluster`)."""
    return master is not None and (master == "local" or master.startswith("local["))


def request_input_bytes(request_json: str) -> int | None:
    """Total size of the files an engine request reads (inputs, previous slices, merge state); None when
    one of them cannot be sized here (a URI of a remote store, a missing file)."""
    request = json.loads(request_json)
    paths: list[str] = []
    for item in request.get("inputs") or []:
        paths += [item["path"]] if "path" in item else []
        paths += item.get("data_paths") or []
    paths += request.get("prev_data_paths") or []
    paths += [request["prev_checkpoint_path"]] if request.get("prev_checkpoint_path") else []
    total = 0
    for path in paths:
        try:
            total += _size(Path(path))
        except OSError:
            return None
    return total


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def cache_dir() -> Path:
    """Where the provider keeps per-machine caches: $ODF_CACHE_DIR, else $XDG_CACHE_HOME/airflow-odf."""
    if os.environ.get("ODF_CACHE_DIR"):
        return Path(os.environ["ODF_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-odf"


def spark_home() -> Path | None:
    """The Spark installation `spark-submit` runs: $SPARK_HOME, else the installed `pyspark` package
    (located without importing it)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def local_spark_problem() -> str | None:
    """Why a local Spark session cannot start here, or None: it needs Spark's jars, which the full
    pyspark package (the `spark` extra) or a Spark installation in $SPARK_HOME brings."""
    home = spark_home()
    if home is not None and (home / "jars").is_dir():
        return None
    where = f"{home} has no jars/ folder" if home is not None else "pyspark is not installed"
    return (
        f"local Spark needs Spark's jars and {where}: install the full pyspark with "
        "`pip install 'airflow-provider-odf[spark]'`, or set SPARK_HOME to a Spark installation"
    )


def java_executable() -> Path | None:
    """The `java` Spark's launcher uses: $JAVA_HOME/bin/java, else the one on PATH."""
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"]) / "bin" / "java"
    found = shutil.which("java")
    return Path(found) if found else None


def class_archive_path(directory: Path | None = None) -> Path | None:
    """The class archive for this Spark and Java installation (it may not exist yet); None when either
    installation cannot be found."""
    home, java = spark_home(), java_executable()
    if home is None or java is None or not (home / "jars").is_dir():
        return None
    try:
        java = java.resolve(strict=True)
        fingerprint = [f"{java}:{java.stat().st_size}:{java.stat().st_mtime_ns}"]
        for jar in sorted((home / "jars").iterdir()):
            stat = jar.stat()
            fingerprint.append(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}")
    except OSError:
        return None
    digest = hashlib.sha3_256("\n".join(fingerprint).encode()).hexdigest()[:16]
    return (directory or cache_dir()) / f"engine-classes-{digest}.jsa"


def java_option(name: str, path: Path) -> str:
    """`name=path`, quoted when the path has blanks (Spark splits Java options at blanks, not in quotes)."""
    value = str(path)
    return f'{name}="{value}"' if any(c.isspace() for c in value) else f"{name}={value}"


def fast_start_conf(
    conf: Mapping[str, Any], master: str | None, request_json: str | None, archive: Path | None = None
) -> dict[str, Any]:
    """`conf` with the driver Java options that start a job fast (unchanged if none apply).

    `request_json` is the one request the job answers, or None for a long-lived session whose requests
    are not known yet (it gets the archive, never the client JIT). `archive` defaults to this machine's
    (`class_archive_path`, looked up for local masters only). The archive is used when it exists and
    the user adds nothing to the driver's class path (an archive is only valid for the class path it was
    made with)."""
    if not is_local_master(master):
        return dict(conf)
    archive = archive or class_archive_path()
    options: list[str] = []
    if archive is not None and archive.is_file() and not conf.get(DRIVER_CLASS_PATH):
        options.append(java_option("-XX:SharedArchiveFile", archive))
    size = None if request_json is None else request_input_bytes(request_json)
    if size is not None and size <= SMALL_INPUT_BYTES:
        options.append(CLIENT_JIT_ONLY)
    return with_driver_java_options(conf, options)


def with_driver_java_options(conf: Mapping[str, Any], options: list[str]) -> dict[str, Any]:
    """`conf` with `options` before the driver Java options it has (else those of spark-defaults.conf,
    which a `--conf` value would replace: Spark would have used them), so that the user's flags win."""
    if not options:
        return dict(conf)
    own = str(conf.get(DRIVER_JAVA_OPTIONS) or spark_default(DRIVER_JAVA_OPTIONS) or "")
    return {**conf, DRIVER_JAVA_OPTIONS: " ".join([*options, *([own] if own else [])])}


def spark_default(key: str) -> str | None:
    """`key` in the installation's spark-defaults.conf ($SPARK_CONF_DIR, else $SPARK_HOME/conf), if set.

    The file is a Java properties file: `key value`, `key=value` or `key: value`; `#` and `!` start
    comments; the last line of a key wins."""
    home = spark_home()
    directory = os.environ.get("SPARK_CONF_DIR") or (home / "conf" if home else None)
    if directory is None:
        return None
    try:
        text = (Path(directory) / "spark-defaults.conf").read_text(encoding="utf-8")
    except OSError:
        return None
    value = None
    for line in text.splitlines():
        found = _PROPERTY.match(line.strip())
        if found and found["key"] == key:
            value = found["value"]
    return value

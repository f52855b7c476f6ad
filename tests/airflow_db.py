"""A freshly migrated Airflow metadata DB, made once per environment and copied where a test needs one.

`airflow db migrate` of an empty SQLite file costs 10–15 s; the suite needs a fresh DB in its own process
(the `airflow_db` fixture of tests/conftest.py) and in every isolated Airflow home of its child processes
(the retry and overlapping-run tests). The migrated file is kept in the suite's cache ($ODF_CACHE_DIR as
tests/conftest.py sets it: the venv's, else a temp dir), named by the installed distributions and their
versions: an upgrade of Airflow or of a provider simply migrates a new one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from importlib import metadata
from pathlib import Path


def _environment_key() -> str:
    """A digest of the installed distributions and versions (what decides the migrated schema)."""
    names = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    return hashlib.sha3_256("\n".join(names).encode()).hexdigest()[:16]


@cache
def migrated_template() -> Path:
    """The migrated SQLite file in the suite's cache, made by `airflow db migrate` in a throw-away
    Airflow home when absent (written beside its name and renamed into place, so a concurrent session
    never copies half a file)."""
    cache_dir = Path(os.environ["ODF_CACHE_DIR"])
    template = cache_dir / f"airflow-{_environment_key()}.db"
    if template.is_file():
        return template
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="odf-airflow-migrate-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env |= {"AIRFLOW_HOME": home, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
        airflow = Path(sys.executable).parent / "airflow"
        subprocess.run([str(airflow), "db", "migrate"], env=env, check=True, capture_output=True, timeout=600)
        staged = template.with_name(f"{template.name}.tmp{os.getpid()}")
        shutil.copyfile(Path(home) / "airflow.db", staged)
        os.replace(staged, template)
    return template


def fresh_db(path: Path) -> None:
    """A freshly migrated metadata DB at `path` (a SQLite file no connection holds open)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(migrated_template(), path)

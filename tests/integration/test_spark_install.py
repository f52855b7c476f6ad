"""Installing the provider for local Spark as docs/deployment.md says — its wheel, built here, with the
`spark` extra and pyspark-client excluded — into a fresh virtual environment: every file is owned by one
distribution (pyspark contains all of pyspark-client's), the Connect client, the provider and the `odf`
console script work, and uninstalling pyspark leaves every other distribution whole. Issue 36: with both
installed, 366 files had two owners and uninstalling either broke the other.

From uv's cache: the versions are the lock's (`uv export --frozen`), which scripts/ensure-env installed
on this machine, so no distribution is downloaded or built; the install asks the package index only for
its listings (`uv pip install --offline` cannot resolve from the cache alone). A fresh venv of ~230
packages (pyspark's 450 MB among them) costs tens of seconds: once per run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO

UV = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
pytestmark = pytest.mark.skipif(
    not Path(UV).exists(), reason="uv is not installed (scripts/ensure-env installs it)"
)

# every distribution's files that exist and that another distribution also claims; and every file a
# distribution claims that is missing
OWNERS = """
import json, pathlib
from importlib.metadata import distributions
owners, missing = {}, []
for d in distributions():
    name = d.metadata["Name"]
    for f in d.files or []:
        owners.setdefault(str(f), []).append(name)
        if not pathlib.Path(d.locate_file(f)).exists():
            missing.append(f"{name}: {f}")
print(json.dumps({"twice": {f: o for f, o in owners.items() if len(o) > 1}, "missing": missing,
                  "names": sorted({d.metadata["Name"].lower() for d in distributions()})}))
"""


def _run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(map(str, args))}:\n{done.stdout}{done.stderr}"
    return done.stdout


def _owners(python: Path, cwd: Path) -> dict[str, Any]:
    return json.loads(_run(python, "-c", OWNERS, cwd=cwd))


def test_local_spark_installs_each_file_once_and_uninstalls_cleanly(tmp_path: Path) -> None:
    # the wheel, as an operator builds it (docs/deployment.md)
    _run(UV, "build", "--wheel", "--offline", "--out-dir", tmp_path / "dist", REPO, cwd=tmp_path)
    [wheel] = (tmp_path / "dist").glob("airflow_provider_odf-*.whl")
    # the locked versions (pyspark-client is not in the lock: pyproject's [tool.uv] excludes it)
    requirements = tmp_path / "requirements.txt"
    _run(
        UV, "export", "--frozen", "--offline", "--no-hashes", "--no-emit-project", "--extra", "spark",
        "--project", REPO, "--output-file", requirements,
        cwd=tmp_path,
    )  # fmt: skip
    assert "pyspark-client" not in requirements.read_text()
    excludes = tmp_path / "no-pyspark-client.txt"
    excludes.write_text("pyspark-client\n")
    venv = tmp_path / "venv"
    _run(UV, "venv", "--offline", "--python", sys.executable, venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    _run(
        UV, "pip", "install", "--python", python, "--excludes", excludes,
        "-r", requirements, f"{wheel}[spark]",
        cwd=tmp_path,
    )  # fmt: skip

    installed = _owners(python, tmp_path)
    assert installed["twice"] == {} and installed["missing"] == []
    assert "pyspark" in installed["names"] and "pyspark-client" not in installed["names"]
    # the provider with the Spark provider's hooks, the Connect client, the JVM side, the console script
    _run(python, "-c", "import airflow_odf.hooks.spark_engine, pyspark.sql.connect.session", cwd=tmp_path)
    assert (venv / "bin" / "spark-submit").exists()
    assert "usage: odf" in _run(venv / "bin" / "odf", "--help", cwd=tmp_path)

    _run(UV, "pip", "uninstall", "--python", python, "pyspark", cwd=tmp_path)
    after = _owners(python, tmp_path)
    assert after["missing"] == []  # no other distribution lost a file
    assert not list(venv.glob("lib/python*/site-packages/pyspark/sql/connect/session.py"))  # all gone

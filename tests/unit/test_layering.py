"""The layers' import rules, checked by importing every module of a layer in a fresh interpreter: the
ODF core loads neither Airflow nor PySpark, the Spark engine never loads Airflow."""

from __future__ import annotations

import subprocess
import sys

import pytest

_CHECK = """
import importlib, pkgutil, sys
package = importlib.import_module(sys.argv[1])
names = [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
for name in names:
    importlib.import_module(name)
banned = set(sys.argv[2:])
print(len(names))
print(" ".join(sorted({m.split(".")[0] for m in sys.modules} & banned)))
"""


@pytest.mark.parametrize(
    ("package", "banned"),
    [("airflow_odf.odf", ["airflow", "pyspark", "py4j"]), ("airflow_odf.engine", ["airflow"])],
)
def test_a_layer_loads_nothing_of_the_layers_above_it(package: str, banned: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CHECK, package, *banned], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert int(out[0]) >= 5, f"{package}: too few modules found to mean anything"
    assert out[1:] in ([], [""]), f"{package} loads {out[1]}"

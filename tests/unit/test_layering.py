"""The layers' import rules (DESIGN.md, "Package layout").

Two checks: importing every module of a layer in a fresh interpreter loads nothing of the layers above
it (the ODF core neither Airflow nor PySpark, the engine neither Airflow nor the core); and the import
statements of every module, those inside functions too, keep the core's package order and make no
import circle anywhere in `airflow_odf`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import airflow_odf

PACKAGE_DIR = Path(airflow_odf.__file__).parent

# the core's packages, top to bottom: a package may import only from lower levels and from itself
CORE_LEVELS = {
    "ingest": 7,
    "transform": 7,
    "sharing": 7,
    "compaction": 7,
    "query": 7,
    "operation": 6,
    "checks": 6,
    "repo": 5,
    "chain": 4,
    "schema": 3,
    "hashing": 3,
    "engine_client": 3,
    "identity": 3,
    "format": 2,
    "storage": 2,
    "limits": 1,
    "errors": 0,
}

_CHECK = """
import importlib, pkgutil, sys
package = importlib.import_module(sys.argv[1])
names = [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
for name in names:
    importlib.import_module(name)
banned = sys.argv[2:]
print(len(names))
print(" ".join(sorted({m for m in sys.modules for b in banned if m == b or m.startswith(b + ".")})))
"""


@pytest.mark.parametrize(
    ("package", "banned"),
    [
        ("airflow_odf.odf", ["airflow", "pyspark", "py4j", "airflow_odf.engine"]),
        ("airflow_odf.engine", ["airflow", "airflow_odf.odf"]),
        ("airflow_odf.utils", ["airflow", "pyspark", "airflow_odf.odf", "airflow_odf.engine"]),
    ],
)
def test_a_layer_loads_nothing_of_the_layers_above_it(package: str, banned: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CHECK, package, *banned], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert int(out[0]) >= 1, f"{package}: no modules found"
    assert out[1:] in ([], [""]), f"{package} loads {out[1]}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str) -> Iterator[str]:
    """The `airflow_odf` modules a module imports, wherever the statement stands (functions,
    TYPE_CHECKING blocks): `from P import x` counts as an import of `P.x` when that is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "airflow_odf")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base])
                base = base.rstrip(".")
            if base.split(".")[0] != "airflow_odf":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield sub if sub in _MODULES else base


_MODULES = {_module_name(p): p for p in PACKAGE_DIR.rglob("*.py")}
_GRAPH = {name: sorted(set(_imports(path, name)) - {name}) for name, path in _MODULES.items()}


def _core_package(module: str) -> str | None:
    """`airflow_odf.odf.chain.dataset` -> `chain`; None outside the core's packages."""
    parts = module.split(".")
    if parts[:2] != ["airflow_odf", "odf"] or len(parts) < 3:
        return None
    return parts[2]


def test_the_module_graph_is_read() -> None:
    assert len(_MODULES) > 90
    assert "airflow_odf.odf.chain.rules" in _GRAPH["airflow_odf.odf.chain.dataset"]
    assert "airflow_odf.odf.format.model" in _GRAPH["airflow_odf.odf.chain.dataset"]


def test_the_core_keeps_its_package_order() -> None:
    """A core package imports only from packages below it (and from itself), never from the Airflow
    layer, the CLI or the engine; it may use the neutral `airflow_odf.utils`."""
    wrong = []
    for module, imported in _GRAPH.items():
        here = _core_package(module)
        if here is None:
            continue
        assert here in CORE_LEVELS, f"{module}: package {here!r} has no place in the order"
        for target in imported:
            if target == "airflow_odf" or target.startswith("airflow_odf.utils"):
                continue
            there = _core_package(target)
            if there is None or (there != here and CORE_LEVELS[there] >= CORE_LEVELS[here]):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_the_engine_and_utils_import_only_themselves() -> None:
    wrong = [
        f"{module} -> {target}"
        for module, imported in _GRAPH.items()
        for layer, allowed in (
            ("airflow_odf.engine", ("airflow_odf.engine", "airflow_odf.utils")),
            ("airflow_odf.utils", ("airflow_odf.utils",)),
        )
        if module.startswith(layer)
        for target in imported
        if not target.startswith(allowed)
    ]
    assert wrong == []


def test_no_import_circle() -> None:
    """No module reaches itself through imports (a package's `__init__` counts as a module)."""
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in _GRAPH.get(module, []):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(_GRAPH):
        if module not in state:
            visit(module)
    assert circles == []

"""Manifests at the 4 MiB cap, worst cases: `odf snapshot validate` and `odf add` must answer (accept or
refuse in one line) in under 5 s each (issue 34).

Cases: the most inputs, fields, events and long field names that fit in 4 MiB, a flat list of a million
values, one field name of nearly 4 MiB; and the largest accepted shapes (inputs, fields at their caps).
Baseline in the same run: PyYAML's pure-Python SafeLoader over the same text (what reading cost before
libyaml's events and the caps); the ratio is `odf snapshot validate` over that load alone.

Run: .venv/bin/python bench/bench_manifest_caps.py
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from machine_info import cpu_model

from airflow_odf.odf.limits import DEFAULT_MAX_SCHEMA_FIELDS, DEFAULT_MAX_TRANSFORM_INPUTS, max_manifest_bytes

ODF = [sys.executable, "-m", "airflow_odf.cli"]
CAP = max_manifest_bytes()


def snapshot(name: str, kind: str, events: str) -> str:
    return (
        f"kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: {name}\n  kind: {kind}\n  metadata:\n{events}"
    )


def filled(line: Callable[[int], str], head: int, count: int | None = None) -> str:
    """As many `line(i)` as fit in the cap (or `count` of them)."""
    lines, size, i = [], head, 0
    while (count is None and size + len(line(i)) < CAP - 200) or (count is not None and i < count):
        lines.append(line(i))
        size += len(lines[-1])
        i += 1
    return "".join(lines)


def transform(inputs: str) -> str:
    sql = "{kind: Sql, engine: spark, query: SELECT 1}"
    event = f"  - kind: SetTransform\n    inputs:\n{inputs}    transform: {sql}\n"
    return snapshot("d.inputs", "Derivative", event)


def schema(fields: str, name: str = "r.fields") -> str:
    return snapshot(name, "Root", f"  - kind: SetDataSchema\n    schema:\n      fields:\n{fields}")


def cases() -> dict[str, str]:
    def field(i: int) -> str:
        return f"      - {{name: f{i}, type: {{kind: Int64}}}}\n"

    def long_field(i: int) -> str:
        return f"      - {{name: {'n' * 370}{i}, type: {{kind: Int64}}}}\n"

    return {
        "inputs filling 4 MiB": transform(filled(lambda i: f"    - datasetRef: in{i}\n", 200)),
        f"{DEFAULT_MAX_TRANSFORM_INPUTS} inputs (the cap)": transform(
            filled(lambda i: f"    - datasetRef: in{i}\n", 200, DEFAULT_MAX_TRANSFORM_INPUTS)
        ),
        "fields filling 4 MiB": schema(filled(field, 200)),
        f"{DEFAULT_MAX_SCHEMA_FIELDS} fields (the cap)": schema(
            filled(field, 200, DEFAULT_MAX_SCHEMA_FIELDS)
        ),
        "10,000 fields of 370+ character names (4 MiB)": schema(filled(long_field, 200, 10_000), "r.long"),
        "events filling 4 MiB": snapshot(
            "r.events", "Root", filled(lambda i: f"  - {{kind: SetInfo, description: d{i}}}\n", 200)
        ),
        "a flat list of a million values": snapshot(
            "r.flat",
            "Root",
            "  - kind: SetInfo\n    keywords: [" + ", ".join(["k"] * ((CAP - 300) // 3)) + "]\n",
        ),
        "one field name of 4 MiB": schema(f"      - {{name: {'x' * (CAP - 300)}, type: Int64}}\n", "r.name"),
    }


def timed(args: list[str]) -> tuple[float, int, str]:
    started = time.perf_counter()
    run = subprocess.run(args, capture_output=True, text=True, check=False)
    lines = (run.stderr or run.stdout).strip().splitlines()
    return time.perf_counter() - started, run.returncode, (lines[0] if lines else "")[:110]


def main() -> None:
    print(
        f"{platform.node()} {cpu_model()} {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{datetime.date.today()}; cap {CAP} bytes"
    )
    print("| case | bytes | pure-Python SafeLoader (baseline) | validate | odf add | ratio | answer |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in cases().items():
            path = Path(tmp) / "m.yaml"
            path.write_text(text, encoding="utf-8")
            started = time.perf_counter()
            with contextlib.suppress(yaml.YAMLError):
                yaml.load(text, Loader=yaml.SafeLoader)
            baseline = time.perf_counter() - started
            validate, _rc, answer = timed([*ODF, "snapshot", "validate", str(path)])
            repo = Path(tmp) / f"repo-{abs(hash(name))}"
            subprocess.run([*ODF, "init", "--repo", str(repo)], capture_output=True, check=True)
            add, _rc, added = timed([*ODF, "add", "--repo", str(repo), str(path)])
            print(
                f"| {name} | {len(text.encode())} | {baseline:.2f} s | {validate:.2f} s | {add:.2f} s | "
                f"{validate / baseline:.2f} | {answer if 'ok (' not in answer else added} |"
            )


if __name__ == "__main__":
    main()

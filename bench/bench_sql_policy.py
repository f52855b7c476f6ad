"""The SQL policy's cost per step (issue 34: target <= 5 ms median for the example manifests' steps).

Every SQL step of the repository's manifests (dags_examples) and of the reference's real manifests is
checked as `odf add` and the engine check it: `check_steps` over the event's inputs. The cache of
identical statements is cleared before each timed run, so every check parses. Baseline in the same run:
sqlglot's bare parse of the same statements with the Spark dialect, which the policy cannot be faster
than; the ratio says what the policy adds to it.

    .venv/bin/python bench/bench_sql_policy.py [--rounds N]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import sqlglot

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_odf.odf.format import model  # noqa: E402
from airflow_odf.odf.format.manifests import read_manifests  # noqa: E402
from airflow_odf.odf.format.sql_policy import PREPROCESS_INPUT, steps_of, transform_inputs  # noqa: E402
from airflow_odf.utils.sql_policy import StepRefused, check_steps  # noqa: E402
from airflow_odf.utils.sql_policy.check import _checked  # noqa: E402
from tests.paths import UPSTREAM  # noqa: E402


def _events() -> list[tuple[list[tuple[str, str | None]], list[str]]]:
    """(steps, inputs) of every SQL transform and preprocess of the manifests found."""
    paths = sorted((ROOT / "dags_examples").rglob("*.yaml"))
    if UPSTREAM.is_dir():
        paths += sorted(UPSTREAM.glob("kamu-*/**/*.yaml"))
    found = []
    for path in paths:
        for manifest in read_manifests(path):
            if manifest.kind != "DatasetSnapshot":
                continue
            for event in manifest.content.metadata:
                if isinstance(event, model.SetTransform) and isinstance(event.transform, model.TransformSql):
                    found.append((steps_of(event.transform), transform_inputs(event)))
                elif isinstance(getattr(event, "preprocess", None), model.TransformSql):
                    found.append((steps_of(event.preprocess), [PREPROCESS_INPUT]))
    return found


def _per_step_ms(events: list[tuple[list[tuple[str, str | None]], list[str]]], check: bool) -> float:
    steps = sum(len(s) for s, _ in events)
    _checked.cache_clear()
    start = time.perf_counter()
    for event_steps, inputs in events:
        if check:
            # the reference's Flink/DataFusion manifests are refused: timed all the same
            with contextlib.suppress(StepRefused):
                check_steps(event_steps, inputs)
        else:
            for query, _alias in event_steps:
                with contextlib.suppress(sqlglot.errors.ParseError):
                    sqlglot.parse(query, read="spark")
    return (time.perf_counter() - start) * 1000 / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    events = _events()
    steps = sum(len(s) for s, _ in events)
    _per_step_ms(events, True)  # warm: imports and the refused classes
    policy = [_per_step_ms(events, True) for _ in range(args.rounds)]
    parse = [_per_step_ms(events, False) for _ in range(args.rounds)]
    p, b = statistics.median(policy), statistics.median(parse)
    print(f"{len(events)} SQL events, {steps} steps, {args.rounds} rounds")
    print(f"policy check per step: median {p:.3f} ms (min {min(policy):.3f}, max {max(policy):.3f})")
    print(f"bare sqlglot parse per step (baseline): median {b:.3f} ms")
    print(f"ratio policy / bare parse: {p / b:.2f}; target <= 5 ms median: {'met' if p <= 5 else 'NOT met'}")


if __name__ == "__main__":
    main()

"""`odf sql --proof` against `odf sql` for a 1,000-row result. Issue 35's target: <= 1.1x.

Set-up (not timed): `bench_sql.build`'s root dataset (the system columns, a string and a double), here of
10 slices of 100 records.

Timed, on one warm local SparkSession in this process, interleaved A B A B ... after a warm-up of each,
the same query (`` SELECT * FROM `bench.sql` ORDER BY offset ``, all 1,000 rows):

- (A) `odf sql --format json`: `query_rows` (the engine's views, the query, its Parquet result read
  back) and the rows printed as JSON (into memory);
- (B) `odf sql --proof`: `answer_query` with `limit` 1000 (the datasets pinned to their heads, the same
  engine request with `skip`, the rows in kamu's JSON encoding, the three canonical-JSON hashes, the
  ed25519 signature) and the document printed as JSON (into memory).

(C), untimed against the others: the commitment's own work on the result in memory (the JSON encoding,
the output's canonical hash, the signature), the part of B that A does not do.

The ratio printed is the median of the per-round ratios B/A (each round's two runs are neighbours in
time, so drift on a shared machine cancels out), beside the medians of each.

Run: `.venv/bin/python bench/query_proof.py [--slices 10] [--records 100] [--rounds 9]`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_sql import NAME, build
from machine_info import cpu_model, java_version

from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.engine.session import get_session
from airflow_odf.odf.identity.canonical import canonical_hash
from airflow_odf.odf.identity.keys import KeyStore
from airflow_odf.odf.query.commitment import answer_query, sign_commitment
from airflow_odf.odf.query.data_json import encode_data
from airflow_odf.odf.query.output import write_rows
from airflow_odf.odf.query.request import QueryInput
from airflow_odf.odf.query.run import QueryOptions, query_rows

SQL = f"SELECT * FROM `{NAME}` ORDER BY offset"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=10)
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    rows = args.slices * args.records
    tmp = Path(tempfile.mkdtemp(prefix="bench-query-proof-"))
    try:
        repo = build(tmp / "repo", args.slices, args.records)
        node_key = KeyStore(tmp / "keys").node_secret()
        get_session("local[*]")
        runner = LocalSparkRunner("local[*]")
        work = tmp / "work"
        request = QueryInput(query=SQL, include=frozenset({"Proof"}), limit=rows)

        def plain() -> float:
            t = time.perf_counter()
            table = query_rows(repo, SQL, runner, QueryOptions(work_dir=work), max_rows=rows)
            out = io.StringIO()
            write_rows(table, "json", out)
            assert table.num_rows == rows
            return time.perf_counter() - t

        def proof() -> float:
            t = time.perf_counter()
            answer = answer_query(repo, runner, request, work_dir=work, node_key=node_key)
            text = json.dumps(answer, indent=2, ensure_ascii=False)
            assert len(answer["output"]["data"]) == rows and text
            return time.perf_counter() - t

        plain(), proof(), plain(), proof()  # warm-up: JIT, file cache
        a: list[float] = []
        b: list[float] = []
        for _ in range(args.rounds):
            a.append(plain())
            b.append(proof())
        table = query_rows(repo, SQL, runner, QueryOptions(work_dir=work), max_rows=rows)

        def commitment_work() -> float:
            t = time.perf_counter()
            output = {"data": encode_data(table, "JsonAoS"), "dataFormat": "JsonAoS"}
            hashes = {"inputHash": "", "outputHash": canonical_hash(output), "subQueriesHash": ""}
            sign_commitment(node_key, hashes)
            return time.perf_counter() - t

        c = [commitment_work() for _ in range(args.rounds)]
        ratios = [y / x for x, y in zip(a, b, strict=True)]
        ratio = statistics.median(ratios)
        print(f"{cpu_model()}, {os.cpu_count()} CPUs; python {sys.version.split()[0]}, {java_version()}")
        print(f"{rows} rows ({args.slices} slices of {args.records}), {args.rounds} rounds, interleaved")
        print(f"(A) odf sql --format json: median {statistics.median(a):.3f} s  {[round(x, 3) for x in a]}")
        print(f"(B) odf sql --proof:       median {statistics.median(b):.3f} s  {[round(x, 3) for x in b]}")
        print(f"(C) the commitment's own work: median {statistics.median(c) * 1000:.1f} ms")
        print(
            f"ratio B/A: median {ratio:.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f}; target <= 1.1x): "
            f"{'MET' if ratio <= 1.1 else 'NOT MET'}"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

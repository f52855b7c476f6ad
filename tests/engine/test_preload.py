"""`airflow_odf.preload`, imported by an Airflow process that forks its tasks: it imports neither Airflow
nor starts a thread, and a task forked after it runs engine requests on a real Spark Connect server."""

from __future__ import annotations

import json
import subprocess
import sys

# Run in a fresh interpreter: what the import leaves behind, then a forked "task" using it.
FORKING_WORKER = """
import json, os, sys, threading

import airflow_odf.preload

report = {
    "airflow_modules": sorted(m for m in sys.modules if m == "airflow" or m.startswith("airflow.")),
    "threads": threading.active_count(),
    "preloaded": [
        m for m in ("pandas", "grpc", "pyarrow", "pyspark.sql.connect.session") if m in sys.modules
    ],
}
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # the task: a session on the server, a query, released
    os.close(read)
    from airflow_odf.engine.connect_runner import connect_mode, open_session

    with connect_mode():
        spark = open_session(sys.argv[1])
        rows = spark.range(5).selectExpr("sum(id) AS total").collect()[0]["total"]
        spark.stop()
    os.write(write, str(rows).encode())
    os._exit(0)
os.close(write)
answer = os.read(read, 100).decode()
_, status = os.waitpid(pid, 0)
report["child"] = {"status": status, "answer": answer}
print(json.dumps(report))
"""


def test_preload_imports_no_airflow_and_a_forked_task_uses_the_server(connect_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKING_WORKER, connect_url], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["airflow_modules"] == []  # Airflow is still starting when its local settings import this
    assert report["threads"] == 1  # nothing a fork would leave half-copied
    assert report["preloaded"] == ["pandas", "grpc", "pyarrow", "pyspark.sql.connect.session"]
    assert report["child"] == {"status": 0, "answer": "10"}

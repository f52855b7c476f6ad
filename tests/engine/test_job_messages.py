"""What a Spark error becomes in the engine's response: its message, without the Java stack."""

from __future__ import annotations

from airflow_odf.engine.job import _first_lines

JAVA_ERROR = """org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2898)
\tat org.apache.spark.scheduler.DAGScheduler.$anonfun$abortStage$2(DAGScheduler.scala:2834)
Caused by: java.io.FileNotFoundException: No such file or directory: s3a://lake/in/a.csv
\tat org.apache.hadoop.fs.s3a.S3AFileSystem.s3GetFileStatus(S3AFileSystem.java:4132)
\t... 21 more
Caused by: software.amazon.awssdk.services.s3.model.NoSuchKeyException: The specified key does not exist.
\t... 35 more
"""


def test_a_spark_error_keeps_its_messages_and_drops_the_java_stack() -> None:
    assert _first_lines(JAVA_ERROR).splitlines() == [
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed",
        "Caused by: java.io.FileNotFoundException: No such file or directory: s3a://lake/in/a.csv",
        "Caused by: software.amazon.awssdk.services.s3.model.NoSuchKeyException: The specified key does not "
        "exist.",
    ]


def test_a_long_error_is_cut_to_six_lines() -> None:
    text = "\n".join(f"Caused by: cause {i}\n\tat frame {i}\n\t... {i} more" for i in range(10))
    assert _first_lines(text).splitlines() == [f"Caused by: cause {i}" for i in range(6)]

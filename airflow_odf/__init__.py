"""Apache Airflow provider for Open Data Fabric pipelines on PySpark."""

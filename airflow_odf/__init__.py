"""Apache Airflow provider for Open Data Fabric pipelines on PySpark."""

from airflow_odf.utils.third_party import quiet_third_party

# before anything imports pyspark: every process that loads the provider (Airflow's components, the
# preload, tasks, the CLI) is spared pyspark's noise, one message at a time (airflow_odf/utils/third_party.py)
quiet_third_party()

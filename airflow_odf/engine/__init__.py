"""The PySpark engine: reads, preprocesses, merges and writes data for the ODF core (no airflow here)."""

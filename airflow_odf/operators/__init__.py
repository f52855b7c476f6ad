"""The Airflow layer: operators."""

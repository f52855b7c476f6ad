"""The Airflow layer: hooks."""

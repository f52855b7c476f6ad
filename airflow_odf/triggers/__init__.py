"""The Airflow layer: triggers."""

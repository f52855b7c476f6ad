"""The Airflow layer: sensors."""

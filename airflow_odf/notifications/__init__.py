"""The Airflow layer: notifications."""

"""Neutral helpers that both the core and the engine may use (no ODF, Airflow or Spark imports)."""

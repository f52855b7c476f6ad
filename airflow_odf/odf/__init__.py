"""The ODF core, the coordinator: it alone reads and writes metadata. One package per spec concept,
dependencies one way: ingest, transform, sharing -> repo -> chain -> schema, hashing, engine_client ->
format, storage -> errors. Imports neither Airflow nor Spark."""

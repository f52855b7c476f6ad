"""Data Ingestion of root datasets: polling (`polling`) and push (`push`) ingest, one iteration each
(`iteration`), prepare steps, source checks and schema inference; fetch steps in `fetch/`. Nothing is
re-exported here, so that importing a fetch step does not load the whole ingest (and pyarrow)."""

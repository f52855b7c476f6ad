"""Data Hashing: the logical hash (arrow-digest), the physical and column hashes of Parquet files, and
the hashing done ahead of a commit while the engine still writes."""

"""Read-only queries over a repository's datasets, now or as of any block (`odf sql`, `odf export`)."""

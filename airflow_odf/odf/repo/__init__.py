"""Repositories: datasets by alias and DID, the order of manifests, pull plans and schema migration."""

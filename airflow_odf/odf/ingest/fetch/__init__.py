"""Fetch steps of a polling source: Url, FilesGlob and Container, with the templating and time
formats they use."""

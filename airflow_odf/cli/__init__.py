"""The `odf` command: `main` parses and dispatches; one module per command group; `errors` holds the
error classes and exit codes they share."""

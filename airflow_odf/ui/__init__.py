"""The ODF view: a read-only page of a repository's datasets inside Airflow's UI (docs/airflow-ui.md).

`facts` gathers what the pages show through the core alone (the overview, the lineage and its picture,
and the schema history are the core's, shared with `odf inspect`), `pages` renders escaped HTML, `app`
is the FastAPI app (Airflow's auth on every route) and `plugin` registers it with Airflow's API server
and navigation.
"""

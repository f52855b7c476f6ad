"""Provider metadata read by Airflow's ProvidersManager through the `apache_airflow_provider` entry point.

Kept free of Airflow imports: discovery calls it in every Airflow process.
"""

from __future__ import annotations

from typing import Any

REPO_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "port", "login"],
    "relabeling": {"host": "Repository URL", "password": "Bearer token (HTTP repositories)"},
    "placeholders": {
        "host": "file:///data/odf | s3://bucket/prefix | https://host/repo",
        "extra": '{"aws_conn_id": "aws_default", "endpoint_url": "http://127.0.0.1:9000"}',
    },
}

_INTEGRATION = "Open Data Fabric"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-odf",
        "name": "Open Data Fabric",
        "description": "Run verifiable, reproducible Open Data Fabric (ODF) pipelines on PySpark.",
        "versions": ["0.1.0"],
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://docs.kamu.dev/odf/",
                "tags": ["software"],
            }
        ],
        "connection-types": [
            {
                "connection-type": "odf_repo",
                "hook-class-name": "airflow_odf.hooks.repo.OdfRepoHook",
                "hook-name": "ODF Repository",
                "ui-field-behaviour": REPO_UI_FIELD_BEHAVIOUR,
                "conn-fields": {
                    "aws_conn_id": {
                        "label": "AWS connection id (S3 repositories)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "endpoint_url": {
                        "label": "S3 endpoint URL (S3-compatible stores)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "aws_access_key_id": {
                        "label": "AWS access key id (S3, instead of an AWS connection)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "aws_secret_access_key": {
                        "label": "AWS secret access key (S3, instead of an AWS connection)",
                        "schema": {"type": ["string", "null"], "format": "password"},
                    },
                    "token": {
                        "label": "Bearer token (HTTP repositories)",
                        "schema": {"type": ["string", "null"], "format": "password"},
                    },
                },
            }
        ],
        "hooks": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": ["airflow_odf.hooks.repo", "airflow_odf.hooks.spark_engine"],
            }
        ],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_odf.operators.manifest",
                    "airflow_odf.operators.ingest",
                    "airflow_odf.operators.transform",
                    "airflow_odf.operators.schema",
                    "airflow_odf.operators.verify",
                    "airflow_odf.operators.sharing",
                    "airflow_odf.operators.compact",
                    "airflow_odf.operators.sql",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_odf.sensors.batching",
                    "airflow_odf.sensors.head",
                    "airflow_odf.sensors.source",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_odf.triggers.batching",
                    "airflow_odf.triggers.head",
                    "airflow_odf.triggers.source",
                ],
            }
        ],
        "notifications": ["airflow_odf.notifications.schema_violation.OdfSchemaViolationNotifier"],
        "extra-links": ["airflow_odf.links.OdfDatasetLink"],
        "asset-uris": [
            {
                "schemes": ["odf"],
                "handler": "airflow_odf.assets.sanitize_uri",
                "factory": "airflow_odf.assets.create_asset",
                "to_openlineage_converter": "airflow_odf.assets.convert_asset_to_openlineage",
            }
        ],
        "config": {
            "odf": {
                "description": "Defaults of the Open Data Fabric provider.",
                "options": {
                    "default_engine": {
                        "description": "How operators run engine requests: spark-submit (through the Spark "
                        "connection), spark-connect (on the Spark Connect server of the Spark connection, "
                        "of type spark_connect; such a connection selects it by itself) or local (the "
                        "worker's own local SparkSession).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "local",
                        "default": "spark-submit",
                    },
                    "engine_fast_start": {
                        "description": "Start small spark-submit jobs on a local master with JVM options "
                        "that make them start faster (the class archive of `odf engine warm-up`, if made, "
                        "and the client JIT compiler for inputs up to 16 MiB).",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "False",
                        "default": "True",
                    },
                    # None (unset), so that ODF_ENGINE_TIMEOUT still applies (utils/engine_deadline.py)
                    "engine_timeout": {
                        "description": "Seconds an engine request may run before its Spark jobs are "
                        "cancelled (its spark-submit application killed) and the task fails without "
                        "retries; a task's engine_timeout wins. Unset: ODF_ENGINE_TIMEOUT, else 3600.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "600",
                        "default": None,
                    },
                    "spark_log_level": {
                        "description": "How much Spark logs in the task log of spark-submit jobs: a log4j "
                        "level (OFF, FATAL, ERROR, WARN, INFO, DEBUG, TRACE, ALL); a task's "
                        "spark_conf={'spark.log.level': ...} wins.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "INFO",
                        "default": "WARN",
                    },
                    "schema_policy": {
                        "description": "Default schema policy of ingest and transform tasks.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "additive",
                        "default": "strict",
                    },
                    "dataset_view": {
                        "description": "Serve the ODF view (a read-only page of each odf_repo connection's "
                        'datasets, /odf on the API server, in the Browse menu) and point the "ODF dataset" '
                        "extra link at it.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "False",
                        "default": "True",
                    },
                    "dataset_url_template": {
                        "description": 'URL of the "ODF dataset" extra link of ODF tasks, formatted with '
                        "{dataset_name}, {dataset_id} and {head} (the head after the task); empty: the ODF "
                        "view (dataset_view), else no link.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "http://127.0.0.1:8080/{dataset_name}/blocks/{head}",
                        "default": "",
                    },
                    "signatures": {
                        "description": "What a pull (OdfPullOperator) does with the attestation of the head "
                        "it receives: check refuses a bad one (another key, dataset or head; damaged) and "
                        "reports a missing one, require also refuses a missing one, ignore refuses neither. "
                        "A task's signatures wins.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "require",
                        "default": "check",
                    },
                    # The source trust options default to None (unset), so that the environment
                    # variables named in their descriptions still apply (airflow_odf.source_trust).
                    "allow_shell_steps": {
                        "description": "Run Pipe prepare steps: any program a source manifest names, on the "
                        "worker. Unset: ODF_ALLOW_SHELL_STEPS, else off. A task's allow_shell_steps wins.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "True",
                        "default": None,
                    },
                    "allow_container_sources": {
                        "description": "Run Container fetch steps: any image a source manifest names, with "
                        "the worker's docker/podman. Unset: ODF_ALLOW_CONTAINER_SOURCES, else off. A task's "
                        "allow_container_sources wins.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "True",
                        "default": None,
                    },
                    "template_env_allow": {
                        "description": "The worker's environment variables ${{ env.NAME }} templates may "
                        "read (and Container steps pass through): names and NAME* prefixes, comma separated; "
                        "* allows all (secrets included). Unset: ODF_TEMPLATE_ENV_ALLOW, else ODF_*.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "ODF_*, RATES_TOKEN",
                        "default": None,
                    },
                    "local_source_dirs": {
                        "description": "Directories file:// URLs and FilesGlob paths may read, separated by "
                        "the OS path separator (:). Unset: ODF_LOCAL_SOURCE_DIRS, else the task's source_dir "
                        "(or the working directory).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/data/landing:/data/exports",
                        "default": None,
                    },
                },
            }
        },
    }

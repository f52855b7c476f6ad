"""Which of Spark's built-in functions a statement may call, and which table-valued functions it may read.

The deny-list is decided from Spark's function registry (`spark_builtins.py`): every built-in that reaches
outside the rows it is given — the JVM, files, the process or the network — is refused; everything else in
the registry computes on its arguments alone. A name outside the registry is refused too (see `check.py`).
"""

from __future__ import annotations

REFUSED_FUNCTIONS: dict[str, str] = {
    # the JVM: any static Java method, with the worker's rights (environment, system properties, files,
    # System.exit)
    "reflect": "it calls any Java method (the environment, files, System.exit)",
    "java_method": "it calls any Java method (the environment, files, System.exit)",
    "try_reflect": "it calls any Java method (the environment, files, System.exit)",
    # files: names and places of the files the worker reads, which are no data of the inputs
    "input_file_name": "it reveals the worker's file paths",
    "input_file_block_start": "it reveals the worker's file layout",
    "input_file_block_length": "it reveals the worker's file layout",
    # files: a Protobuf descriptor is read from a path of the worker's disk
    "from_protobuf": "it reads a descriptor file from the worker's disk",
    "to_protobuf": "it reads a descriptor file from the worker's disk",
    # files and the network: an XML parser may resolve external entities and DTDs
    "xpath": "its XML parser may fetch external entities (files, the network)",
    "xpath_boolean": "its XML parser may fetch external entities (files, the network)",
    "xpath_double": "its XML parser may fetch external entities (files, the network)",
    "xpath_float": "its XML parser may fetch external entities (files, the network)",
    "xpath_int": "its XML parser may fetch external entities (files, the network)",
    "xpath_long": "its XML parser may fetch external entities (files, the network)",
    "xpath_number": "its XML parser may fetch external entities (files, the network)",
    "xpath_short": "its XML parser may fetch external entities (files, the network)",
    "xpath_string": "its XML parser may fetch external entities (files, the network)",
    "from_xml": "its XML parser may fetch external entities (files, the network)",
    "schema_of_xml": "its XML parser may fetch external entities (files, the network)",
    # the process: who runs the engine and which build it is (also never reproducible across engines)
    "current_user": "it reveals the account the engine runs as",
    "user": "it reveals the account the engine runs as",
    "session_user": "it reveals the account the engine runs as",
    "version": "it reveals the engine's build",
    # the process: the Python workers' logs
    "python_worker_logs": "it reads the engine's Python worker logs",
}

# Table-valued functions (Spark's table function registry) that only generate rows from their arguments.
TABLE_FUNCTIONS = frozenset(
    {
        "range",
        "explode",
        "explode_outer",
        "inline",
        "inline_outer",
        "json_tuple",
        "posexplode",
        "posexplode_outer",
        "stack",
        "variant_explode",
        "variant_explode_outer",
        "sql_keywords",
        "collations",
    }
)

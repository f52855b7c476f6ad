"""`python -m airflow_odf.cli`: the `odf` command."""

import sys

from airflow_odf.cli.main import main

sys.exit(main())

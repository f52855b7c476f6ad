"""What Spark needs to read and write `s3a://` URIs: the cached `hadoop-aws` jars and the S3A settings.

PySpark ships Hadoop's client but not its S3 connector; `scripts/s3a-jars` fetches `hadoop-aws` and the
runtime dependencies that Hadoop release declares (the AWS SDK v2 bundle among them) into a cache
folder. Every runner (the in-process local session, `spark-submit`, `odf engine serve`) builds its Spark
conf here, so an `odf_repo` connection with `spark_s3a: true` means the same settings everywhere.
Property names are those of hadoop-aws 3.5.0 (`core-default.xml` of the Hadoop client in PySpark 4.2.0).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

#: The Hadoop release of PySpark's bundled client (`hadoop-client-api-3.5.0.jar`); `scripts/s3a-jars`
#: fetches the `hadoop-aws` of the same release (a unit test keeps the two in step).
HADOOP_VERSION = "3.5.0"
#: Where `scripts/s3a-jars` puts the jars unless `$ODF_JARS_DIR` says otherwise.
DEFAULT_JARS_DIR = Path("~/.cache/airflow-provider-odf/jars")
JARS_DIR_ENV = "ODF_JARS_DIR"

_HADOOP = "spark.hadoop.fs.s3a."
ACCESS_KEY = _HADOOP + "access.key"
SECRET_KEY = _HADOOP + "secret.key"
SESSION_TOKEN = _HADOOP + "session.token"
#: Conf keys whose values are credentials: runners keep them off command lines (a 0600 properties
#: file, or set on the running session) and out of logs. The access key id is not secret by itself
#: but is kept with its secret so a command line never names the account.
#: The same keys in the executors' environment, where Arrow's S3 client (which hashes what the engine
#: wrote, on the executors) finds them by the AWS default chain (`with_executor_keys`).
EXECUTOR_KEY_ENV = {
    ACCESS_KEY: "spark.executorEnv.AWS_ACCESS_KEY_ID",
    SECRET_KEY: "spark.executorEnv.AWS_SECRET_ACCESS_KEY",
    SESSION_TOKEN: "spark.executorEnv.AWS_SESSION_TOKEN",
}
S3A_SECRET_KEYS = frozenset({ACCESS_KEY, SECRET_KEY, SESSION_TOKEN, *EXECUTOR_KEY_ENV.values()})

#: The jars go on the driver's and the executors' class path, from the cache folder (`spark.jars` would
#: copy the 690 MB AWS SDK bundle into every application's work folder, on every executor: 10-20 s each).
#: A cluster's nodes need them at the same path (`scripts/s3a-jars` on each, or a shared `ODF_JARS_DIR`).
CLASS_PATH_KEYS = ("spark.driver.extraClassPath", "spark.executor.extraClassPath")

_SIMPLE_PROVIDER = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
_TEMPORARY_PROVIDER = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"


class S3aJarsMissing(ValueError):
    """The s3a jars are not in the cache folder (`scripts/s3a-jars` has not run on this machine)."""


def jars_dir() -> Path:
    """The jar cache folder: `$ODF_JARS_DIR`, else `~/.cache/airflow-provider-odf/jars`."""
    return Path(os.environ.get(JARS_DIR_ENV) or DEFAULT_JARS_DIR).expanduser()


def s3a_jars() -> list[str]:
    """The cached jars, as absolute paths: those `scripts/s3a-jars` listed in the cache folder
    (`hadoop-aws` and the runtime dependencies its release declares, the AWS SDK bundle among them)."""
    folder = jars_dir()
    listing = folder / f"s3a-jars-{HADOOP_VERSION}.txt"
    fetch = f"run scripts/s3a-jars (in the provider's source tree) to fetch them into {folder}"
    try:
        names = [line.strip() for line in listing.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError:
        raise S3aJarsMissing(
            f"the s3a jars (hadoop-aws {HADOOP_VERSION}) are not in {folder}: {fetch}"
        ) from None
    jars = [folder / name for name in names]
    missing = [jar.name for jar in jars if not jar.is_file()]
    if missing or not any(name.startswith("hadoop-aws-") for name in names):
        raise S3aJarsMissing(f"{', '.join(missing) or 'hadoop-aws'} not in {folder}: {fetch}")
    return [str(jar.absolute()) for jar in jars]


def s3a_conf(
    *,
    endpoint: str | None,
    region: str | None,
    path_style: bool,
    access_key: str | None = None,
    secret_key: str | None = None,
    session_token: str | None = None,
) -> dict[str, str]:
    """The Spark conf that makes `s3a://` reach this store: the jars (on the class paths,
    CLASS_PATH_KEYS) and the `fs.s3a.*` settings as `spark.hadoop.*`.

    `endpoint` is a URL (`http://127.0.0.1:9000`) or None for AWS itself; its scheme turns SSL on or off.
    With keys the credentials provider is Hadoop's simple one (or its temporary one with a session
    token); without, Hadoop's default chain applies (environment variables, then the instance role).
    The keys in S3A_SECRET_KEYS hold the secrets: keep them off command lines (`split_secrets`).
    """
    class_path = os.pathsep.join(s3a_jars())
    conf = {key: class_path for key in CLASS_PATH_KEYS}
    conf[_HADOOP + "path.style.access"] = str(path_style).lower()
    if endpoint:
        scheme = urlsplit(endpoint).scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"an S3 endpoint is an http:// or https:// URL, got {endpoint!r}")
        conf[_HADOOP + "endpoint"] = endpoint
        conf[_HADOOP + "connection.ssl.enabled"] = str(scheme == "https").lower()
    if region:
        conf[_HADOOP + "endpoint.region"] = region
    if bool(access_key) != bool(secret_key):
        raise ValueError("S3 credentials need both the access key id and the secret key, or neither")
    if access_key and secret_key:
        conf[ACCESS_KEY] = access_key
        conf[SECRET_KEY] = secret_key
        conf[_HADOOP + "aws.credentials.provider"] = _SIMPLE_PROVIDER
        if session_token:
            conf[SESSION_TOKEN] = session_token
            conf[_HADOOP + "aws.credentials.provider"] = _TEMPORARY_PROVIDER
    return conf


def split_secrets(conf: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """`conf` split into (public, secret) parts: the secret part goes to a 0600 properties file or to
    the running session, never to a command line."""
    public = {k: v for k, v in conf.items() if k not in S3A_SECRET_KEYS}
    return public, {k: v for k, v in conf.items() if k in S3A_SECRET_KEYS}


def with_executor_keys(conf: dict[str, str]) -> dict[str, str]:
    """`conf` with its S3 keys also in the executors' environment: for a Spark Connect server, whose
    clients read its keys back redacted and so cannot hand them to the executors' Arrow client as a
    spark-submit driver does (`executor_fs`)."""
    return {**conf, **{env: conf[key] for key, env in EXECUTOR_KEY_ENV.items() if conf.get(key)}}


def with_s3a_conf(conf: dict[str, str], s3a: dict[str, str]) -> dict[str, str]:
    """`conf` with the s3a settings added: its own class paths are kept (the s3a jars appended), and
    its other keys win (a task may tune any `fs.s3a.*` setting)."""
    if not s3a:
        return dict(conf)
    merged = {**s3a, **conf}
    for key in CLASS_PATH_KEYS:
        own = [entry for entry in conf.get(key, "").split(os.pathsep) if entry]
        added = [entry for entry in s3a.get(key, "").split(os.pathsep) if entry and entry not in own]
        if own or added:
            merged[key] = os.pathsep.join([*own, *added])
    return merged


def write_secret_properties(path: Path, secrets: dict[str, str]) -> Path:
    """Writes `secrets` as a Java properties file readable by its owner only (for `spark-submit
    --properties-file`): created with mode 0600, so no other user ever sees it, even partly written."""
    text = "".join(f"{_escaped(key)}={_escaped(value)}\n" for key, value in secrets.items())
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    return path


def _escaped(text: str) -> str:
    """`text` as a properties-file key or value (Java's escapes; a leading blank would be dropped)."""
    for char, escape in (("\\", "\\\\"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"), ("\f", "\\f")):
        text = text.replace(char, escape)
    text = text.replace("=", "\\=").replace(":", "\\:")
    return "\\" + text if text.startswith((" ", "#", "!")) else text


__all__ = [
    "CLASS_PATH_KEYS",
    "EXECUTOR_KEY_ENV",
    "HADOOP_VERSION",
    "S3A_SECRET_KEYS",
    "S3aJarsMissing",
    "jars_dir",
    "s3a_conf",
    "s3a_jars",
    "split_secrets",
    "with_executor_keys",
    "with_s3a_conf",
    "write_secret_properties",
]

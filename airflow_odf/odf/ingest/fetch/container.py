"""FetchStep::Container: an OCI image run with docker or podman, under the reference's env contract.

The container writes the data to stdout and, under the volume `/opt/odf/out`, its new state (ETag or
Last-Modified) and a "has more data" marker. It gets the previous state in `ODF_ETAG` /
`ODF_LAST_MODIFIED` and a batch size hint in `ODF_BATCH_SIZE`.

A Container step runs whatever image its manifest names, so it is refused unless the deployment allows
Container sources (`SourceTrust.allow_container_sources`). Even then the manifest only chooses what
runs inside the container: the image must be an image reference (never a runtime option such as
`--privileged`), and its variables may not change how the runtime itself runs on the host.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.model import FetchStepContainer, SourceState
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.fetch.types import (
    STATE_ETAG,
    STATE_LAST_MODIFIED,
    ContainerRuntimeError,
    FetchedFile,
    FetchError,
    FetchOptions,
    FetchResult,
    PollingState,
    make_state,
    up_to_date,
)
from airflow_odf.odf.ingest.processes import log_tail, run_to_files
from airflow_odf.odf.ingest.trust import CONTAINER_SOURCES_HINT

RUNTIMES = ("docker", "podman")
OUT_DIR = "/opt/odf/out"
DEFAULT_BATCH_SIZE = 10_000
_NEW_ETAG = "new-etag"
_NEW_LAST_MODIFIED = "new-last-modified"
_HAS_MORE_DATA = "has-more-data"

MAX_IMAGE_CHARS = 512
# docker's reference grammar (distribution/reference): [host[:port]/]path[:tag][@algorithm:hex]
_HOST_COMPONENT = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_HOST = rf"(?:{_HOST_COMPONENT}(?:\.{_HOST_COMPONENT})*|\[[0-9a-fA-F:]+\])"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::\w[\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
# Variables the runtime program (docker/podman, its Go runtime, the dynamic loader) reads on the host.
# The container's variables travel in the runtime's environment, so these keep the host's own values.
RUNTIME_VARIABLES = re.compile(
    r"(?i:(?:HTTPS?|NO|ALL|FTP)_PROXY)|PATH|HOME|TMPDIR|SHELL|ENV|BASH_ENV|IFS|GCONV_PATH|GLIBC_TUNABLES"
    r"|LOCPATH|NLSPATH|HOSTALIASES|RES_OPTIONS|LOCALDOMAIN|REGISTRY_AUTH_FILE|SSL_CERT_(?:FILE|DIR)"
    r"|GO(?:GC|MEMLIMIT|DEBUG|MAXPROCS|TRACEBACK|RACE|COVERDIR)"
    r"|(?:LD|DYLD|MALLOC|DOCKER|CONTAINERS?|PODMAN|BUILDAH|STORAGE|XDG)_\w*",
    re.ASCII,
)


class ContainerSource:
    """Runs the fetch image once per iteration; its stdout becomes the fetched file."""

    def __init__(self, step: FetchStepContainer, options: FetchOptions) -> None:
        if not options.trust.allow_container_sources:
            raise FetchError(
                f"fetch: Container source {step.image[:MAX_IMAGE_CHARS]!r} is disabled: a Container step "
                "runs whatever image its manifest names with the worker's docker/podman. For manifests you "
                f"trust, enable Container sources with {CONTAINER_SOURCES_HINT}"
            )
        _check_step(step)
        self._step = step
        self._options = options
        self._runtime: str | None = None

    def fetch(self, prev_state: SourceState | None, system_time: Timestamp) -> FetchResult:
        env = self._container_env(prev_state)
        argv_tail = self._image_argv()
        runtime = self._runtime or self._find_runtime()
        cache_dir = self._options.cache_dir
        cache_dir.mkdir(parents=True, exist_ok=True)
        out_dir = Path(tempfile.mkdtemp(prefix="fetch-container-", dir=cache_dir))
        data = out_dir.with_name(out_dir.name + ".out")
        stderr = out_dir.with_name(out_dir.name + ".err.txt")
        argv = [runtime, "run", "--rm", "-v", f"{out_dir}:{OUT_DIR}"]
        for name in env:
            argv += ["-e", name]  # values travel in the runtime's environment, not on its command line
        argv += argv_tail
        self._options.log(f"fetch.image: running {self._step.image} with {runtime}")
        try:
            self._run(argv, env, data, stderr)
            new_state = self._new_state(out_dir)
            result = self._result(prev_state, new_state, data, (out_dir / _HAS_MORE_DATA).exists())
        except BaseException:
            data.unlink(missing_ok=True)  # the stderr log stays for diagnosis
            raise
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)  # files a rootful engine created may stay behind
        stderr.unlink()
        return result

    def _run(self, argv: list[str], env: dict[str, str], data: Path, stderr: Path) -> None:
        try:
            code = run_to_files(argv, stdout=data, stderr=stderr, env={**os.environ, **env})
        except OSError as e:
            raise ContainerRuntimeError(f"fetch.image: cannot start {argv[0]}: {e.strerror}") from None
        if code != 0:
            raise ContainerRuntimeError(
                f"fetch.image: container {self._step.image} exited with code {code}; expected 0. "
                f"Its stderr (full log {stderr}):\n{log_tail(stderr)}",
                retryable=True,
            )

    def _result(
        self, prev_state: SourceState | None, new_state: SourceState | None, data: Path, has_more: bool
    ) -> FetchResult:
        size = data.stat().st_size
        if new_state is not None and new_state == prev_state and size:
            raise FetchError(
                f"fetch.image: container {self._step.image} wrote {size} bytes but kept the state "
                f"{new_state.kind}={new_state.value!r}; expected a new ETag/Last-Modified with new data "
                "(protocol error)"
            )
        if size == 0 and (new_state is None or new_state == prev_state):
            data.unlink()
            self._options.log(f"fetch.image: {self._step.image} has no new data")
            return up_to_date(prev_state)
        return FetchResult(files=[FetchedFile(data, None)], new_source_state=new_state, has_more=has_more)

    def _container_env(self, prev_state: SourceState | None) -> dict[str, str]:
        previous = PollingState.of(prev_state, "fetch")
        env = {
            "ODF_ETAG": previous.etag or "",
            "ODF_LAST_MODIFIED": previous.last_modified.isoformat() if previous.last_modified else "",
            "ODF_NEW_ETAG_PATH": f"{OUT_DIR}/{_NEW_ETAG}",
            "ODF_NEW_LAST_MODIFIED_PATH": f"{OUT_DIR}/{_NEW_LAST_MODIFIED}",
            "ODF_NEW_HAS_MORE_DATA_PATH": f"{OUT_DIR}/{_HAS_MORE_DATA}",
            "ODF_BATCH_SIZE": str(DEFAULT_BATCH_SIZE),
        }
        options = self._options
        for i, var in enumerate(self._step.env or []):
            where = f"fetch.env[{i}]"
            if var.value is not None:
                value = options.render(var.value, f"{where}.value")
            elif (passed := options.variable(var.name, where)) is not None:
                value = passed
            else:
                raise FetchError(
                    f"{where}: {var.name} has no value and is not set in the environment; "
                    "expected a `value` or the variable set for the ingest task"
                )
            if RUNTIME_VARIABLES.fullmatch(var.name) and value != os.environ.get(var.name):
                raise FetchError(
                    f"{where}: {var.name} is also read by the container runtime on this host, where a "
                    "manifest may not change it; expected it passed through unchanged (no `value`) or "
                    "left out"
                )
            env[var.name] = value
        return env

    def _image_argv(self) -> list[str]:
        """`[--entrypoint=cmd0] -- image cmd1.. args..`: `command` replaces ENTRYPOINT, `args` replaces CMD.

        `--` ends the runtime's options, so nothing of the manifest's is read as one."""
        render = self._options.render
        command = [render(c, f"fetch.command[{i}]") for i, c in enumerate(self._step.command or [])]
        args = [render(a, f"fetch.args[{i}]") for i, a in enumerate(self._step.args or [])]
        if command and not command[0]:
            raise FetchError("fetch.command[0]: is empty; expected the program that replaces ENTRYPOINT")
        entrypoint = [f"--entrypoint={command[0]}"] if command else []
        return [*entrypoint, "--", self._step.image, *command[1:], *args]

    def _find_runtime(self) -> str:
        problems = []
        for name in RUNTIMES:
            binary = shutil.which(name)
            if binary is None:
                problems.append(f"{name}: not found on PATH")
                continue
            try:
                info = subprocess.run(
                    [binary, "info"], capture_output=True, timeout=self._options.timeout, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as e:
                problems.append(f"{name} ({binary}): `{name} info` failed: {e}")
                continue
            if info.returncode == 0:
                self._runtime = binary
                return binary
            reason = info.stderr.decode("utf-8", errors="replace").strip()[-500:]
            problems.append(f"{name} ({binary}): `{name} info` exited with code {info.returncode}: {reason}")
        raise ContainerRuntimeError(
            f"fetch.image: running {self._step.image} needs a working docker or podman engine; "
            + "; ".join(problems)
            + ". Install one and start its engine (`docker info` must succeed for the Airflow worker's user)."
        )

    def _new_state(self, out_dir: Path) -> SourceState | None:
        etag, last_modified = out_dir / _NEW_ETAG, out_dir / _NEW_LAST_MODIFIED
        if etag.exists():
            return make_state(STATE_ETAG, etag.read_text(encoding="utf-8").strip())
        if not last_modified.exists():
            return None
        text = last_modified.read_text(encoding="utf-8").strip()
        try:
            return make_state(STATE_LAST_MODIFIED, Timestamp.parse(text).isoformat())
        except OdfFormatError as e:
            raise FetchError(
                f"fetch.image: container {self._step.image} wrote {text!r} to ODF_NEW_LAST_MODIFIED_PATH; "
                f"expected an RFC 3339 timestamp: {e}"
            ) from None


def _check_step(step: FetchStepContainer) -> None:
    """The image is an image reference and the variable names are names: neither can become an option
    of the runtime's command line (`--privileged`, `-v /:/host`) nor set a value on it (`NAME=value`)."""
    image = step.image
    if len(image) > MAX_IMAGE_CHARS or not IMAGE_REFERENCE.fullmatch(image):
        raise FetchError(
            f"fetch.image: {image[:MAX_IMAGE_CHARS]!r} is not an image reference; expected "
            "[registry[:port]/]name[:tag][@digest] (lowercase name, e.g. ghcr.io/acme/fetch:1.0)"
        )
    for i, var in enumerate(step.env or []):
        if not ENV_NAME.fullmatch(var.name):
            raise FetchError(
                f"fetch.env[{i}].name: {var.name[:100]!r} is not a variable name; expected letters, digits "
                "and _ (not starting with a digit)"
            )

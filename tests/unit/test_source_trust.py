"""What a hostile source manifest may not do (issue 23 points 1-3): run containers or options of the
container runtime, read the worker's environment through templates, read local files outside the
allowed directories. Each test states the attack; the settings that allow more are tested last."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from airflow_odf.odf.format.model import (
    EnvVar,
    FetchStepContainer,
    FetchStepFilesGlob,
    FetchStepUrl,
    RequestHeader,
)
from airflow_odf.odf.ingest.fetch.fetcher import FetchError, FetchOptions, SourceFetcher
from airflow_odf.odf.ingest.fetch.templating import TemplateError
from airflow_odf.odf.ingest.source_check import check_source
from airflow_odf.odf.repo.repository import Repository
from tests.unit import test_fetch
from tests.unit.test_fetch import FETCHER, SYSTEM_TIME, Route, Server, executable
from tests.unit.test_source_check import root

server = test_fetch.server  # an HTTP server on 127.0.0.1
fake_docker = test_fetch.fake_docker  # a `docker` on PATH that logs its command lines

TRUST_VARIABLES = (
    "ODF_ALLOW_SHELL_STEPS",
    "ODF_ALLOW_CONTAINER_SOURCES",
    "ODF_TEMPLATE_ENV_ALLOW",
    "ODF_LOCAL_SOURCE_DIRS",
)


@pytest.fixture(autouse=True)
def default_trust(monkeypatch: pytest.MonkeyPatch) -> None:
    """The safe defaults: none of the trust variables set on the machine running the tests."""
    for name in TRUST_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def fetch(step: object, tmp_path: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    options = FetchOptions(cache_dir=tmp_path / "cache", log=lambda _line: None, **kwargs)  # type: ignore[arg-type]
    return SourceFetcher(step, options).fetch(None, SYSTEM_TIME)  # type: ignore[arg-type]


def docker_calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# ------------------------------------------------------------------------------------------------
# 1. Container sources
# ------------------------------------------------------------------------------------------------


def fetcher_step(tmp_path: Path, **kwargs: object) -> FetchStepContainer:
    script = executable(tmp_path / "fetcher.py", FETCHER)
    fields: dict[str, object] = {
        "image": "ghcr.io/example/fetcher:1",
        "command": [str(script)],
        "args": ["pages"],
        "env": [EnvVar(name="GREETING", value="hi")],
    }
    return FetchStepContainer(**{**fields, **kwargs})  # type: ignore[arg-type]


def test_container_sources_are_off_by_default(tmp_path: Path, fake_docker: Path) -> None:
    with pytest.raises(FetchError) as e:
        fetch(fetcher_step(tmp_path), tmp_path)
    message = str(e.value)
    assert message.startswith("fetch: Container source 'ghcr.io/example/fetcher:1' is disabled")
    assert "ODF_ALLOW_CONTAINER_SOURCES=1" in message and "allow_container_sources" in message
    assert docker_calls(fake_docker) == []  # not even `docker info`


def test_the_sensor_check_refuses_a_disallowed_container_source(tmp_path: Path) -> None:
    dataset = root(tmp_path, FetchStepContainer(image="example/fetch:1"))
    with pytest.raises(FetchError, match=r"Container source 'example/fetch:1' is disabled"):
        check_source(dataset, "feed")


@pytest.mark.parametrize(
    "image",
    [
        "--privileged",
        "-v",
        "--volume=/:/host",
        "alpine --privileged",
        "alpine\n--privileged",
        "Alpine",  # a repository name is lowercase
        "alpine:",
        "alpine:1:2",
        "alpine@sha256:abc",
        "",
        "a" * 600,
    ],
)
def test_an_image_that_is_not_an_image_reference_is_refused(
    tmp_path: Path, fake_docker: Path, monkeypatch: pytest.MonkeyPatch, image: str
) -> None:
    """The attack: `image: --privileged` with `args: [-v, /:/host, alpine, cat, /host/etc/shadow]`
    made docker options of the manifest's values, and the host's shadow file the ingested data."""
    monkeypatch.setenv("ODF_ALLOW_CONTAINER_SOURCES", "1")
    step = fetcher_step(
        tmp_path, image=image, command=None, args=["-v", "/:/host", "alpine", "cat", "/etc/shadow"]
    )
    with pytest.raises(FetchError, match=r"^fetch.image: .* is not an image reference; expected"):
        fetch(step, tmp_path)
    assert docker_calls(fake_docker) == []


@pytest.mark.parametrize(
    "image",
    [
        "alpine",
        "alpine:3.20",
        "library/alpine:latest",
        "ghcr.io/kamu-data/fetch-com.github.stats:0.1.0",
        "localhost:5000/team/fetch_x__y:v1.2-rc",
        "[::1]:5000/fetch:1",
        "alpine@sha256:" + "a" * 64,
        "registry.example.org/a/b/c:1@sha256:" + "0" * 64,
    ],
)
def test_image_references_run_after_the_end_of_the_runtime_options(
    tmp_path: Path, fake_docker: Path, monkeypatch: pytest.MonkeyPatch, image: str
) -> None:
    monkeypatch.setenv("ODF_ALLOW_CONTAINER_SOURCES", "1")
    result = fetch(fetcher_step(tmp_path, image=image, args=["--privileged"]), tmp_path)
    assert result.files[0].path.read_text().startswith("1,0,hi\n")
    run = docker_calls(fake_docker)[1]
    # `--` ends docker's options: the image and everything after it are the container's, not docker's
    assert run[run.index("--") :] == ["--", image, "--privileged"]
    assert f"--entrypoint={tmp_path / 'fetcher.py'}" in run  # one argument: never read as an option


@pytest.mark.parametrize(
    "env, message",
    [
        (EnvVar(name="A=B", value="x"), r"^fetch.env\[0\].name: 'A=B' is not a variable name"),
        (EnvVar(name="--privileged", value="x"), r"^fetch.env\[0\].name: '--privileged' is not a variable"),
        (EnvVar(name="LD_PRELOAD", value="/tmp/evil.so"), r"^fetch.env\[0\]: LD_PRELOAD is also read by the"),
        (
            EnvVar(name="DOCKER_HOST", value="tcp://evil:2375"),
            r"^fetch.env\[0\]: DOCKER_HOST is also read by",
        ),
        (EnvVar(name="https_proxy", value="http://evil:3128"), r"^fetch.env\[0\]: https_proxy is also read"),
    ],
)
def test_container_variables_cannot_reach_the_runtime(
    tmp_path: Path, fake_docker: Path, monkeypatch: pytest.MonkeyPatch, env: EnvVar, message: str
) -> None:
    """The variables travel in docker's own environment (`-e NAME`): a manifest may not give docker a
    new DOCKER_HOST or LD_PRELOAD, nor smuggle `NAME=value` onto its command line."""
    monkeypatch.setenv("ODF_ALLOW_CONTAINER_SOURCES", "1")
    monkeypatch.delenv("https_proxy", raising=False)
    with pytest.raises(FetchError, match=message):
        fetch(fetcher_step(tmp_path, env=[env]), tmp_path)
    assert [c for c in docker_calls(fake_docker) if c[0] == "run"] == []


# ------------------------------------------------------------------------------------------------
# 2. Templates read only allowed variables
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "step_of",
    [
        lambda url: FetchStepUrl(url=url("/data?k=${{ env.AIRFLOW__CORE__FERNET_KEY }}")),
        lambda url: FetchStepUrl(url=url("/data?k=${{ env.AIRFLOW__CORE__FERNET_KEY || 'none' }}")),
        lambda url: FetchStepUrl(
            url=url("/data"),
            headers=[RequestHeader(name="X-Key", value="${{ env.AIRFLOW__CORE__FERNET_KEY }}")],
        ),
    ],
    ids=["url", "url-with-default", "header"],
)
def test_a_template_cannot_send_a_worker_secret(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step_of: object
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "s3cret-fernet")
    server.routes["/data"] = Route(body=b"a\n1\n", headers={"ETag": "1"}, honour_conditions=False)
    with pytest.raises(FetchError) as e:
        fetch(step_of(server.url), tmp_path)  # type: ignore[operator]
    message = str(e.value)
    assert "environment variable AIRFLOW__CORE__FERNET_KEY may not be read by a manifest" in message
    assert "allowed: ODF_*" in message and "ODF_TEMPLATE_ENV_ALLOW" in message
    assert "s3cret" not in message
    assert server.requests == []  # nothing left the worker


def test_a_container_cannot_pass_through_a_worker_secret(
    tmp_path: Path, fake_docker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ODF_ALLOW_CONTAINER_SOURCES", "1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret-aws")
    for env, args in (
        ([EnvVar(name="AWS_SECRET_ACCESS_KEY")], ["pages"]),
        ([EnvVar(name="GREETING", value="${{ env.AWS_SECRET_ACCESS_KEY }}")], ["pages"]),
        ([EnvVar(name="GREETING", value="hi")], ["${{ env.AWS_SECRET_ACCESS_KEY }}"]),
    ):
        with pytest.raises(FetchError, match=r"AWS_SECRET_ACCESS_KEY may not be read by a manifest"):
            fetch(fetcher_step(tmp_path, env=env, args=args), tmp_path)
    assert [c for c in docker_calls(fake_docker) if c[0] == "run"] == []


def test_the_sensor_check_reads_only_allowed_variables(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret-aws")
    dataset = root(tmp_path, FetchStepUrl(url=server.url("/p?k=${{ env.AWS_SECRET_ACCESS_KEY }}")))
    with pytest.raises(TemplateError, match=r"AWS_SECRET_ACCESS_KEY may not be read by a manifest"):
        check_source(dataset, "prices")
    assert server.requests == []


def test_allowed_variables_and_prefixes(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes["/p?t=tok&r=eu&d=dflt"] = Route(body=b"ok", headers={"ETag": "1"})
    monkeypatch.setenv("ODF_TEMPLATE_ENV_ALLOW", "RATES_*, TOKEN")
    monkeypatch.setenv("TOKEN", "tok")
    monkeypatch.setenv("RATES_REGION", "eu")
    step = FetchStepUrl(
        url=server.url("/p?t=${{ env.TOKEN }}&r=${{ env.RATES_REGION }}&d=${{ env.RATES_X || 'dflt' }}")
    )
    assert fetch(step, tmp_path).files[0].path.read_bytes() == b"ok"
    # the list replaces the default: ODF_* is no longer allowed
    with pytest.raises(FetchError, match=r"ODF_X may not be read by a manifest \(allowed: RATES_\*, TOKEN\)"):
        fetch(FetchStepUrl(url=server.url("/p?${{ env.ODF_X || '' }}")), tmp_path)
    # a caller's own mapping is the caller's choice
    assert fetch(step, tmp_path, env={"TOKEN": "tok", "RATES_REGION": "eu"}).files


# ------------------------------------------------------------------------------------------------
# 3. Local sources only in allowed directories
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    """`landing/` (the task's source_dir, so the allowed directory) next to `outside/secret.csv`."""
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "ok.csv").write_text("a\n1\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.csv").write_text("password\nhunter2\n")
    return tmp_path / "landing"


@pytest.mark.parametrize(
    "where",
    [
        "outside/secret.csv",
        "landing/../outside/secret.csv",
        "landing/link-to-secret.csv",
        "landing/linked-dir/secret.csv",
    ],
)
def test_a_file_url_outside_the_allowed_directories_is_refused(landing: Path, where: str) -> None:
    (landing / "link-to-secret.csv").symlink_to(landing.parent / "outside" / "secret.csv")
    (landing / "linked-dir").symlink_to(landing.parent / "outside")
    path = f"{landing.parent}/{where}"
    with pytest.raises(FetchError) as e:
        fetch(FetchStepUrl(url=f"file://{path}"), landing.parent, base_dir=landing)
    message = str(e.value)
    assert message.startswith(f"fetch.url: {path}")
    assert (
        "'..'" in message
        if ".." in where
        else f"is outside the directories local sources may read ({landing})" in message
    )
    assert ".." in where or "ODF_LOCAL_SOURCE_DIRS" in message


def test_system_files_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the CLI's default: the working directory
    for url in ("file:///etc/passwd", "file:///proc/self/environ"):
        with pytest.raises(FetchError, match=rf"^fetch.url: {url[7:]}( \(resolves to .*\))? is outside the"):
            fetch(FetchStepUrl(url=url), tmp_path)
    with pytest.raises(FetchError, match=r"^fetch.path: /etc is outside the directories"):
        fetch(FetchStepFilesGlob(path="/etc/*passw*"), tmp_path)


@pytest.mark.parametrize(
    "pattern, refused",
    [
        ("{outside}/*.csv", "{outside}"),
        ("../outside/*.csv", None),
        ("*/../../outside/*.csv", None),
        ("linked-dir/*.csv", "{landing}/linked-dir"),
        ("**/*.csv", "{landing}/link-to-secret.csv"),
        ("*.csv", "{landing}/link-to-secret.csv"),
    ],
)
def test_a_glob_never_lists_or_reads_outside(
    landing: Path, monkeypatch: pytest.MonkeyPatch, pattern: str, refused: str | None
) -> None:
    (landing / "link-to-secret.csv").symlink_to(landing.parent / "outside" / "secret.csv")
    (landing / "linked-dir").symlink_to(landing.parent / "outside")
    listed: list[str] = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda p: listed.append(os.path.realpath(p)) or real_scandir(p))
    names = {"outside": landing.parent / "outside", "landing": landing}
    step = FetchStepFilesGlob(path=pattern.format(**names))
    with pytest.raises(FetchError) as e:
        fetch(step, landing.parent, base_dir=landing)
    message = str(e.value)
    if refused is None:
        assert "contains '..'" in message and listed == []
    else:
        assert message.startswith(f"fetch.path: {refused.format(**names)}")
        assert f"outside the directories local sources may read ({landing})" in message
    assert all(Path(d).is_relative_to(landing) for d in listed), listed


def test_a_glob_does_not_follow_link_loops(landing: Path) -> None:
    """`**` does not enter linked directories: with `sub/up -> landing`, `**/**/**/*.csv` once listed
    an exponential number of paths (gigabytes of memory)."""
    (landing / "sub").mkdir()
    (landing / "sub" / "b.csv").write_text("a\n2\n")
    (landing / "sub" / "up").symlink_to(landing)
    (landing / "sub" / "up2").symlink_to(landing / "sub")
    step = FetchStepFilesGlob(path="**/**/**/**/**/**/*.csv")
    files = fetch(step, landing.parent, base_dir=landing, files_per_batch=100).files
    assert sorted(f.path.relative_to(landing).as_posix() for f in files) == ["ok.csv", "sub/b.csv"]
    # a link named by the pattern itself is followed (it stays inside)
    step = FetchStepFilesGlob(path="sub/up/*.csv")
    assert [f.path.name for f in fetch(step, landing.parent, base_dir=landing).files] == ["ok.csv"]


def test_the_sensor_check_reads_only_allowed_directories(landing: Path) -> None:
    dataset = root(landing.parent, FetchStepFilesGlob(path=str(landing.parent / "outside" / "*.csv")))
    with pytest.raises(FetchError, match=r"is outside the directories local sources may read"):
        check_source(dataset, "secrets", source_dir=landing)
    dataset = root(
        landing.parent / "2", FetchStepUrl(url=(landing.parent / "outside" / "secret.csv").as_uri())
    )
    with pytest.raises(FetchError, match=r"is outside the directories local sources may read"):
        check_source(dataset, "secrets", source_dir=landing)


def test_allowed_directories(landing: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = landing.parent / "outside"
    assert fetch(FetchStepFilesGlob(path="*.csv"), landing.parent, base_dir=landing).files[0].name == "ok.csv"
    monkeypatch.setenv("ODF_LOCAL_SOURCE_DIRS", f"{landing}{os.pathsep}{outside}")
    (landing / "link.csv").symlink_to(outside / "secret.csv")
    [first, second] = fetch(
        FetchStepFilesGlob(path="*.csv"), landing.parent, base_dir=landing, files_per_batch=2
    ).files
    assert (first.name, first.path) == ("link.csv", outside / "secret.csv")  # the engine reads the real path
    assert (second.name, second.path) == ("ok.csv", landing / "ok.csv")
    # the setting replaces the default (source_dir)
    monkeypatch.setenv("ODF_LOCAL_SOURCE_DIRS", str(outside))
    with pytest.raises(FetchError, match=rf"{landing}/ok.csv is outside the directories .*\({outside}\)"):
        fetch(FetchStepUrl(url=(landing / "ok.csv").as_uri()), landing.parent, base_dir=landing)


def test_odf_pull_refuses_a_source_outside_its_roots(
    landing: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`odf pull` reads local sources below the working directory unless `--source-root` says more."""
    from airflow_odf.cli.main import main

    repo = landing.parent / "repo"
    manifest = landing.parent / "secrets.yaml"
    manifest.write_text(
        "kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: secrets\n  kind: Root\n  metadata:\n"
        "    - kind: SetPollingSource\n      fetch:\n        kind: FilesGlob\n"
        f"        path: {landing.parent}/outside/*.csv\n"
        "      read:\n        kind: Csv\n      merge:\n        kind: Append\n"
    )
    assert main(["init", "--repo", str(repo)]) == 0
    assert main(["add", "--repo", str(repo), str(manifest)]) == 0
    head = Repository.open(repo).dataset("secrets").head()
    monkeypatch.chdir(landing)
    capsys.readouterr()
    assert main(["pull", "--repo", str(repo), "secrets"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f"fetch.path: {landing.parent}/outside is outside the directories local sources may read" in line
    assert f"({landing})" in line and "--source-root DIR" in line
    assert Repository.open(repo).dataset("secrets").head() == head

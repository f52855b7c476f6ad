"""Prepare steps on real archives and a real subprocess."""

from __future__ import annotations

import gzip
import sys
import zipfile
from pathlib import Path

import pytest

from airflow_odf.odf.format.model import CompressionFormat, PrepStepDecompress, PrepStepPipe
from airflow_odf.odf.ingest.prepare import PrepareError, prepare

GZIP = PrepStepDecompress(format=CompressionFormat.GZIP)
ZIP = PrepStepDecompress(format=CompressionFormat.ZIP)
CSV = b"city,population\nVancouver,675218\nToronto,2794356\n"


def write_zip(path: Path, entries: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(zipfile.ZipInfo(name), data)
    return path


def test_no_steps_returns_the_source(tmp_path: Path) -> None:
    source = tmp_path / "data.csv"
    source.write_bytes(CSV)
    assert prepare([], source, tmp_path / "work") == source


def test_gzip_streams_all_members(tmp_path: Path) -> None:
    source = tmp_path / "data.csv.gz"
    source.write_bytes(gzip.compress(CSV[:20]) + gzip.compress(CSV[20:]))
    result = prepare([GZIP], source, tmp_path / "work")
    assert result.parent == tmp_path / "work" and result.read_bytes() == CSV


def test_gzip_of_non_gzip_data(tmp_path: Path) -> None:
    source = tmp_path / "data.csv.gz"
    source.write_bytes(CSV)
    with pytest.raises(PrepareError, match=rf"^prepare\[0\]: {source} is not a valid gzip file"):
        prepare([GZIP], source, tmp_path / "work")
    assert list((tmp_path / "work").iterdir()) == []  # no partial output left behind


def test_zip_takes_the_first_file_entry_by_default(tmp_path: Path) -> None:
    source = write_zip(tmp_path / "a.zip", {"dir/": b"", "dir/first.csv": CSV, "second.csv": b"x"})
    assert prepare([ZIP], source, tmp_path / "work").read_bytes() == CSV


@pytest.mark.parametrize(
    "sub_path, expected",
    [
        ("second.csv", b"2"),
        ("dir/*.csv", b"1"),
        ("*.json", b"3"),
        ("dir/[f]irst.csv", b"1"),
        ("a[1].csv", b"4"),
    ],
)
def test_zip_sub_path_exact_or_glob(tmp_path: Path, sub_path: str, expected: bytes) -> None:
    entries = {"dir/first.csv": b"1", "second.csv": b"2", "meta.json": b"3", "a[1].csv": b"4"}
    source = write_zip(tmp_path / "a.zip", entries)
    step = PrepStepDecompress(format=CompressionFormat.ZIP, sub_path=sub_path)
    assert prepare([step], source, tmp_path / "work").read_bytes() == expected


def test_zip_sub_path_without_match_names_the_step_and_lists_entries(tmp_path: Path) -> None:
    archive = write_zip(tmp_path / "a.zip", {"one.csv": b"1", "two.csv": b"2"})
    source = tmp_path / "a.zip.gz"
    source.write_bytes(gzip.compress(archive.read_bytes()))
    step = PrepStepDecompress(format=CompressionFormat.ZIP, sub_path="three.csv")
    with pytest.raises(PrepareError) as e:
        prepare([GZIP, step], source, tmp_path / "work")
    [unzipped_input] = (tmp_path / "work").iterdir()  # the gunzipped archive; no partial output
    assert str(e.value) == (
        f"prepare[1].subPath: no entry of {unzipped_input} matches 'three.csv'; entries: one.csv, two.csv"
    )


@pytest.mark.parametrize("name", ["../evil.csv", "/etc/evil.csv", "ok/../../evil.csv", "C:\\evil.csv"])
def test_zip_refuses_unsafe_entry_names(tmp_path: Path, name: str) -> None:
    source = write_zip(tmp_path / "a.zip", {name: b"evil"})
    with pytest.raises(
        PrepareError, match=r"^prepare\[0\]\.subPath: refusing entry .* expected a relative name"
    ):
        prepare([ZIP], source, tmp_path / "work")
    assert not (tmp_path / "evil.csv").exists()


def test_zip_of_non_zip_data(tmp_path: Path) -> None:
    source = tmp_path / "a.zip"
    source.write_bytes(CSV)
    with pytest.raises(
        PrepareError, match=r"^prepare\[0\]: cannot extract from .*a.zip: File is not a zip file"
    ):
        prepare([ZIP], source, tmp_path / "work")


def test_pipe_is_disabled_unless_shell_steps_are_allowed(tmp_path: Path) -> None:
    source = tmp_path / "data.csv"
    source.write_bytes(CSV)
    with pytest.raises(PrepareError) as e:
        prepare([PrepStepPipe(command=["sed", "-e", "1d"])], source, tmp_path / "work")
    message = str(e.value)
    assert message.startswith("prepare[0]: Pipe step 'sed -e 1d' is disabled")
    assert "ODF_ALLOW_SHELL_STEPS=1" in message and "allow_shell=True" in message


def test_steps_chain_zip_gzip_pipe(tmp_path: Path) -> None:
    source = write_zip(
        tmp_path / "bundle.zip", {"readme.txt": b"hi", "data/cities.csv.gz": gzip.compress(CSV)}
    )
    upper = [sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read().upper())"]
    steps = [
        PrepStepDecompress(format=CompressionFormat.ZIP, sub_path="data/*.gz"),
        GZIP,
        PrepStepPipe(command=upper),
    ]
    result = prepare(steps, source, tmp_path / "work", allow_shell=True)
    assert result.read_bytes() == CSV.upper()
    assert result.name.startswith("prepare-2-pipe-")


def test_pipe_failure_reports_exit_code_and_stderr(tmp_path: Path) -> None:
    source = tmp_path / "data.csv"
    source.write_bytes(CSV)
    fail = [sys.executable, "-c", "import sys; sys.stderr.write('bad input on line 3\\n'); sys.exit(4)"]
    with pytest.raises(PrepareError) as e:
        prepare([PrepStepPipe(command=fail)], source, tmp_path / "work", allow_shell=True)
    message = str(e.value)
    assert message.startswith("prepare[0]: command ") and "exited with code 4" in message
    assert message.endswith("bad input on line 3")


def test_pipe_with_unknown_program(tmp_path: Path) -> None:
    source = tmp_path / "data.csv"
    source.write_bytes(CSV)
    with pytest.raises(PrepareError, match=r"^prepare\[0\]\.command: cannot run 'no-such-program-odf'"):
        prepare([PrepStepPipe(command=["no-such-program-odf"])], source, tmp_path / "work", allow_shell=True)


def test_missing_input_file(tmp_path: Path) -> None:
    with pytest.raises(PrepareError, match=r"^prepare\[0\]: input file .*gone.gz does not exist"):
        prepare([GZIP], tmp_path / "gone.gz", tmp_path / "work")

"""The `odf` command end to end, as a subprocess, against the conformance vectors and real manifests.

The vectors are the repository's copy (tests/conformance/data/blocks); the real manifests are read from
the shared folder, and the tests that need them are skipped when it is absent (tests/paths.py).
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_odf.odf.errors import BlockDecodeError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import decode_block, encode_block, encode_table
from airflow_odf.odf.format.manifests import load_manifests, manifest_to_plain, read_single
from airflow_odf.odf.format.timestamps import Timestamp
from tests.paths import CONFORMANCE_BLOCKS as BLOCKS
from tests.paths import SQL_REFUSED_UPSTREAM, UPSTREAM, needs_upstream, upstream_manifests

ODF = Path(sys.executable).parent / "odf"


def _cases() -> list[dict]:
    return json.loads((BLOCKS / "cases.json").read_text(encoding="utf-8"))


CASES = _cases()
CASE_IDS = [c["name"] for c in CASES]


def odf(*args: str | Path, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(ODF), *map(str, args)], capture_output=True, text=True, timeout=120)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def assert_one_line_error(proc: subprocess.CompletedProcess[str], path: Path | str, phrase: str = "") -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{path}: "), proc.stderr
    assert phrase in lines[0], proc.stderr


def test_vectors_are_present():
    assert ODF.is_file()
    assert len(CASES) >= 7
    for case in CASES:
        for suffix in ("v2.bin", "v3.bin"):
            assert (BLOCKS / f"{case['name']}.{suffix}").is_file()
        assert (BLOCKS / case["manifest"]).is_file()


# --------------------------------------------------------------------------------------------------
# odf block encode / decode / hash on the conformance vectors
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_encode_writes_the_conformance_bytes(case: dict, tmp_path: Path):
    out = tmp_path / "block.bin"
    proc = odf("block", "encode", BLOCKS / case["manifest"], "-o", out)
    assert proc.stdout == case["block_hash_v3"] + "\n"
    assert proc.stderr == ""
    data = out.read_bytes()
    assert data == (BLOCKS / f"{case['name']}.v3.bin").read_bytes()
    assert len(data) == case["size_v3"]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_encode_without_output_prints_only_the_hash(case: dict, tmp_path: Path):
    proc = odf("block", "encode", BLOCKS / case["manifest"])
    assert proc.stdout.splitlines() == [case["block_hash_v3"]]


@pytest.mark.parametrize("version", ["v2", "v3"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_decode_prints_yaml_that_re_encodes_to_the_v3_hash(case: dict, version: str, tmp_path: Path):
    src = BLOCKS / f"{case['name']}.{version}.bin"
    proc = odf("block", "decode", src)
    assert proc.stderr == ""
    manifest = tmp_path / "decoded.yaml"
    manifest.write_text(proc.stdout, encoding="utf-8")
    (m,) = load_manifests(proc.stdout)
    assert (m.kind, m.version) == ("MetadataBlock", 3)
    assert m.content == read_single(BLOCKS / case["manifest"], "MetadataBlock")
    out = tmp_path / "re-encoded.bin"
    proc = odf("block", "encode", manifest, "-o", out)
    assert proc.stdout.strip() == case["block_hash_v3"]
    assert out.read_bytes() == (BLOCKS / f"{case['name']}.v3.bin").read_bytes()


@pytest.mark.parametrize("version", ["v2", "v3"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_decode_json_has_the_same_content(case: dict, version: str):
    src = BLOCKS / f"{case['name']}.{version}.bin"
    as_json = odf("block", "decode", src, "--format", "json").stdout
    as_yaml = odf("block", "decode", src, "--format", "yaml").stdout
    data = json.loads(as_json)
    assert data["kind"] == "MetadataBlock"
    assert data["version"] == 3
    assert data == manifest_to_plain(decode_block(src.read_bytes()))
    assert load_manifests(as_json)[0].content == load_manifests(as_yaml)[0].content
    assert data["content"]["systemTime"] == str(decode_block(src.read_bytes()).system_time)


@pytest.mark.parametrize("version", ["v2", "v3"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_hash_prints_the_file_hash(case: dict, version: str):
    proc = odf("block", "hash", BLOCKS / f"{case['name']}.{version}.bin")
    assert proc.stdout == case[f"block_hash_{version}"] + "\n"
    assert proc.stderr == ""


def test_v2_and_v3_decode_identically():
    for case in CASES:
        v2 = odf("block", "decode", BLOCKS / f"{case['name']}.v2.bin").stdout
        v3 = odf("block", "decode", BLOCKS / f"{case['name']}.v3.bin").stdout
        assert v2 == v3


# --------------------------------------------------------------------------------------------------
# Bad input: exit 2, one line naming the file, no traceback
# --------------------------------------------------------------------------------------------------


def _v3(name: str = "stability_3_adddata_slice") -> bytes:
    return (BLOCKS / f"{name}.v3.bin").read_bytes()


def _set_union_type(data: bytes, type_id: int) -> bytes:
    block = decode_block(data)
    assert isinstance(block.event, model.SetInfo)
    # the event type byte of the setinfo vector sits at +0x1f of the content (FORMAT-NOTES B.5)
    content_start = 0x30
    pos = content_start + 0x1F
    assert data[pos] == 8
    return data[:pos] + bytes([type_id]) + data[pos + 1 :]


def _with_content_length(data: bytes, length: int) -> bytes:
    """The outer Manifest's `content` vector is written first, so it ends the file: patch its length."""
    (pos,) = [
        p for p in range(0, len(data) - 4, 4) if struct.unpack_from("<I", data, p)[0] == len(data) - p - 4
    ]
    return data[:pos] + struct.pack("<I", length) + data[pos + 4 :]


CORRUPT = {
    "truncated": lambda: _v3()[:-10],
    "truncated-to-header": lambda: _v3()[:8],
    "content-length-too-big": lambda: _with_content_length(_v3(), len(_v3())),
    "content-length-too-small": lambda: _with_content_length(_v3(), 7),
    "unknown-event-type": lambda: _set_union_type(_v3("repo_create_block_setinfo"), 99),
    "wrong-manifest-version": lambda: _v3().replace(struct.pack("<i", 3), struct.pack("<i", 1), 1),
    "zero-bytes": lambda: b"\0" * 64,
    "random-bytes": lambda: bytes(range(256)) * 3,
    "empty-file": lambda: b"",
    "yaml-text": lambda: (BLOCKS / "repo_create_block_setinfo.yaml").read_bytes(),
    "other-flatbuffer": lambda: encode_table(model.SetInfo(description="not a block")),
}


@pytest.mark.parametrize("make", CORRUPT.values(), ids=CORRUPT.keys())
@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_decode_of_a_bad_file_is_one_line(make, fmt: str, tmp_path: Path):
    path = tmp_path / "bad.bin"
    path.write_bytes(make())
    with pytest.raises(BlockDecodeError):
        decode_block(path.read_bytes())
    assert_one_line_error(odf("block", "decode", path, "--format", fmt, check=None), path)


def test_decode_of_a_non_block_flatbuffer_names_the_kind(tmp_path: Path):
    path = tmp_path / "x.bin"
    path.write_bytes(encode_table(model.SetInfo(description="not a block")))
    assert_one_line_error(odf("block", "decode", path, check=None), path, "not a metadata block")


def test_decode_of_an_unknown_event_type_names_the_field(tmp_path: Path):
    path = tmp_path / "x.bin"
    path.write_bytes(_set_union_type(_v3("repo_create_block_setinfo"), 99))
    assert_one_line_error(
        odf("block", "decode", path, check=None), path, "event: unknown MetadataEvent type id 99"
    )


def test_decode_of_version_1_is_refused(tmp_path: Path):
    path = tmp_path / "x.bin"
    path.write_bytes(_v3().replace(struct.pack("<i", 3), struct.pack("<i", 1), 1))
    assert_one_line_error(odf("block", "decode", path, check=None), path, "unsupported block version 1")


@pytest.mark.parametrize("command", ["decode", "hash"])
def test_missing_file(command: str, tmp_path: Path):
    path = tmp_path / "nope.bin"
    assert_one_line_error(odf("block", command, path, check=None), path, "cannot read file")


@pytest.mark.parametrize("command", ["decode", "hash"])
def test_directory_instead_of_file(command: str, tmp_path: Path):
    assert_one_line_error(odf("block", command, tmp_path, check=None), tmp_path, "cannot read file")


def test_encode_of_a_missing_manifest(tmp_path: Path):
    path = tmp_path / "nope.yaml"
    assert_one_line_error(odf("block", "encode", path, check=None), path, "cannot read file")


def test_encode_of_an_invalid_manifest_lists_every_problem(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "kind: MetadataBlock\nversion: 3\ncontent:\n  systemTime: yesterday\n  sequenceNumber: -1\n"
        "  event: {kind: SetInfo, keywords: [1]}\n",
        encoding="utf-8",
    )
    proc = odf("block", "encode", path, "-o", tmp_path / "out.bin", check=2)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        "content.systemTime",
        "content.sequenceNumber",
        "content.event.keywords[0]",
    ]
    assert all(line.startswith(f"{path}: ") for line in lines)
    assert not (tmp_path / "out.bin").exists()


@needs_upstream
def test_encode_of_a_snapshot_manifest_is_refused(tmp_path: Path):
    src = UPSTREAM / "kamu-contrib" / "testing" / "testing.empty-root.yaml"
    assert_one_line_error(odf("block", "encode", src, check=None), src, "expected one MetadataBlock manifest")


def test_encode_to_an_unwritable_output(tmp_path: Path):
    out = tmp_path / "no-such-dir" / "block.bin"
    proc = odf("block", "encode", BLOCKS / "repo_create_block_setinfo.yaml", "-o", out, check=None)
    assert_one_line_error(proc, out)


def test_decode_of_an_out_of_range_timestamp(tmp_path: Path):
    """Day 366 of 9999 would be year 10000, which no RFC 3339 text can show: refused at decode."""
    data = encode_block(
        model.MetadataBlock(
            system_time=Timestamp.parse("9999-12-31T00:00:00Z"),
            sequence_number=1,
            event=model.SetInfo(description="d"),
        )
    )
    old, new = struct.pack("<iH", 9999, 365), struct.pack("<iH", 9999, 366)
    assert data.count(old) == 1
    path = tmp_path / "y10k.bin"
    path.write_bytes(data.replace(old, new))
    assert_one_line_error(odf("block", "decode", path, check=None), path)


def test_hash_of_any_readable_file_is_its_sha3(tmp_path: Path):
    path = tmp_path / "anything"
    path.write_bytes(b"not a block at all")
    assert (
        odf("block", "hash", path).stdout.strip()
        == "f1620" + hashlib.sha3_256(b"not a block at all").hexdigest()
    )


def test_usage_errors_exit_2():
    proc = odf("block", check=2)
    assert "usage: odf block" in proc.stderr
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------------------------------
# odf snapshot validate
# --------------------------------------------------------------------------------------------------


@needs_upstream
def test_all_upstream_manifests_validate():
    files = upstream_manifests()
    assert len(files) >= 20
    proc = odf("snapshot", "validate", *files, check=2)
    refused = {
        p: SQL_REFUSED_UPSTREAM[str(p.relative_to(UPSTREAM))]
        for p in files
        if str(p.relative_to(UPSTREAM)) in SQL_REFUSED_UPSTREAM
    }
    assert len(refused) == len(SQL_REFUSED_UPSTREAM) == 4
    assert sorted(proc.stderr.splitlines()) == sorted(
        f"{p}: content.metadata[0].{'preprocess' if reason.startswith('preprocess') else 'transform'}: "
        f"dataset '{name}': {reason}, and this provider runs SQL on Spark"
        for p, (name, reason) in refused.items()
    )
    lines = proc.stdout.splitlines()
    ok_files = [p for p in files if p not in refused]
    assert len(lines) == len(ok_files)
    for path, line in zip(ok_files, lines, strict=True):
        assert line.startswith(f"{path}: ok (")


@needs_upstream
@pytest.mark.parametrize("path", upstream_manifests(), ids=lambda p: str(p.relative_to(UPSTREAM)))
def test_each_upstream_manifest_validates_quietly(path: Path):
    refused = SQL_REFUSED_UPSTREAM.get(str(path.relative_to(UPSTREAM)))
    if refused is not None:
        proc = odf("snapshot", "validate", "--quiet", path, check=2)
        assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1
        assert f"dataset '{refused[0]}': {refused[1]}" in proc.stderr
        return
    proc = odf("snapshot", "validate", "--quiet", path)
    assert proc.stdout == proc.stderr == ""


@needs_upstream
def test_validate_reports_bad_files_among_good_ones(tmp_path: Path):
    good = upstream_manifests()[0]
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: x\n  kind: Leaf\n  metadata: []\n",
        encoding="utf-8",
    )
    proc = odf("snapshot", "validate", good, bad, check=2)
    assert proc.stdout.startswith(f"{good}: ok (")
    assert proc.stderr.splitlines() == [
        f"{bad}: content.kind: expected one of Root, Derivative, got a string 'Leaf'"
    ]


def test_validate_refuses_block_manifests(tmp_path: Path):
    src = BLOCKS / "repo_create_block_setinfo.yaml"
    proc = odf("snapshot", "validate", src, check=2)
    assert proc.stderr.splitlines() == [
        f"{src}: kind: document 1 is a MetadataBlock, expected DatasetSnapshot"
    ]


def test_validate_of_a_missing_file(tmp_path: Path):
    path = tmp_path / "nope.yaml"
    assert_one_line_error(odf("snapshot", "validate", path, check=None), path, "cannot read file")


def test_validate_of_a_binary_file(tmp_path: Path):
    path = tmp_path / "block.yaml"
    path.write_bytes(_v3())
    proc = odf("snapshot", "validate", path, check=None)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"{path}: ")


# --------------------------------------------------------------------------------------------------
# Hostile input (issue 23): `odf` in-process, one clear line and exit code 2, nothing written
# --------------------------------------------------------------------------------------------------


def _in_process(capsys, *args: str | Path) -> tuple[int, str, str]:
    from airflow_odf.cli.main import main

    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _snapshot_text(name: str, description: str = "x") -> str:
    return (
        f"kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: {name}\n  kind: Root\n"
        f"  metadata:\n  - kind: SetInfo\n    description: {description}\n"
    )


def _empty_repo(tmp_path: Path, capsys) -> Path:
    repo = tmp_path / "repo"
    assert _in_process(capsys, "init", "--repo", repo)[0] == 0
    return repo


def _repo_files(repo: Path) -> list[str]:
    return sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file())


def test_add_of_a_file_without_a_snapshot_is_an_error(tmp_path: Path, capsys):
    repo = _empty_repo(tmp_path, capsys)
    before = _repo_files(repo)
    src = BLOCKS / "repo_create_block_setinfo.yaml"
    code, out, err = _in_process(capsys, "add", "--repo", repo, src)
    assert (code, out) == (2, "")
    assert err == f"{src}: kind: document 1 is a MetadataBlock, expected DatasetSnapshot\n"
    assert _repo_files(repo) == before


@pytest.mark.parametrize(
    ("name", "phrase"),
    [
        pytest.param(
            "a" * 300, "is too long for a dataset name (at most 200 characters)", id="300-characters"
        ),
        pytest.param("a/b", "an account prefix such as 'acme/' is not supported", id="account-prefix"),
    ],
)
def test_add_and_validate_refuse_the_same_names(name: str, phrase: str, tmp_path: Path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(_snapshot_text(name), encoding="utf-8")
    code, out, validate_err = _in_process(capsys, "snapshot", "validate", path)
    assert (code, out) == (2, "")
    assert validate_err.startswith(f"{path}: content.name: ") and phrase in validate_err
    repo = _empty_repo(tmp_path, capsys)
    before = _repo_files(repo)
    code, out, add_err = _in_process(capsys, "add", "--repo", repo, path)
    assert (code, out, add_err) == (2, "", validate_err)
    assert _repo_files(repo) == before


def test_add_of_a_snapshot_whose_block_is_too_large_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
):
    path = tmp_path / "s.yaml"
    path.write_text(_snapshot_text("big.one", "x" * 3_000), encoding="utf-8")
    repo = _empty_repo(tmp_path, capsys)
    before = _repo_files(repo)
    monkeypatch.setenv("ODF_MAX_BLOCK_BYTES", "2000")
    code, out, err = _in_process(capsys, "add", "--repo", repo, path)
    assert (code, out) == (2, "")
    assert (
        err
        == "big.one: the block would be larger than the 2000 bytes a block may have (ODF_MAX_BLOCK_BYTES)\n"
    )
    assert _repo_files(repo) == before  # no block, ref, name or summary
    assert _in_process(capsys, "list", "--repo", repo, "--format", "json")[1].strip() == "[]"


def test_block_decode_refuses_a_file_over_the_limit_unread(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
):
    path = tmp_path / "big.bin"
    path.write_bytes(_v3() + bytes(5_000))
    monkeypatch.setenv("ODF_MAX_BLOCK_BYTES", "4096")
    code, out, err = _in_process(capsys, "block", "decode", path)
    assert (code, out) == (2, "")
    assert err == f"{path}: larger than the 4096 bytes a block may have (ODF_MAX_BLOCK_BYTES)\n"


def test_block_encode_over_the_limit_writes_no_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys):
    src = tmp_path / "b.yaml"
    src.write_text(
        "kind: MetadataBlock\nversion: 3\ncontent:\n  systemTime: '2024-01-01T00:00:00Z'\n"
        f"  sequenceNumber: 0\n  event:\n    kind: SetInfo\n    description: {'x' * 3_000}\n",
        encoding="utf-8",
    )
    output = tmp_path / "b.bin"
    monkeypatch.setenv("ODF_MAX_BLOCK_BYTES", "2000")
    code, out, err = _in_process(capsys, "block", "encode", src, "-o", output)
    assert (code, out) == (2, "")
    assert (
        err
        == f"{src}: the block would be larger than the 2000 bytes a block may have (ODF_MAX_BLOCK_BYTES)\n"
    )
    assert not output.exists()

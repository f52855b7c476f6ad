"""`odf keys list|export|import` through the installed `odf` command (docs/keys.md).

Each test works on repositories in a temporary folder, with `$ODF_KEYS_DIR` unset so that each local
repository keeps its keys in its own `.odf-keys/`, and the user's configuration folder moved aside.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.identity.keys import KEYS_DIR_ENV, export_text, parse_private_key, private_key_pem
from airflow_odf.odf.identity.signing import public_key_of
from tests.paths import REPO

ODF = Path(sys.executable).parent / "odf"

SNAPSHOTS = """\
kind: DatasetSnapshot
version: 1
content:
  name: owned
  kind: Root
  metadata:
    - kind: SetVocab
      eventTimeColumn: t
---
kind: DatasetSnapshot
version: 1
content:
  name: pulled
  kind: Root
  metadata: []
"""


def odf(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in (KEYS_DIR_ENV, "ODF_REPO")}
    env["XDG_CONFIG_HOME"] = str(cwd / "config")
    proc = subprocess.run([str(ODF), *args], capture_output=True, cwd=cwd, env=env, input=stdin, timeout=60)
    assert b"Traceback" not in proc.stderr, proc.stderr
    return proc


def ok(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    proc = odf(*args, cwd=cwd, stdin=stdin)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc


def refused(*args: str, cwd: Path) -> str:
    """The one line a refused command prints (exit 2, nothing on stdout)."""
    proc = odf(*args, cwd=cwd)
    assert proc.returncode == 2 and proc.stdout == b"", (args, proc.stdout, proc.stderr)
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def listing(repo: str, cwd: Path) -> dict[str, Any]:
    return json.loads(ok("keys", "list", "--repo", repo, "--format", "json", cwd=cwd).stdout)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Repository `a` with `owned` (its key here) and `pulled` (its key removed: read-only here), and
    an empty repository `b` as the other machine."""
    made = tmp_path_factory.mktemp("keys")
    (made / "s.yaml").write_text(SNAPSHOTS)
    ok("init", "--repo", "a", cwd=made)
    ok("add", "--repo", "a", "s.yaml", cwd=made)
    ok("init", "--repo", "b", cwd=made)
    pulled = next(d for d in listing("a", made)["datasets"] if d["names"] == ["pulled"])
    (made / "a" / ".odf-keys" / (pulled["id"].removeprefix("did:odf:") + ".key")).unlink()
    return made


@pytest.fixture
def here(made: Path, tmp_path: Path) -> Path:
    """A copy of `made` (modes kept) for one test to change."""
    return Path(shutil.copytree(made, tmp_path / "here"))


def _ids(here: Path) -> dict[str, str]:
    return {d["names"][0]: d["id"] for d in listing("a", here)["datasets"]}


def test_list_shows_owned_and_read_only_datasets_other_keys_and_the_node(here: Path) -> None:
    ids = _ids(here)
    assert listing("a", here) == {
        "keys_dir": str(here / "a" / ".odf-keys"),
        "datasets": [
            {"names": ["owned"], "id": ids["owned"], "key": "owned"},
            {"names": ["pulled"], "id": ids["pulled"], "key": "read-only"},
        ],
        "other_keys": [],
        "node": {"id": None},  # listing makes no node key
    }
    assert not (here / "a" / ".odf-keys" / "node.key").exists()

    ok("keys", "export", "owned", "--repo", "a", "-o", "k.pem", cwd=here)
    ok("keys", "import", ids["owned"], "k.pem", "--repo", "b", cwd=here)
    node = public_key_of(
        parse_private_key(ok("keys", "export", "--node", "--repo", "b", cwd=here).stdout, "node")
    )
    assert listing("b", here) == {
        "keys_dir": str(here / "b" / ".odf-keys"),
        "datasets": [],
        "other_keys": [{"id": ids["owned"], "key": "no dataset here"}],
        "node": {"id": node.to_did_key()},
    }
    table = ok("keys", "list", "--repo", "a", cwd=here).stdout.decode().splitlines()
    assert table == [
        "NAME    KEY                     DID",
        f"owned   owned here              {ids['owned']}",
        f"pulled  no key (read-only)      {ids['pulled']}",
        "(node)  node identity           none yet (made on first use)",
        f"keys in {here / 'a' / '.odf-keys'}",
    ]


@pytest.mark.parametrize("form", ["pem", "multibase"])
def test_export_then_import_moves_the_key_to_another_store(here: Path, form: str) -> None:
    ids = _ids(here)
    proc = ok("keys", "export", "owned", "--repo", "a", "--format", form, "-o", "k.txt", cwd=here)
    assert proc.stdout == b""
    assert proc.stderr.decode().splitlines() == [
        f"warning: this is a private key; whoever has it controls owned ({ids['owned']}): "
        "it can sign that dataset's heads. Keep it secret."
    ]
    assert _mode(here / "k.txt") == 0o600
    text = (here / "k.txt").read_bytes()
    assert text.startswith(b"-----BEGIN PRIVATE KEY-----" if form == "pem" else b"u")
    assert str(public_key_of(parse_private_key(text, "k"))) == ids["owned"]

    proc = ok("keys", "import", ids["owned"], "k.txt", "--repo", "b", cwd=here)
    assert proc.stdout.decode() == (
        f"{ids['owned']}: owned here now (the key of {ids['owned']} is in {here / 'b' / '.odf-keys'})\n"
    )
    folder = here / "b" / ".odf-keys"
    (stored,) = folder.iterdir()
    assert stored.name == ids["owned"].removeprefix("did:odf:") + ".key"
    assert _mode(folder) == 0o700 and _mode(stored) == 0o600
    assert str(public_key_of(parse_private_key(stored.read_bytes(), "stored"))) == ids["owned"]
    assert text.strip() not in proc.stdout + proc.stderr


def test_export_to_stdout_only_when_asked_and_import_from_stdin(here: Path) -> None:
    ids = _ids(here)
    key = ok("keys", "export", ids["owned"], "--repo", "a", "--format", "multibase", cwd=here).stdout
    assert key.startswith(b"u") and key.endswith(b"\n")
    for command in (("list",), ("list", "--format", "json")):
        out = ok("keys", *command, "--repo", "a", cwd=here)
        assert key.strip() not in out.stdout + out.stderr
    ok("keys", "import", "owned", "-", "--repo", "a", cwd=here, stdin=key)  # already there: fine


def test_export_refuses_an_existing_file_unless_forced(here: Path) -> None:
    (here / "k.pem").write_text("mine")
    assert refused("keys", "export", "owned", "--repo", "a", "-o", "k.pem", cwd=here) == (
        "k.pem: the file exists (--force replaces it)"
    )
    assert (here / "k.pem").read_text() == "mine"
    ok("keys", "export", "owned", "--repo", "a", "-o", "k.pem", "--force", cwd=here)
    assert (here / "k.pem").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert _mode(here / "k.pem") == 0o600


def test_import_of_another_dids_key_is_refused(here: Path) -> None:
    ids = _ids(here)
    ok("keys", "export", "owned", "--repo", "a", "-o", "k.pem", cwd=here)
    assert refused("keys", "import", "pulled", "k.pem", "--repo", "a", cwd=here) == (
        f"pulled: the imported key is the key of {ids['owned']}, not of {ids['pulled']}"
    )
    assert listing("a", here)["datasets"][1]["key"] == "read-only"
    (here / "junk").write_text("not a key")
    assert refused("keys", "import", "pulled", "junk", "--repo", "a", cwd=here) == (
        "pulled: the imported key: not an ed25519 private key (PKCS#8 PEM or multibase u…, z…, f…)"
    )


def test_import_of_the_right_key_makes_a_read_only_dataset_owned(here: Path) -> None:
    """The key of `pulled` comes back from "the other machine" (a file kept elsewhere)."""
    did, secret = DatasetId.generate()
    (here / "other.key").write_text(export_text(secret))
    ok("keys", "import", str(did), "other.key", "--repo", "a", cwd=here)
    assert listing("a", here)["other_keys"] == [{"id": str(did), "key": "no dataset here"}]


def test_export_of_a_dataset_without_its_key_and_other_errors_are_one_line(here: Path) -> None:
    ids = _ids(here)
    assert refused("keys", "export", "pulled", "--repo", "a", cwd=here) == (
        f"pulled: no key of {ids['pulled']} in {here / 'a' / '.odf-keys'}: the dataset is read-only here "
        "(pulled from elsewhere, or its key lives on another machine)"
    )
    assert refused("keys", "export", "nope", "--repo", "a", cwd=here) == "no dataset named 'nope' in a"
    assert refused("keys", "export", "--repo", "a", cwd=here) == (
        "give the dataset (NAME|DID), or --node for this node's key"
    )
    assert refused("keys", "export", "owned", "--node", "--repo", "a", cwd=here) == (
        "give NAME|DID or --node, not both ('owned' and --node)"
    )
    assert refused("keys", "import", "owned", "missing.pem", "--repo", "a", cwd=here) == (
        "missing.pem: cannot read the key file: No such file or directory"
    )
    assert refused("keys", "export", "did:odf:nope", "--repo", "a", cwd=here).startswith("'did:odf:nope': ")


def test_a_key_file_open_to_others_is_refused_in_one_line(here: Path) -> None:
    ids = _ids(here)
    path = Path("a", ".odf-keys", ids["owned"].removeprefix("did:odf:") + ".key")  # as `--repo a` says
    (here / path).chmod(0o644)
    message = f"key {path} is open to group or others (mode 644): chmod 600 it"
    assert refused("keys", "export", "owned", "--repo", "a", cwd=here) == message
    proc = odf("keys", "list", "--repo", "a", "--format", "json", cwd=here)
    assert proc.returncode == 2 and proc.stderr.decode().splitlines() == [message]
    assert json.loads(proc.stdout)["datasets"][0] == {
        "names": ["owned"],
        "id": ids["owned"],
        "key": "unusable",
        "error": message,
    }


def test_node_key_export_and_import(here: Path) -> None:
    ok("keys", "export", "--node", "--repo", "a", "-o", "node.pem", cwd=here)
    node = public_key_of(parse_private_key((here / "node.pem").read_bytes(), "node")).to_did_key()
    assert _mode(here / "node.pem") == 0o600
    assert listing("a", here)["node"] == {"id": node}
    proc = ok("keys", "import", "--node", "node.pem", "--repo", "b", cwd=here)
    assert proc.stdout.decode() == f"this node is now {node} (its key is in {here / 'b' / '.odf-keys'})\n"
    assert listing("b", here)["node"] == {"id": node}

    (here / "new.pem").write_bytes(private_key_pem(DatasetId.generate()[1]))
    assert refused("keys", "import", "--node", "new.pem", "--repo", "b", cwd=here) == (
        f"this node already has the identity {node}; --force replaces it "
        "(what the old key signed stays checkable by its did:key)"
    )
    ok("keys", "import", "--node", "new.pem", "--repo", "b", "--force", cwd=here)
    assert listing("b", here)["node"] != {"id": node}


def test_the_example_of_the_docs_runs_and_publishes_no_key(tmp_path: Path) -> None:
    """docs/keys.md, "Example", as a reader runs it: the ownership moves, and no published object holds
    the key in any form."""
    doc = (REPO / "docs" / "keys.md").read_text(encoding="utf-8")
    script = doc.split("\n## Example\n", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    env = {k: v for k, v in os.environ.items() if k not in (KEYS_DIR_ENV, "ODF_REPO")}
    env |= {"TMPDIR": str(tmp_path), "PATH": f"{ODF.parent}{os.pathsep}{env['PATH']}"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, env=env, timeout=120)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    (work,) = [p for p in tmp_path.iterdir() if p.name != "config"]
    server, laptop = listing("server", work), listing("laptop", work)
    assert [d["key"] for d in server["datasets"]] == ["owned"]
    assert [d["key"] for d in laptop["datasets"]] == ["read-only"]
    (stored,) = (work / "server" / ".odf-keys").glob("fed01*.key")
    secret = parse_private_key(stored.read_bytes(), "stored")
    forms = [secret, export_text(secret).encode(), private_key_pem(secret).splitlines()[1]]
    published = [p for p in (work / "published").rglob("*") if p.is_file()]
    assert published and not [p for p in published for form in forms if form in p.read_bytes()]

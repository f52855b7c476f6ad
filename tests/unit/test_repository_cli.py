"""The repository through the real `odf` command: init, add, list, log, reset, verify, gc.

Every check runs the installed `odf` executable in a subprocess against a repository in a temporary
directory, selected with `--repo` or with `ODF_REPO`. The real upstream manifests (kamu-cli examples
and kamu-contrib) are added all at once; mutating tests work on copies of that repository.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import block_hash
from airflow_odf.odf.format.manifests import read_manifests
from tests.paths import (
    REPO,
    SQL_REFUSED_NAMES,
    UPSTREAM,
    needs_upstream,
    skip_without_upstream,
    upstream_manifests,
)

ODF = Path(sys.executable).parent / "odf"

MISSING = {
    "net.rocketpool.reth.mint-burn": "net.rocketpool.reth.tokens-burned",
    "ca.vancouver.opendata.property.tax-report": "ca.vancouver.opendata.property.tax-report.2006-2010",
}


def odf(*args: str, repo: Path | None = None, env_repo: Path | None = None, timeout: float = 60) -> Any:
    """Runs `odf ARGS [--repo REPO]`, optionally with ODF_REPO set; returns the CompletedProcess."""
    env = {k: v for k, v in os.environ.items() if k != "ODF_REPO"}
    if env_repo is not None:
        env["ODF_REPO"] = str(env_repo)
    argv = [str(ODF), *args]
    if repo is not None:
        argv += ["--repo", str(repo)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def ok(*args: str, **kw: Any) -> str:
    proc = odf(*args, **kw)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout


def snapshots() -> dict[str, list[model.DatasetSnapshot]]:
    """Lower-case name -> the snapshots of that name among the upstream manifests, in argument order."""
    out: dict[str, list[model.DatasetSnapshot]] = {}
    for path in upstream_manifests():
        for m in read_manifests(path):
            if m.kind == "DatasetSnapshot":
                out.setdefault(m.content.name.lower(), []).append(m.content)
    return out


def inputs_of(s: model.DatasetSnapshot) -> list[model.TransformInput]:
    return [i for e in s.metadata if isinstance(e, model.SetTransform) for i in e.inputs]


def list_json(repo: Path) -> dict[str, dict]:
    return {row["name"]: row for row in json.loads(ok("list", "--format", "json", repo=repo))}


def log_json(repo: Path, name: str, *extra: str) -> list[dict]:
    return json.loads(ok("log", name, "--format", "json", *extra, repo=repo))


def dataset_dir(repo: Path, did: str) -> Path:
    return repo / "datasets" / did.removeprefix("did:odf:")


def visible(directory: Path) -> set[str]:
    return {n for n in os.listdir(directory) if not n.startswith(".")}


def write_manifest(path: Path, name: str, kind: str, events: list[dict]) -> Path:
    doc = {
        "kind": "DatasetSnapshot",
        "version": 1,
        "content": {"name": name, "kind": kind, "metadata": events},
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A repository with every upstream manifest added by one `odf add`; returns it and that run."""
    skip_without_upstream()
    repo = tmp_path_factory.mktemp("repo") / "odf"
    assert "initialised" in ok("init", repo=repo)
    proc = odf("add", *map(str, upstream_manifests()), repo=repo)
    return repo, proc


@pytest.fixture
def repo(populated: tuple[Path, Any], tmp_path: Path) -> Path:
    """A private copy of the populated repository."""
    copy = tmp_path / "repo"
    shutil.copytree(populated[0], copy)
    return copy


# --------------------------------------------------------------------------------------------------
# init and add
# --------------------------------------------------------------------------------------------------


def test_init_with_repo_option_and_with_env(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert str(a) in ok("init", repo=a)
    assert (a / ".odf-repository").is_file()
    assert str(b) in ok("init", env_repo=b)
    assert (b / ".odf-repository").is_file()
    assert ok("list", "--format", "json", env_repo=b).strip() == "[]"
    missing = odf("list", repo=tmp_path / "nowhere")
    assert missing.returncode == 2 and "odf init" in missing.stderr


@needs_upstream
def test_upstream_manifests_are_present() -> None:
    paths = upstream_manifests()
    assert len(paths) >= 20
    assert all(str(p).startswith(str(UPSTREAM)) for p in paths)


def test_add_all_upstream_manifests(populated: tuple[Path, Any]) -> None:
    repo, proc = populated
    by_name = snapshots()
    assert set(MISSING) <= set(by_name)
    # the three whose SQL the policy refuses fail, naming the step and the construct (mint-burn, whose
    # input is missing too, is refused for its SQL first) ...
    assert proc.returncode == 2
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 4
    for name, reason in SQL_REFUSED_NAMES.items():
        assert f"{name}: {reason}, and this provider runs SQL on Spark" in errors
    # ... the other whose input is not among the manifests fails, naming the missing input ...
    for name, missing in MISSING.items():
        line = next(e for e in errors if e.startswith(f"{name}:"))
        assert name in SQL_REFUSED_NAMES or (repr(missing) in line and "not in the repository" in line)
        assert missing.lower() not in by_name
    # ... and every other dataset is created, once
    created = [line.split("\t") for line in proc.stdout.strip().splitlines()]
    assert all(row[3] == "(created)" for row in created)
    expected = set(by_name) - set(MISSING) - set(SQL_REFUSED_NAMES)
    assert sorted(row[0].lower() for row in created) == sorted(expected)
    rows = list_json(repo)
    assert {n.lower() for n in rows} == expected
    for row in created:
        assert rows[row[0]]["id"] == row[1] and rows[row[0]]["head"] == row[2]


def test_add_orders_derivatives_after_their_inputs(populated: tuple[Path, Any]) -> None:
    repo, proc = populated
    by_name = snapshots()
    order = [line.split("\t")[0].lower() for line in proc.stdout.strip().splitlines()]
    argument_order = [
        name for p in upstream_manifests() for name in [read_manifests(p)[0].content.name.lower()]
    ]
    reordered = 0
    for name in order:
        for i in inputs_of(by_name[name][0]):
            dep = i.dataset_ref.lower()
            assert dep in order and order.index(dep) < order.index(name), (name, dep)
            if argument_order.index(name) < argument_order.index(dep):
                reordered += 1
    assert reordered >= 2, "the manifests were already in input order: the test proves nothing"
    # the stored transforms point at the identities of those inputs
    ids = {n.lower(): r["id"] for n, r in list_json(repo).items()}
    for name in order:
        refs = [i.dataset_ref.lower() for i in inputs_of(by_name[name][0])]
        if refs:
            blocks = log_json(repo, name)
            st = next(
                b["content"]["event"] for b in blocks if b["content"]["event"]["kind"] == "SetTransform"
            )
            assert [i["datasetRef"] for i in st["inputs"]] == [ids[r] for r in refs]


def test_list_json_shows_kind_and_head(populated: tuple[Path, Any]) -> None:
    repo, _ = populated
    by_name = snapshots()
    rows = list_json(repo)
    for name, row in rows.items():
        snaps = by_name[name.lower()]
        assert row["kind"] == snaps[0].kind.name.capitalize()
        assert row["id"].startswith("did:odf:fed01")
        head_file = dataset_dir(repo, row["id"]) / "refs" / "head"
        assert head_file.read_text() == row["head"]
        head_bytes = (dataset_dir(repo, row["id"]) / "blocks" / row["head"]).read_bytes()
        assert str(block_hash(head_bytes)) == row["head"]
        assert row["blocks"] in {1 + len(s.metadata) for s in snaps}
        assert row["records"] == 0 and row["size"] == 0
    table = ok("list", repo=repo).splitlines()
    assert table[0].split() == ["NAME", "KIND", "BLOCKS", "RECORDS", "HEAD"]
    assert sorted(line.split()[0] for line in table[1:]) == sorted(rows)
    assert ok("list", "--format", "json", env_repo=repo) == ok("list", "--format", "json", repo=repo)


# --------------------------------------------------------------------------------------------------
# log
# --------------------------------------------------------------------------------------------------


def parse_log(text: str) -> list[tuple[str, dict]]:
    docs = []
    for part in text.split("---\n"):
        first, _, rest = part.partition("\n")
        assert first.startswith("# block f1620"), first
        docs.append((first.removeprefix("# block "), yaml.safe_load(rest)))
    return docs


def test_log_yaml_starts_at_the_head_and_shows_normalised_transforms(populated: tuple[Path, Any]) -> None:
    repo, _ = populated
    rows = list_json(repo)
    name = "com.naturalearthdata.admin0.countries"
    docs = parse_log(ok("log", name, repo=repo))
    assert len(docs) == rows[name]["blocks"] == 2
    assert docs[0][0] == rows[name]["head"]
    assert [d["content"]["sequenceNumber"] for _, d in docs] == [1, 0]
    assert docs[0][1]["content"]["prevBlockHash"] == docs[1][0]
    assert all(d["kind"] == "MetadataBlock" and d["version"] == 3 for _, d in docs)
    seed = docs[-1][1]["content"]["event"]
    assert seed == {"kind": "Seed", "datasetId": rows[name]["id"], "datasetKind": "Derivative"}
    st = docs[0][1]["content"]["event"]
    assert st["kind"] == "SetTransform"
    original = [f"com.naturalearthdata.admin0.countries.{s}" for s in ("10m", "50m", "110m")]
    assert st["inputs"] == [{"datasetRef": rows[n]["id"], "alias": n} for n in original]
    assert "query" not in st["transform"]
    assert len(st["transform"]["queries"]) == 1 and "alias" not in st["transform"]["queries"][0]
    assert "LEFT JOIN" in st["transform"]["queries"][0]["query"]


def test_log_keeps_explicit_aliases_and_multi_step_queries(repo: Path) -> None:
    # the reference's overdue_shipments is Flink SQL (refused); this repository's example is its Spark form
    ok(
        "add",
        str(REPO / "dags_examples/overdue_shipments/manifests/com.acme.shipments.overdue.yaml"),
        repo=repo,
    )
    rows = list_json(repo)
    st = next(
        b["content"]["event"]
        for b in log_json(repo, "leaderboard")
        if b["content"]["event"]["kind"] == "SetTransform"
    )
    assert st["inputs"] == [{"datasetRef": rows["player-scores"]["id"], "alias": "player_scores"}]
    st = next(
        b["content"]["event"]
        for b in log_json(repo, "com.acme.shipments.overdue")
        if b["content"]["event"]["kind"] == "SetTransform"
    )
    assert all(i["datasetRef"].startswith("did:odf:") for i in st["inputs"])
    queries = st["transform"]["queries"]
    assert len(queries) > 1 and "alias" not in queries[-1] and all("alias" in q for q in queries[:-1])


def test_log_json_and_limit(populated: tuple[Path, Any]) -> None:
    repo, _ = populated
    rows = list_json(repo)
    entries = log_json(repo, "player-scores")
    assert len(entries) == rows["player-scores"]["blocks"] == 3
    assert entries[0]["hash"] == rows["player-scores"]["head"]
    assert [e["content"]["sequenceNumber"] for e in entries] == [2, 1, 0]
    for newer, older in itertools.pairwise(entries):
        assert newer["content"]["prevBlockHash"] == older["hash"]
    assert log_json(repo, "player-scores", "--limit", "1") == entries[:1]
    assert log_json(repo, "player-scores", "--limit", "2") == entries[:2]
    assert len(parse_log(ok("log", "player-scores", "--limit", "2", repo=repo))) == 2
    assert json.loads(ok("log", "player-scores", "--format", "json", env_repo=repo)) == entries


def test_names_are_case_insensitive(populated: tuple[Path, Any]) -> None:
    repo, _ = populated
    assert ok("log", "PLAYER-SCORES", repo=repo) == ok("log", "player-scores", repo=repo)
    assert ok("log", "Com.Acme.Orders", "--format", "json", repo=repo) == ok(
        "log", "com.acme.orders", "--format", "json", repo=repo
    )


@pytest.mark.parametrize("name", ["../x", "a/b", "a..b", "a_b", ".a", ""])
def test_invalid_names_are_rejected(populated: tuple[Path, Any], name: str) -> None:
    repo, _ = populated
    for args in (("log", name), ("reset", name, "f1620" + "00" * 32), ("verify", name, "--integrity")):
        proc = odf(*args, repo=repo)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "not a valid dataset name" in proc.stderr


def test_unknown_name_is_bad_input(populated: tuple[Path, Any]) -> None:
    proc = odf("log", "no.such.dataset", repo=populated[0])
    assert proc.returncode == 2 and "no dataset named 'no.such.dataset'" in proc.stderr


@pytest.mark.parametrize("name", ["../x", "a/b", "a..b"])
def test_manifests_with_invalid_names_are_rejected(repo: Path, tmp_path: Path, name: str) -> None:
    before = sorted(p.name for p in (repo / "datasets").iterdir())
    manifest = write_manifest(tmp_path / "bad.yaml", name, "Root", [{"kind": "SetInfo", "description": "x"}])
    proc = odf("add", str(manifest), repo=repo)
    assert proc.returncode == 2 and "not a valid dataset name" in proc.stderr
    assert sorted(p.name for p in (repo / "datasets").iterdir()) == before
    assert not (repo / "x").exists() and not (repo.parent / "x").exists()


# --------------------------------------------------------------------------------------------------
# evolving datasets with add
# --------------------------------------------------------------------------------------------------


def test_adding_the_same_manifests_again_adds_nothing(repo: Path) -> None:
    heads = {n: r["head"] for n, r in list_json(repo).items()}
    proc = odf("add", *map(str, upstream_manifests()), repo=repo)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 + len(SQL_REFUSED_NAMES)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(heads)
    assert all(line.endswith("(0 new blocks)") for line in lines)
    assert {n: r["head"] for n, r in list_json(repo).items()} == heads


def test_changed_description_appends_exactly_one_block(repo: Path, tmp_path: Path) -> None:
    name = "com.github.kamu-data.stargazers"
    source = UPSTREAM / "kamu-contrib/com.github/com.github.kamu-data.stargazers.yaml"
    doc = yaml.safe_load(source.read_text())
    info = next(e for e in doc["content"]["metadata"] if e["kind"] == "SetInfo")
    info["description"] = "Stargazers, described differently"
    (tmp_path / "changed.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    before = list_json(repo)
    out = ok("add", str(tmp_path / "changed.yaml"), repo=repo)
    assert out.strip().endswith("(1 new blocks)")
    after = list_json(repo)
    assert after[name]["blocks"] == before[name]["blocks"] + 1
    newest = log_json(repo, name, "--limit", "1")[0]
    assert newest["hash"] == after[name]["head"]
    assert newest["content"]["prevBlockHash"] == before[name]["head"]
    assert newest["content"]["event"] == {**info, "kind": "SetInfo"}
    assert {n: r["head"] for n, r in after.items() if n != name} == {
        n: r["head"] for n, r in before.items() if n != name
    }
    assert ok("add", str(tmp_path / "changed.yaml"), repo=repo).strip().endswith("(0 new blocks)")


SCHEMA_V1 = {
    "kind": "SetDataSchema",
    "schema": {"fields": [{"name": "id", "type": "Int64"}, {"name": "name", "type": "String"}]},
}


def schema_with(*fields: dict) -> dict:
    return {"kind": "SetDataSchema", "schema": {"fields": list(fields)}}


def test_schema_evolution_through_add(repo: Path, tmp_path: Path) -> None:
    m = tmp_path / "people.yaml"
    ok("add", str(write_manifest(m, "people", "Root", [SCHEMA_V1])), repo=repo)
    assert list_json(repo)["people"]["blocks"] == 2
    # a new optional column is an allowed evolution: one block
    fields = [
        *SCHEMA_V1["schema"]["fields"],
        {"name": "email", "type": {"kind": "Option", "inner": "String"}},
    ]
    out = ok("add", str(write_manifest(m, "people", "Root", [schema_with(*fields)])), repo=repo)
    assert out.strip().endswith("(1 new blocks)")
    rows = list_json(repo)
    assert rows["people"]["blocks"] == 3
    event = log_json(repo, "people", "--limit", "1")[0]["content"]["event"]
    assert event["kind"] == "SetDataSchema"
    assert [f["name"] for f in event["schema"]["fields"]] == ["id", "name", "email"]
    ds = dataset_dir(repo, rows["people"]["id"])
    blocks_before = sorted(os.listdir(ds / "blocks"))
    # changed type, removed column, or a new required column break evolution: exit 2, nothing appended
    breaking = {
        "type-changed": schema_with({"name": "id", "type": "String"}, *fields[1:]),
        "column-removed": schema_with(*fields[:2]),
        "required-column-added": schema_with(*fields, {"name": "age", "type": "Int32"}),
    }
    for rule, event in breaking.items():
        proc = odf("add", str(write_manifest(m, "people", "Root", [event])), repo=repo)
        assert proc.returncode == 2, proc.stdout
        assert "schema-evolution" in proc.stderr and rule in proc.stderr and proc.stderr.startswith("people:")
        assert list_json(repo)["people"]["head"] == rows["people"]["head"]
        assert sorted(os.listdir(ds / "blocks")) == blocks_before
    # one rejected event rejects the whole manifest (the SetInfo next to it is not appended either)
    proc = odf(
        "add",
        str(
            write_manifest(
                m, "people", "Root", [breaking["type-changed"], {"kind": "SetInfo", "description": "x"}]
            )
        ),
        repo=repo,
    )
    assert proc.returncode == 2
    assert sorted(os.listdir(ds / "blocks")) == blocks_before


def test_add_with_another_case_evolves_the_same_dataset(repo: Path, tmp_path: Path) -> None:
    before = list_json(repo)
    m = write_manifest(
        tmp_path / "ps.yaml",
        "PLAYER-SCORES",
        "Root",
        [{"kind": "SetInfo", "description": "scores of players"}],
    )
    assert ok("add", str(m), repo=repo).strip().endswith("(1 new blocks)")
    after = list_json(repo)
    assert set(after) == set(before)
    assert after["player-scores"]["id"] == before["player-scores"]["id"]
    assert after["player-scores"]["blocks"] == before["player-scores"]["blocks"] + 1


def test_add_with_the_wrong_kind_is_rejected(repo: Path, tmp_path: Path) -> None:
    m = write_manifest(tmp_path / "ps.yaml", "player-scores", "Derivative", [])
    proc = odf("add", str(m), repo=repo)
    assert proc.returncode == 2 and "Root" in proc.stderr and "Derivative" in proc.stderr


def test_two_manifests_with_the_same_name_in_one_add(repo: Path, tmp_path: Path) -> None:
    first = write_manifest(
        tmp_path / "a.yaml", "twice", "Root", [{"kind": "SetInfo", "description": "first"}]
    )
    second = write_manifest(
        tmp_path / "b.yaml", "twice", "Root", [{"kind": "SetInfo", "description": "second"}]
    )
    proc = odf("add", str(first), str(second), repo=repo)
    newest = log_json(repo, "twice", "--limit", "1")[0]["content"]["event"]
    # either refused as ambiguous, or applied in order so that the second manifest wins
    assert (proc.returncode == 2 and "twice" in proc.stderr) or newest["description"] == "second"


# --------------------------------------------------------------------------------------------------
# reset, verify, gc, conflicts
# --------------------------------------------------------------------------------------------------


def test_reset_moves_the_head_back(repo: Path) -> None:
    name = "us.cityofnewyork.data.ems-incident-dispatch"
    entries = log_json(repo, name)
    assert len(entries) == 3
    target = entries[1]["hash"]
    out = ok("reset", name, target, repo=repo)
    assert entries[0]["hash"] in out and target in out
    row = list_json(repo)[name]
    assert row["head"] == target and row["blocks"] == 2
    assert log_json(repo, name) == entries[1:]
    proc = odf("reset", name, entries[0]["hash"], repo=repo)  # no longer in the chain
    assert proc.returncode == 2 and "not in the chain" in proc.stderr
    proc = odf("reset", name, "f1620" + "ab" * 32, repo=repo)
    assert proc.returncode == 2 and "reset-target" in proc.stderr
    proc = odf("reset", name, "not-a-hash", repo=repo)
    assert proc.returncode == 2 and proc.stderr.startswith("HASH:")
    assert list_json(repo)[name]["head"] == target
    assert ok("reset", name.upper(), entries[2]["hash"], env_repo=repo)
    assert list_json(repo)[name]["blocks"] == 1


def test_verify_then_tamper(repo: Path) -> None:
    name = "com.github.kamu-data.stargazers"
    out = ok("verify", name, "--integrity", repo=repo)
    assert out.startswith(f"{name}: ok") and "from the Seed (no earlier verification recorded)" in out
    entries = log_json(repo, name)
    report = json.loads(ok("verify", name, "--integrity", "--format", "json", repo=repo))
    assert report == {
        "dataset": name,
        "ok": True,
        "problems": [],
        "reproducibility": "not checked",
        "not_reproducible": [],
        "head": entries[0]["hash"],
        "full": False,
        "since": entries[0]["hash"],  # verified by the first run: nothing new to check
        "reason": None,
        "blocks_checked": 0,
        "objects_checked": 0,
        "transforms_replayed": 0,
        "record": f"info/verification at {entries[0]['hash']}",
        "signature": {"status": "signed", "signer": list_json(repo)[name]["id"]},  # created here: signed
    }
    victim = entries[2]["hash"]
    row = list_json(repo)[name]
    path = dataset_dir(repo, row["id"]) / "blocks" / victim
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    # a block verified earlier is not looked at again, unless --full
    assert ok("verify", name, "--integrity", repo=repo).startswith(f"{name}: ok (")
    proc = odf("verify", name, "--integrity", "--full", "--format", "json", repo=repo)
    assert proc.returncode == 4
    report = json.loads(proc.stdout)
    assert (
        report["ok"] is False and report["full"] is True and report["reason"] == "full verification asked for"
    )
    assert {"kind": "block", "ref": victim} in [
        {"kind": p["kind"], "ref": p["ref"]} for p in report["problems"]
    ]
    text = odf("verify", name, "--integrity", "--full", repo=repo)
    assert text.returncode == 4 and f"block {victim}" in text.stdout
    assert odf("verify", name, "--full", repo=repo).returncode == 4  # the replay starts with integrity
    # the other datasets are unaffected
    assert odf("verify", "player-scores", "--integrity", repo=repo).returncode == 0


def test_gc_after_reset_removes_orphaned_blocks(repo: Path) -> None:
    name = "ca.bankofcanada.exchange-rates.daily"
    entries = log_json(repo, name)
    row = list_json(repo)[name]
    blocks = dataset_dir(repo, row["id"]) / "blocks"
    ok("reset", name, entries[-1]["hash"], repo=repo)  # back to the Seed
    assert sorted(os.listdir(blocks)) == sorted(e["hash"] for e in entries)
    assert ok("gc", repo=repo).strip() == "removed 0 unreferenced objects and folders"  # default min age
    heads = {n: r["head"] for n, r in list_json(repo).items()}
    out = ok("gc", "--min-age", "0", repo=repo)
    # the blocks after the Seed and the attestation of the old head (the reset signed the Seed)
    assert out.strip() == f"removed {len(entries)} unreferenced objects and folders"
    assert os.listdir(blocks) == [entries[-1]["hash"]]
    assert os.listdir(blocks.parent / "attestations") == [entries[-1]["hash"]]
    assert {n: r["head"] for n, r in list_json(repo).items()} == heads
    for n in heads:
        assert odf("verify", n, "--integrity", repo=repo).returncode == 0, n
    assert ok("gc", "--min-age", "0", env_repo=repo).strip() == "removed 0 unreferenced objects and folders"
    # the dataset can grow again from the Seed
    add = ok(
        "add",
        str(UPSTREAM / "kamu-cli/examples/currency_conversion/ca.bankofcanada.exchange-rates.daily.yaml"),
        repo=repo,
    )
    assert add.strip().endswith(f"({len(entries) - 1} new blocks)")
    assert odf("verify", name, "--integrity", repo=repo).returncode == 0


def test_concurrent_head_move_is_reconciled(repo: Path, tmp_path: Path) -> None:
    """Deterministic race: hold the head's lock, let `odf add` write its block and wait on the lock,
    move the head meanwhile, release. The command loses the compare-and-swap, applies the manifest again
    on top of the head the other writer left (the Seed) and succeeds; its first block stays out of the
    chain, for `odf gc`."""
    name = "com.acme.orders"
    row = list_json(repo)[name]
    ds = dataset_dir(repo, row["id"])
    entries = log_json(repo, name)
    m = write_manifest(tmp_path / "o.yaml", name, "Root", [{"kind": "SetInfo", "description": "racing"}])
    blocks_before = visible(ds / "blocks")
    lock_path = ds / "refs" / ".head.lock"
    with open(lock_path, "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        env = {k: v for k, v in os.environ.items() if k != "ODF_REPO"}
        child = subprocess.Popen(
            [str(ODF), "add", str(m), "--repo", str(repo)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            deadline = time.monotonic() + 30
            while visible(ds / "blocks") == blocks_before:  # its block is written: it is at the CAS
                assert child.poll() is None, child.communicate()
                assert time.monotonic() < deadline, "odf add never wrote its block"
                time.sleep(0.005)
            # another writer moves the head (here: back to the Seed) while `odf add` waits for the lock
            tmp = ds / "refs" / ".other-writer"
            tmp.write_bytes(entries[-1]["hash"].encode())
            os.replace(tmp, ds / "refs" / "head")
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, (out, err)
    seed = entries[-1]["hash"]
    assert f"another writer moved the head to {seed} first; planning again from it (attempt 2 of 5)" in err
    chain = log_json(repo, name)
    assert [e["hash"] for e in chain[1:]] == [seed]  # the new block sits on the other writer's head
    assert (ds / "refs" / "head").read_text() == chain[0]["hash"] and chain[0]["hash"] in out
    stray = visible(ds / "blocks") - blocks_before - {chain[0]["hash"]}
    assert len(stray) == 1  # the lost attempt's block
    assert stray.isdisjoint(e["hash"] for e in chain)
    assert ok("verify", name, "--integrity", repo=repo)
    # the stray block and the reset-away one, with their attestations
    assert "removed 4" in ok("gc", "--min-age", "0", repo=repo)

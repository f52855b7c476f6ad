"""Issue 35, part 3: query commitments wire-compatible with kamu, on the shared local SparkSession.

The client here is written against kamu's documented protocol only — what kamu-cli's
examples/query-commitments/example.py does, with `requests`, `canonicaljson`, `base58` and
`cryptography`, and none of our code: it checks the commitment's three hashes and the signature by the
node's `did:key`, has `/verify` accept the commitment, refuse the three invalid requests, and — with the
node's private key, exported as kamu's tools take it — refuse a forged output hash, a dataset that is not
there and a block that is not in the chain. `odf sql --proof` and `odf verify-query` do the same from
the command line, and a flipped byte of input, signature or slice gives the matching failure.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import base58
import canonicaljson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from airflow_odf.cli.main import main
from airflow_odf.odf.identity.keys import export_text
from airflow_odf.odf.query.endpoint import QueryEndpoint
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.sharing.serve import RepositoryServer
from tests.engine import test_query_job
from tests.engine.test_query_job import ROOT, Pipeline

pipeline = test_query_job.pipeline  # its repository, built once for this module too

SQL = f"SELECT offset, symbol, price FROM `{ROOT}` ORDER BY offset"
OTHER_HASH = "f1620bd01de1b46f8afe08e128ddd225acdb4457c09919d7c50c2054859a178de51a6"  # example.py's
OTHER_SIGNATURE = "uZbm7fFcWc4l6iyvaKe_txdKntL3h3kvsGHOaKIbPV6c42PH1VnSmpYHMopv4TU68syzgoEdcS26AvpkSQb9dBQ"


# ------------------------------------------------------------ the client, from kamu's protocol only


def decode_multibase(text: str) -> bytes:
    prefix, value = text[0], text[1:]
    if prefix == "u":
        return base64.urlsafe_b64decode(value + "=" * ((4 - len(value) % 4) % 4))
    if prefix == "f":
        return bytes.fromhex(value)
    if prefix == "z":
        return base58.b58decode(value)
    raise ValueError(f"multibase {prefix!r}")


def encode_multibase(data: bytes) -> str:
    return "u" + base64.urlsafe_b64encode(data).decode().rstrip("=")


def multihash(value: Any) -> str:
    return "f1620" + hashlib.sha3_256(canonicaljson.encode_canonical_json(value)).hexdigest()


def public_key_from_did(did: str) -> Ed25519PublicKey:
    assert did.startswith("did:key:")
    codec = decode_multibase(did[len("did:key:") :])
    assert codec[0:1].hex() == "ed"
    return Ed25519PublicKey.from_public_bytes(codec[2:])


def assert_consistent(response: dict[str, Any]) -> None:
    """What a client checks on receiving a proof: the three hashes and the signature."""
    commitment = response["commitment"]
    assert commitment["inputHash"] == multihash(response["input"])
    assert commitment["outputHash"] == multihash(response["output"])
    assert commitment["subQueriesHash"] == multihash(response["subQueries"])
    signature = decode_multibase(response["proof"]["proofValue"])
    public_key_from_did(response["proof"]["verificationMethod"]).verify(
        signature, canonicaljson.encode_canonical_json(commitment)
    )


def resigned(commitment: dict[str, Any], key: Ed25519PrivateKey, **input_changes: Any) -> dict[str, Any]:
    """A copy with `input.datasets[0]` changed (and the input hash made again) or the output hash
    replaced, signed again with the node's key: what example.py forges."""
    forged = copy.deepcopy(commitment)
    for name, value in input_changes.items():
        if name == "outputHash":
            forged["commitment"]["outputHash"] = value
        else:
            forged["input"]["datasets"][0][name] = value
    forged["commitment"]["inputHash"] = multihash(forged["input"])
    signature = key.sign(canonicaljson.encode_canonical_json(forged["commitment"]))
    forged["proof"]["proofValue"] = encode_multibase(signature)
    return forged


# ------------------------------------------------------------ the node


@pytest.fixture(scope="module")
def node(pipeline: Pipeline) -> Iterator[tuple[str, QueryEndpoint]]:
    """`odf serve --query` in-process on the shared session: its URL and its query endpoint."""
    repo = pipeline.repo
    api = QueryEndpoint(repo, pipeline.runner, work_dir=repo.work_dir, node_key=repo.keys.node_secret())
    server = RepositoryServer(repo, api=api)
    server.start_in_thread()
    yield server.url, api
    server.shutdown()
    server.server_close()


def test_kamus_client_flow(node: tuple[str, QueryEndpoint], pipeline: Pipeline) -> None:
    url, api = node
    response = requests.get(f"{url}/query", params={"query": SQL, "include": "proof"}, timeout=120)
    response.raise_for_status()
    data = response.json()
    assert_consistent(data)
    assert data["proof"]["verificationMethod"] == api.did
    root = pipeline.repo.dataset(ROOT)
    assert data["input"] == {
        "query": SQL,
        "queryDialect": "SqlSpark",
        "dataFormat": "JsonAoS",
        "include": ["Input", "Proof"],
        "datasets": [{"id": str(pipeline.repo.resolve(ROOT)), "alias": ROOT, "blockHash": str(root.head())}],
        "skip": 0,
        "limit": 100,
    }
    assert data["output"]["dataFormat"] == "JsonAoS"
    assert data["output"]["data"][:2] == [
        {"offset": 0, "symbol": "ACME", "price": 10.0},
        {"offset": 1, "symbol": "INIT", "price": 20.0},
    ]
    assert data["subQueries"] == []

    commitment = {k: v for k, v in data.items() if k != "output"}
    verdict = requests.post(f"{url}/verify", json=commitment, timeout=120)
    assert (verdict.status_code, verdict.json()) == (200, {"ok": True})

    def refused(document: dict[str, Any]) -> dict[str, Any]:
        answer = requests.post(f"{url}/verify", json=document, timeout=120)
        assert answer.status_code == 400
        body = answer.json()
        assert body["ok"] is False
        return body["error"]

    def changed(section: str, name: str, value: str) -> dict[str, Any]:
        forged = copy.deepcopy(commitment)
        forged[section][name] = value
        return forged

    assert refused(changed("commitment", "inputHash", OTHER_HASH)) == {
        "kind": "InvalidRequest::InputHash",
        "message": "The commitment is invalid and cannot be disputed: commitment.inputHash doesn't match "
        "the hash of input object",
    }
    assert (
        refused(changed("commitment", "subQueriesHash", OTHER_HASH))["kind"]
        == "InvalidRequest::SubQueriesHash"
    )
    assert refused(changed("proof", "proofValue", OTHER_SIGNATURE)) == {
        "kind": "InvalidRequest::BadSignature",
        "message": "The commitment is invalid and cannot be disputed: "
        "Verification equation was not satisfied",
    }

    # with the node's private key, exported in the form kamu's tools take (`--private-key`)
    key = Ed25519PrivateKey.from_private_bytes(
        decode_multibase(export_text(pipeline.repo.keys.node_secret()))
    )
    forged_hash = data["commitment"]["outputHash"][:-1] + (
        "d" if data["commitment"]["outputHash"][-1] != "d" else "e"
    )
    error = refused(resigned(commitment, key, outputHash=forged_hash))
    assert error["kind"] == "VerificationFailed::OutputMismatch"
    assert (error["expected_hash"], error["actual_hash"]) == (forged_hash, data["commitment"]["outputHash"])
    assert error["message"].startswith("Query was reproduced but resulted in output hash different")
    missing_id = data["input"]["datasets"][0]["id"][:-4] + "beef"
    error = refused(resigned(commitment, key, id=missing_id))
    assert (error["kind"], error["dataset_id"]) == ("VerificationFailed::DatasetNotFound", missing_id)
    missing_block = data["input"]["datasets"][0]["blockHash"][:-4] + "beef"
    error = refused(resigned(commitment, key, blockHash=missing_block))
    assert error["kind"] == "VerificationFailed::DatasetBlockNotFound"
    assert (error["dataset_id"], error["block_hash"]) == (data["input"]["datasets"][0]["id"], missing_block)


def test_pins_paging_formats_and_schema(node: tuple[str, QueryEndpoint], pipeline: Pipeline) -> None:
    url, _ = node
    did = str(pipeline.repo.resolve(ROOT))
    body = {
        "query": "SELECT offset, symbol FROM trades ORDER BY offset",
        "datasets": [{"id": did, "alias": "trades", "blockHash": pipeline.heads[1]}],  # 4 of the 5 records
        "skip": 1,
        "limit": 2,
        "dataFormat": "JsonSoA",
        "include": ["proof", "schema"],
    }
    data = requests.post(f"{url}/query", json=body, timeout=120).json()
    assert_consistent(data)
    assert data["output"]["data"] == {"offset": [1, 2], "symbol": ["INIT", "ACME"]}
    assert data["input"]["datasets"] == body["datasets"]
    assert data["input"]["include"] == ["Input", "Proof", "Schema"]
    assert data["input"]["schemaFormat"] == data["output"]["schemaFormat"] == "ArrowJson"
    assert [f["name"] for f in data["output"]["schema"]["fields"]] == ["offset", "symbol"]
    verdict = requests.post(
        f"{url}/verify", json={k: v for k, v in data.items() if k != "output"}, timeout=120
    )
    assert verdict.json() == {"ok": True}
    body["skip"] = 3
    assert requests.post(f"{url}/query", json=body, timeout=120).json()["output"]["data"] == {
        "offset": [3],
        "symbol": ["INIT"],
    }
    plain = requests.get(
        f"{url}/query", params={"query": "SELECT 1 AS one", "format": "json-aoa"}, timeout=120
    )
    assert plain.json() == {"output": {"data": [[1]], "dataFormat": "JsonAoA"}}


@pytest.mark.parametrize(
    ("method", "path", "payload", "status", "message"),
    [
        ("post", "/query", {"query": SQL, "queryDialect": "SqlDataFusion"}, 400, "this node runs Spark SQL"),
        ("post", "/query", {"query": SQL, "schemaFormat": "Parquet"}, 400, "answers ArrowJson only"),
        ("post", "/query", {"query": SQL, "limit": -1}, 400, "limit -1"),
        ("post", "/query", {"query": "SELECT * FROM nowhere"}, 400, "relation nowhere at line 1, column 15"),
        (
            "post",
            "/query",
            {"query": "SELECT 1 FROM t", "datasets": [{"id": "did:odf:fed01" + "00" * 32, "alias": "t"}]},
            404,
            "Dataset not found: did:odf:fed01",
        ),
        ("get", "/verify", None, 405, "/verify answers POST"),
        ("post", "/verify", {"input": {}}, 400, "missing field 'subQueries'"),
    ],
)
def test_errors_as_kamus_api_error(
    node: tuple[str, QueryEndpoint], method: str, path: str, payload: Any, status: int, message: str
) -> None:
    url, _ = node
    answer = requests.request(method, url + path, json=payload, timeout=120)
    assert answer.status_code == status
    assert message in answer.json()["message"]


def test_a_bad_body(node: tuple[str, QueryEndpoint]) -> None:
    url, _ = node
    answer = requests.post(f"{url}/query", data=b"{not json", timeout=30)
    assert (answer.status_code, answer.json()["message"][:21]) == (400, "the body is not JSON:")
    answer = requests.post(f"{url}/query", data=b"x" * (QueryEndpoint.max_body_bytes + 1), timeout=30)
    assert answer.status_code == 413


# ------------------------------------------------------------ the command line


def _flip(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def test_proof_and_verify_query(
    pipeline: Pipeline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(pipeline.repo.root, repo)  # its slices are tampered with below
    base = ["--repo", str(repo)]
    proof = tmp_path / "proof.json"
    assert main(["sql", SQL, *base, "--proof", str(proof), "--limit", "3"]) == 0
    document = json.loads(proof.read_text())
    assert_consistent(document)
    assert [row["offset"] for row in document["output"]["data"]] == [0, 1, 2]
    capsys.readouterr()

    def verify(text: str) -> tuple[int, dict[str, Any]]:
        path = tmp_path / "commitment.json"
        path.write_text(text)
        code = main(["verify-query", str(path), *base])
        return code, json.loads(capsys.readouterr().out)

    text = proof.read_text()
    assert verify(text) == (0, {"ok": True})
    assert (
        verify(_flip(text, "ORDER BY offset", "ORDER BY offsex"))[1]["error"]["kind"]
        == "InvalidRequest::InputHash"
    )
    value = document["proof"]["proofValue"]
    flipped = value[:10] + ("A" if value[10] != "A" else "B") + value[11:]
    code, answer = verify(_flip(text, value, flipped))
    assert (code, answer["error"]["kind"]) == (4, "InvalidRequest::BadSignature")
    code, answer = verify(_flip(text, '"ACME"', '"ACMF"'))  # the output, changed in the document
    assert (code, answer["error"]["kind"]) == (4, "InvalidRequest::OutputHash")

    # a slice of the repository changed: the re-executed query gives another output
    dataset = Repository.open(repo).dataset(ROOT)
    first = sorted((dataset.store.local_path("data") or repo).iterdir())
    for path in first:
        table = pq.read_table(path)
        if 0 in table.column("offset").to_pylist():
            symbols = pa.array(
                [
                    "FAKE" if o == 0 else s
                    for o, s in zip(table["offset"].to_pylist(), table["symbol"].to_pylist(), strict=True)
                ]
            )
            pq.write_table(
                table.set_column(
                    table.schema.get_field_index("symbol"), table.schema.field("symbol"), symbols
                ),
                path,
            )
    code, answer = verify(text)
    assert (code, answer["error"]["kind"]) == (4, "VerificationFailed::OutputMismatch")
    assert answer["error"]["expected_hash"] == document["commitment"]["outputHash"]

    assert main(["verify-query", str(tmp_path / "missing.json"), *base]) == 2
    assert "cannot read file" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text(json.dumps({"input": {"query": "x"}}))
    assert main(["verify-query", str(tmp_path / "bad.json"), *base]) == 2
    assert "missing field 'subQueries'" in capsys.readouterr().err


# ------------------------------------------------------------ `odf serve --query`, as a process


def test_odf_serve_query(pipeline: Pipeline, tmp_path: Path) -> None:
    """The one subprocess test: the command starts, prints its node, requires the configured token, and
    answers and verifies a commitment (its own JVM: ~10 s)."""
    env = {**os.environ, "ODF_SERVE_TOKEN": "s3cret", "ODF_KEYS_DIR": str(tmp_path / "keys")}
    command = [
        sys.executable,
        "-m",
        "airflow_odf.cli",
        "serve",
        "--query",
        "--port",
        "0",
        "--repo",
        str(pipeline.repo.root),
    ]
    with subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stderr is not None
            found = None
            for line in process.stderr:
                found = re.search(
                    r"query API: (\S+)/query and /verify \(SqlSpark\), node (did:key:z6Mk\S+)", line
                )
                if found:
                    break
            assert found, "no start-up line"
            url, did = found.groups()
            assert requests.get(f"{url}/query", params={"query": "SELECT 1"}, timeout=30).status_code == 401
            auth = {"Authorization": "Bearer s3cret"}
            answer = requests.get(
                f"{url}/query", params={"query": SQL, "include": "proof"}, headers=auth, timeout=300
            )
            data = answer.json()
            assert_consistent(data)
            assert data["proof"]["verificationMethod"] == did
            commitment = {k: v for k, v in data.items() if k != "output"}
            assert requests.post(f"{url}/verify", json=commitment, headers=auth, timeout=300).json() == {
                "ok": True
            }
        finally:
            process.terminate()
            process.wait(timeout=30)

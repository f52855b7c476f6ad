"""Query commitments as kamu makes and checks them: a node signs that a query over exact blocks of its
datasets returned this output, and anyone holding those blocks can re-execute it (docs/query-commitments.md).

`answer_query` runs a kamu query request and answers as kamu's `/query` does: `output` (the rows in
kamu's JSON encoding), with `input` (the request, every dataset it read pinned by DID and block hash),
and with a proof: `subQueries` (`[]`), `commitment` (`inputHash`, `outputHash`, `subQueriesHash`: the
SHA3-256 multihashes of their canonical JSON) and an `Ed25519Signature2020` over the canonical JSON of
the commitment by the node's `did:key`. Every dataset is read as of a block: the one the request pins,
else its head when the query starts — so `input.datasets` is what was read, whatever commits meanwhile.

`verify_commitment` answers as kamu's `/verify`: the input and sub-queries hashes, the signature, then the
re-execution of `input` (datasets found by DID — the alias is only the name the query uses — and read as
of their blocks) and the output hash; the first check that fails is the answer, with kamu's kind and
message. The SQL policy applies on both paths before anything runs (the query is the request's).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.odf.chain.data_access import BlockNotInChainError
from airflow_odf.odf.engine_client.query_contract import QueryRequest
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.identity.canonical import canonical_hash, canonical_json
from airflow_odf.odf.identity.signing import (
    PROOF_TYPE,
    is_valid_signature,
    parse_signature,
    public_key_of,
    sign,
    signature_text,
)
from airflow_odf.odf.query.data_json import arrow_json_schema, encode_data
from airflow_odf.odf.query.request import (
    QUERY_DIALECT,
    SCHEMA_FORMAT,
    DatasetPin,
    QueryInput,
    RequestError,
    parse_multihash,
)
from airflow_odf.odf.query.run import query_operation, run_request
from airflow_odf.odf.query.tables import PinnedData, dataset_names, names_in, pin
from airflow_odf.odf.repo.repository import Repository

_CANNOT_DISPUTE = "The commitment is invalid and cannot be disputed: "
# kamu's messages (src/adapter/http/src/data/verify_types.rs), word for word
_MESSAGES = {
    "InvalidRequest::InputHash": _CANNOT_DISPUTE
    + "commitment.inputHash doesn't match the hash of input object",
    "InvalidRequest::SubQueriesHash": _CANNOT_DISPUTE
    + "commitment.subQueriesHash doesn't match the hash of subQueries object",
    "VerificationFailed::OutputMismatch": "Query was reproduced but resulted in output hash different from "
    "expected. This means that the output was either falsified, or the query reproducibility was not "
    "guaranteed by the system.",
    "VerificationFailed::DatasetNotFound": "Unable to reproduce the query as one of the input datasets "
    "cannot be found. The owner of dataset either deleted it or made private or this node requires "
    "additional configuration in order to locate it.",
    "VerificationFailed::DatasetBlockNotFound": "Unable to reproduce the query as one of the input datasets "
    "does not contain a block with specified hash. Under normal circumstances a block can disappear only "
    "when the owner of dataset performs history-altering operation such as reset or hard compaction. There "
    "is also a probability that block hash was spoofed in the original request to falsify the results.",
    # ours: kamu's /verify never sees the output; a commitment document (`odf verify-query`) carries it
    "InvalidRequest::OutputHash": _CANNOT_DISPUTE
    + "commitment.outputHash doesn't match the hash of output object",
}
BAD_SIGNATURE = "Verification equation was not satisfied"  # ed25519-dalek's words, as kamu answers them
_VERIFY_FIELDS = ("input", "output", "subQueries", "commitment", "proof")
_COMMITMENT_FIELDS = ("inputHash", "outputHash", "subQueriesHash")
_PROOF_FIELDS = ("type", "verificationMethod", "proofValue")
MAX_SUB_QUERIES = 100


class InputDatasetNotFound(OdfError):
    """A dataset the request pins by DID is not in this repository (HTTP 404, as kamu's)."""

    def __init__(self, dataset_id: DatasetId) -> None:
        super().__init__(f"Dataset not found: {dataset_id}")
        self.dataset_id = dataset_id


class InputBlockNotFound(OdfError):
    """A block the request pins is not in its dataset's chain (HTTP 404, as kamu's)."""

    def __init__(self, dataset_id: DatasetId, block_hash: Multihash) -> None:
        super().__init__(f"Dataset {dataset_id} does not have a block {block_hash}")
        self.dataset_id = dataset_id
        self.block_hash = block_hash


@dataclass(frozen=True)
class BoundDataset:
    """A dataset as a query reads it: its pin (filled with the block read) and its pinned data."""

    pin: DatasetPin
    data: PinnedData
    spellings: tuple[str, ...]


def bind_datasets(repo: Repository, sql: str, pins: Sequence[DatasetPin]) -> list[BoundDataset]:
    """Every dataset the query reads (after the SQL policy accepted it) and every pinned one, each as
    of its pinned block or its head now, sorted by DID. A relation is a pin's alias (found by DID), else
    a dataset of the repository by name."""
    by_alias = {p.alias.lower(): p for p in pins}
    reads = names_in(sql, [*dataset_names(repo), *(p.alias for p in pins)])  # the policy's check first
    named = {name.lower(): name for name in reads}
    bound = []
    for key in sorted(set(by_alias) | set(named)):
        given = by_alias.get(key)
        did = given.id if given is not None else repo.resolve(named[key])
        dataset = repo.dataset_by_id(did)
        if dataset.head() is None:
            raise InputDatasetNotFound(did)
        state = dataset.state(record=False)
        block = None if given is None else given.block_hash
        try:
            data = pin(dataset, state, block)
        except BlockNotInChainError:
            raise InputBlockNotFound(did, block or state.head) from None  # only a given block walks
        alias = given.alias if given is not None else named[key]
        spellings = tuple(reads.get(named.get(key, ""), ())) or (alias,)
        bound.append(BoundDataset(DatasetPin(did, alias, data.block), data, spellings))
    return sorted(bound, key=lambda b: b.pin.id.to_did_odf())


def answer_query(
    repo: Repository, runner: EngineRunner, request: QueryInput, *, work_dir: Path, node_key: bytes | None
) -> dict[str, Any]:
    """kamu's `/query` answer to `request`; RequestError for a request this node cannot answer,
    InputDatasetNotFound / InputBlockNotFound for a pin that leads nowhere, QueryError for a query the
    policy or Spark refuses."""
    request = request.normalized()
    if request.query_dialect != QUERY_DIALECT:
        raise RequestError(
            f"queryDialect {request.query_dialect}: this node runs Spark SQL, "
            f"ask with queryDialect {QUERY_DIALECT}"
        )
    if request.schema_format not in (None, SCHEMA_FORMAT):
        raise RequestError(f"schemaFormat {request.schema_format}: this node answers {SCHEMA_FORMAT} only")
    if "Proof" in request.include and node_key is None:
        raise RequestError("Response signing is not enabled by the node operator")
    if not request.query.strip():
        raise RequestError("query: empty")
    bound = bind_datasets(repo, request.query, request.datasets or ())
    table = _rows(repo, runner, request, bound, work_dir)
    output: dict[str, Any] = {
        "data": encode_data(table, request.data_format),
        "dataFormat": request.data_format,
    }
    if request.schema_format is not None:
        output["schema"] = arrow_json_schema(table.schema)
        output["schemaFormat"] = request.schema_format
    answer: dict[str, Any] = {}
    if "Input" in request.include:
        answer["input"] = replace(request, datasets=tuple(b.pin for b in bound)).to_json()
    answer["output"] = output
    if "Proof" in request.include and node_key is not None:
        answer["subQueries"] = []
        answer["commitment"] = {
            "inputHash": canonical_hash(answer["input"]),
            "outputHash": canonical_hash(output),
            "subQueriesHash": canonical_hash(answer["subQueries"]),
        }
        answer["proof"] = sign_commitment(node_key, answer["commitment"])
    return answer


def _rows(
    repo: Repository, runner: EngineRunner, request: QueryInput, bound: list[BoundDataset], work_dir: Path
) -> pa.Table:
    """The result's rows `skip` to `skip + limit`: the engine leaves out the first and writes at most
    `limit + 1` (its cap), so no more is ever read."""
    with query_operation(repo, work_dir) as operation:
        engine_request = QueryRequest(
            operation_id=operation.op_dir.name,
            sql=request.query,
            tables=[t for b in bound for t in b.data.views(operation.op_dir, b.spellings)],
            out_dir=operation.out_dir,
            max_rows=request.limit,
            skip=request.skip,
        )
        files = operation.fetch(repo, run_request(repo, engine_request, runner, operation.op_dir).files)
        table = pq.read_table(files[0]) if files else pa.table({})
    return table.slice(0, request.limit)


def sign_commitment(node_key: bytes, commitment: dict[str, str]) -> dict[str, str]:
    """The `Ed25519Signature2020` proof of a commitment by the node's `did:key`."""
    return {
        "type": PROOF_TYPE,
        "verificationMethod": node_did(node_key),
        "proofValue": signature_text(sign(node_key, canonical_json(commitment))),
    }


@functools.lru_cache(maxsize=8)
def node_did(node_key: bytes) -> str:
    """The node's identity, `did:key:z6Mk…`."""
    return public_key_of(node_key).to_did_key()


def _failure(kind: str, message: str | None = None, **details: str) -> dict[str, Any]:
    return {"ok": False, "error": {"kind": kind, "message": message or _MESSAGES[kind], **details}}


def verify_commitment(
    repo: Repository, runner: EngineRunner, document: Any, *, work_dir: Path
) -> dict[str, Any]:
    """kamu's `/verify` answer to `document` (`{input, subQueries, commitment, proof}`, and `output`
    when given, as in a commitment file): `{"ok": true}` or `{"ok": false, "error": {kind, message,
    ...}}`. RequestError for a document that is not one; QueryError when the re-executed query fails."""
    if not isinstance(document, dict):
        raise RequestError(f"the commitment: expected a JSON object, got {type(document).__name__}")
    unknown = sorted(set(document) - set(_VERIFY_FIELDS))
    missing = [name for name in _VERIFY_FIELDS if name != "output" and name not in document]
    if unknown or missing:
        problem = f"unknown field {unknown[0]!r}" if unknown else f"missing field {missing[0]!r}"
        raise RequestError(f"the commitment: {problem} (expected input, subQueries, commitment, proof)")
    request = QueryInput.from_json(document["input"], "input")
    sub_queries = document["subQueries"]
    if not isinstance(sub_queries, list) or len(sub_queries) > MAX_SUB_QUERIES:
        raise RequestError(f"subQueries: expected a list of at most {MAX_SUB_QUERIES}")
    commitment = _commitment(document["commitment"])
    signer, signature = _proof(document["proof"])

    if commitment["inputHash"] != canonical_hash(request.to_json()):
        return _failure("InvalidRequest::InputHash")
    if commitment["subQueriesHash"] != canonical_hash(sub_queries):
        return _failure("InvalidRequest::SubQueriesHash")
    if signature is None or not is_valid_signature(signer, signature, canonical_json(commitment)):
        return _failure("InvalidRequest::BadSignature", _CANNOT_DISPUTE + BAD_SIGNATURE)
    if "output" in document and commitment["outputHash"] != canonical_hash(document["output"]):
        return _failure("InvalidRequest::OutputHash")
    try:
        again = answer_query(
            repo, runner, replace(request, include=frozenset()), work_dir=work_dir, node_key=None
        )
    except InputDatasetNotFound as e:
        return _failure("VerificationFailed::DatasetNotFound", dataset_id=e.dataset_id.to_did_odf())
    except InputBlockNotFound as e:
        return _failure(
            "VerificationFailed::DatasetBlockNotFound",
            dataset_id=e.dataset_id.to_did_odf(),
            block_hash=str(e.block_hash),
        )
    actual = canonical_hash(again["output"])
    if actual != commitment["outputHash"]:
        return _failure(
            "VerificationFailed::OutputMismatch", expected_hash=commitment["outputHash"], actual_hash=actual
        )
    return {"ok": True}


def _commitment(value: Any) -> dict[str, str]:
    """The commitment as kamu re-serializes it (each hash in its canonical multibase form)."""
    if not isinstance(value, dict) or set(value) != set(_COMMITMENT_FIELDS):
        raise RequestError(f"commitment: expected an object of exactly {', '.join(_COMMITMENT_FIELDS)}")
    return {name: str(parse_multihash(value[name], f"commitment.{name}")) for name in _COMMITMENT_FIELDS}


def _proof(value: Any) -> tuple[DatasetId, bytes | None]:
    """The signer and the signature (None when `proofValue` is no ed25519 signature: a bad one)."""
    if not isinstance(value, dict) or set(value) != set(_PROOF_FIELDS):
        raise RequestError(f"proof: expected an object of exactly {', '.join(_PROOF_FIELDS)}")
    if value["type"] != PROOF_TYPE:
        raise RequestError(f"proof.type {value['type']!r}: expected {PROOF_TYPE}")
    method = value["verificationMethod"]
    try:
        if not isinstance(method, str) or not method.startswith(DatasetId.DID_KEY):
            raise OdfError("expected an ed25519 did:key")
        signer = DatasetId.parse(method)
    except OdfError as e:
        raise RequestError(f"proof.verificationMethod {method!r}: {e}") from None
    try:
        return signer, parse_signature(value["proofValue"])
    except OdfError:
        return signer, None

"""Signed heads on the local disk: every head a repository commits for a dataset whose key it holds is
attested (commit, reset), in the right order; a pulled dataset without its key is not; pulls carry the
head's attestation and refuse a bad one (another key or dataset, a flipped byte, one replayed from
another head, a forked chain under a copied DID) before writing anything; `require` also refuses a
missing one, `check` notes it (chains as kamu writes them carry none); verify names the signer; gc keeps
what a head or a commit in flight needs. The same transfers over S3 and HTTP: tests/sharing."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airflow_odf.odf.chain.dataset import Dataset, StagedObject
from airflow_odf.odf.chain.integrity import collect_garbage
from airflow_odf.odf.chain.verification import read_record, verify_dataset
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.identity.attestation import (
    AttestationError,
    HeadFacts,
    attestation_key,
    check_attestation,
    make_attestation,
)
from airflow_odf.odf.identity.canonical import canonical_json
from airflow_odf.odf.identity.signing import sign, signature_text
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.sharing.push_pull import pull_dataset, push_dataset
from airflow_odf.odf.sharing.sync import SignatureRefusedError, sync
from airflow_odf.odf.storage.local import LocalObjectStore
from tests.unit.test_dataset import add_data, rich_dataset
from tests.unit.test_repository_cli import odf

NAME = "com.example.trades"


def signed_repo(root: Path, tmp_path: Path, name: str = NAME) -> tuple[Repository, DatasetId]:
    """A repository holding the key of its one dataset (8 blocks: 5 events, then 3 AddData commits)."""
    repo = Repository.init(root)
    did, secret = DatasetId.generate()
    repo.keys.save(secret)
    seed = model.Seed(dataset_id=did, dataset_kind=model.DatasetKind.ROOT)
    rich_dataset(root, tmp_path / f"stage-{root.name}", dataset=repo.dataset_by_id(did), seed=seed)
    repo.register_name(name, did)
    return repo, did


def folder(repo: Repository, did: DatasetId) -> Path:
    return repo.root / "datasets" / str(did).removeprefix("did:odf:")


def facts_of(dataset: Dataset, did: DatasetId, head: Multihash) -> HeadFacts:
    block = dataset.block(head)
    return HeadFacts(did, head, block.sequence_number, block.prev_block_hash)


def independently_checked(data: bytes, facts: HeadFacts) -> None:
    """The attestation checked without the code under test: canonical JSON by hand, ed25519 by
    `cryptography` against the public key inside the DID."""
    document = json.loads(data)
    proof = document.pop("proof")
    assert document == {
        "version": 1,
        "type": "OdfHeadAttestation",
        "dataset": facts.dataset.to_did_odf(),
        "head": str(facts.head),
        "sequenceNumber": facts.sequence_number,
        "prevHead": None if facts.prev_head is None else str(facts.prev_head),
    }
    assert (
        proof["type"] == "Ed25519Signature2020" and proof["verificationMethod"] == facts.dataset.to_did_odf()
    )
    compact = {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False}
    assert data == json.dumps({**document, "proof": proof}, **compact).encode()  # stored canonical
    signature = base64.urlsafe_b64decode(proof["proofValue"][1:] + "==")
    Ed25519PublicKey.from_public_bytes(facts.dataset.public_key).verify(
        signature, json.dumps(document, **compact).encode()
    )


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def forged(facts: HeadFacts, secret: bytes) -> bytes:
    """An attestation of `facts` that names the dataset's DID but is signed by another key."""
    claims = facts.claims()
    proof = {
        "type": "Ed25519Signature2020",
        "verificationMethod": facts.dataset.to_did_odf(),
        "proofValue": signature_text(sign(secret, canonical_json(claims))),
    }
    return canonical_json({**claims, "proof": proof})


# ----- signing -----


def test_every_commit_stores_the_attestation_of_its_head(tmp_path: Path) -> None:
    repo, did = signed_repo(tmp_path / "a", tmp_path)
    dataset = repo.dataset(NAME)
    chain = list(dataset.iter_blocks())
    # one commit of 5 events, then 3 commits of one block: 4 heads, each attested
    heads = [h for h, b in chain if b.sequence_number in (4, 5, 6, 7)]
    attested = sorted(p.name for p in (folder(repo, did) / "attestations").iterdir())
    assert attested == sorted(str(h) for h in heads)
    for h in heads:
        data = dataset.store.get(attestation_key(h))
        facts = facts_of(dataset, did, h)
        assert check_attestation(data, facts) == did
        independently_checked(data, facts)
        assert 300 < len(data) < 600
    head_facts = facts_of(dataset, did, chain[0][0])
    assert head_facts.sequence_number == 7 and head_facts.prev_head == chain[1][0]


def test_objects_then_blocks_then_the_attestation_then_the_ref(tmp_path: Path) -> None:
    repo, _did = signed_repo(tmp_path / "a", tmp_path)
    dataset = repo.dataset(NAME)
    order: list[str] = []
    store: Any = dataset.store
    for method in ("put", "put_file", "compare_and_swap"):
        original = getattr(store, method)

        def recording(key: str, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            order.append(key)
            return _original(key, *args, **kwargs)

        setattr(store, method, recording)
    staged = tmp_path / "new-data"
    staged.write_bytes(b"fresh bytes")
    digest = Multihash.sha3_256(b"fresh bytes")
    state = dataset.state()
    event = add_data(state, digest, staged.stat().st_size, 3, watermark=state.watermark)
    result = dataset.commit([event], objects=[StagedObject(f"data/{digest}", staged)])
    assert result.attested
    key = attestation_key(result.new_head)
    steps = [order.index(k) for k in (f"data/{digest}", f"blocks/{result.new_head}", key, "refs/head")]
    assert steps == sorted(steps), order


def test_the_key_is_read_once_per_dataset_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, did = signed_repo(tmp_path / "a", tmp_path)
    reads: list[DatasetId] = []
    original = repo.keys.secret
    monkeypatch.setattr(repo.keys, "secret", lambda identity: reads.append(identity) or original(identity))
    dataset = repo.dataset(NAME)
    for i in range(3):
        assert dataset.commit([model.SetInfo(description=f"again {i}")]).attested
    assert reads == [did]
    repo.dataset(NAME).head()  # a dataset that only reads never asks
    assert reads == [did]


def test_reset_signs_the_head_it_moves_to(tmp_path: Path) -> None:
    repo, did = signed_repo(tmp_path / "a", tmp_path)
    dataset = repo.dataset(NAME)
    chain = list(dataset.iter_blocks())
    target = chain[5][0]  # a block inside the first commit: never a head, so never attested before
    assert not dataset.store.exists(attestation_key(target))
    result = dataset.reset(target)
    assert result.attested and dataset.head() == target
    independently_checked(dataset.store.get(attestation_key(target)), facts_of(dataset, did, target))


def test_a_pulled_dataset_whose_key_is_elsewhere_is_not_signed_here(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    origin, did = signed_repo(tmp_path / "a", tmp_path)
    replica = Repository.init(tmp_path / "b")
    pull_dataset(replica, folder(origin, did).as_uri(), name=NAME)
    assert not replica.keys.has(did)
    with caplog.at_level(logging.WARNING, logger="airflow_odf.odf.chain.dataset"):
        result = replica.dataset(NAME).commit([model.SetInfo(description="local change")])
    assert not result.attested
    assert not (folder(replica, did) / attestation_key(result.new_head)).exists()
    assert f"{did}: head {result.new_head} is not signed" in caplog.text
    assert "previous head was signed elsewhere" in caplog.text


# ----- transfer -----


def test_push_and_pull_carry_the_head_attestation_verbatim(tmp_path: Path) -> None:
    origin, did = signed_repo(tmp_path / "a", tmp_path)
    head = origin.dataset(NAME).head()
    remote = tmp_path / "remote" / NAME
    pushed = push_dataset(origin, NAME, remote.as_uri())
    assert pushed.result.signature is not None and pushed.result.signature.signer == did
    original = (folder(origin, did) / attestation_key(head)).read_bytes()
    # only the head's attestation travels, never an older one
    assert {p.name for p in (remote / "attestations").iterdir()} == {str(head)}
    assert (remote / attestation_key(head)).read_bytes() == original
    replica = Repository.init(tmp_path / "b")
    pulled = pull_dataset(replica, remote.as_uri(), name=NAME)
    assert pulled.as_dict()["signature"] == {"status": "signed", "signer": str(did)}
    assert (folder(replica, did) / attestation_key(head)).read_bytes() == original
    assert verify_dataset(replica.dataset(NAME)).signature.signer == did


def test_the_destination_gets_the_attestation_before_its_ref_moves(tmp_path: Path) -> None:
    origin, _did = signed_repo(tmp_path / "a", tmp_path)
    head = origin.dataset(NAME).head()
    order: list[str] = []
    store: Any = LocalObjectStore(tmp_path / "copy")
    for method in ("put", "put_many", "put_file", "compare_and_swap"):
        original = getattr(store, method)

        def recording(first: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            order.extend([k for k, _ in first] if isinstance(first, list) else [first])
            return _original(first, *args, **kwargs)

        setattr(store, method, recording)
    sync(origin.dataset(NAME), Dataset(store))
    assert order.index(f"blocks/{head}") < order.index(attestation_key(head)) < order.index("refs/head")


def _refusal_cases(origin: Repository, did: DatasetId) -> dict[str, bytes]:
    dataset = origin.dataset(NAME)
    head = dataset.head()
    assert head is not None
    facts = facts_of(dataset, did, head)
    genuine = dataset.store.get(attestation_key(head))
    other_did, other_secret = DatasetId.generate()
    previous = next(h for h, b in dataset.iter_blocks() if b.sequence_number == 6)
    flipped = bytearray(genuine)
    flipped[genuine.index(b'"proofValue":"u') + 20] ^= 0x01
    return {
        "another key": forged(facts, other_secret),
        "another dataset": make_attestation(other_secret, HeadFacts(other_did, head, 7, facts.prev_head)),
        "a flipped byte": bytes(flipped),
        "replayed from another head": dataset.store.get(attestation_key(previous)),
    }


KINDS = {
    "another key": "bad-signature",
    "another dataset": "other-dataset",
    "a flipped byte": "bad-signature",
    "replayed from another head": "other-head",
}


@pytest.mark.parametrize("case", sorted(KINDS))
@pytest.mark.parametrize("policy", ["check", "require"])
def test_a_pull_refuses_a_bad_attestation_and_writes_nothing(tmp_path: Path, case: str, policy: str) -> None:
    origin, did = signed_repo(tmp_path / "a", tmp_path)
    head = origin.dataset(NAME).head()
    remote = tmp_path / "remote" / NAME
    push_dataset(origin, NAME, remote.as_uri())
    (remote / attestation_key(head)).write_bytes(_refusal_cases(origin, did)[case])
    replica = Repository.init(tmp_path / "b")
    before = files_under(replica.root)
    with pytest.raises(SignatureRefusedError) as refused:
        pull_dataset(replica, remote.as_uri(), name=NAME, signatures=policy)  # type: ignore[arg-type]
    message = str(refused.value)
    assert "\n" not in message and str(did) in message and f"head {head}" in message
    assert f"({KINDS[case]}:" in message and "nothing was written" in message
    assert files_under(replica.root) == before and replica.list() == []


def test_a_refused_update_leaves_the_local_dataset_as_it_was(tmp_path: Path) -> None:
    origin, _did = signed_repo(tmp_path / "a", tmp_path)
    remote = tmp_path / "remote" / NAME
    push_dataset(origin, NAME, remote.as_uri())
    replica = Repository.init(tmp_path / "b")
    pull_dataset(replica, remote.as_uri(), name=NAME)
    origin.dataset(NAME).commit([model.SetInfo(description="newer")])
    push_dataset(origin, NAME, remote.as_uri())
    new_head = origin.dataset(NAME).head()
    data = bytearray((remote / attestation_key(new_head)).read_bytes())
    data[len(data) // 2] ^= 0x04
    (remote / attestation_key(new_head)).write_bytes(bytes(data))
    before = files_under(replica.root)
    with pytest.raises(SignatureRefusedError):
        pull_dataset(replica, name=NAME)
    assert files_under(replica.root) == before


def test_any_flipped_byte_of_an_attestation_is_refused(tmp_path: Path) -> None:
    """No byte of the document can change and still check: canonical JSON, canonical signature text."""
    origin, did = signed_repo(tmp_path / "a", tmp_path)
    dataset = origin.dataset(NAME)
    head = dataset.head()
    assert head is not None
    facts = facts_of(dataset, did, head)
    genuine = dataset.store.get(attestation_key(head))
    kinds = set()
    for i in range(len(genuine)):
        for bit in (0x01, 0x20):
            flipped = bytearray(genuine)
            flipped[i] ^= bit
            with pytest.raises(AttestationError) as bad:
                check_attestation(bytes(flipped), facts)
            kinds.add(bad.value.kind)
    assert kinds == {"malformed", "other-dataset", "other-head", "bad-signature"}


def test_unsigned_chains_as_kamu_writes_them_pull_with_a_note(tmp_path: Path) -> None:
    """kamu's datasets carry no attestations: the same layout (blocks, refs, data, checkpoints) and
    nothing else, here written by a bare Dataset."""
    source = tmp_path / "kamu-made"
    rich_dataset(source, tmp_path / "stage")
    assert not (source / "attestations").exists()
    notes: list[str] = []
    replica = Repository.init(tmp_path / "b")
    pulled = pull_dataset(replica, source.as_uri(), name=NAME, log=notes.append)
    assert pulled.as_dict()["signature"] == {"status": "missing", "signer": None}
    assert [n for n in notes if n.startswith("note: ")] == [
        f"note: {pulled.dataset_id}: head {pulled.result.new_head} carries no attestation, "
        "so who published it is unknown"
    ]
    other = Repository.init(tmp_path / "c")
    with pytest.raises(SignatureRefusedError, match=r"carries no attestation \(signatures are required\)"):
        pull_dataset(other, source.as_uri(), name=NAME, signatures="require")
    assert other.list() == []
    assert pull_dataset(other, source.as_uri(), name=NAME, signatures="ignore").result.new_head is not None


def test_a_chain_forked_under_a_copied_did_is_refused(tmp_path: Path) -> None:
    """Someone copies the victim's chain and appends their own blocks under its DID: a forged
    attestation is refused under `check`, a missing one under `require`."""
    origin, did = signed_repo(tmp_path / "a", tmp_path)
    genuine_remote = tmp_path / "genuine" / NAME
    push_dataset(origin, NAME, genuine_remote.as_uri())
    victim = Repository.init(tmp_path / "victim")
    pull_dataset(victim, genuine_remote.as_uri(), name=NAME)
    before = files_under(victim.root)

    fork = tmp_path / "fork" / NAME
    push_dataset(origin, NAME, fork.as_uri(), remember=False)
    forked = Dataset(LocalObjectStore(fork))  # no key: whoever forks has only the public chain
    head = forked.commit([model.SetInfo(description="not the owner's")]).new_head
    assert head is not None and not (fork / attestation_key(head)).exists()
    with pytest.raises(SignatureRefusedError, match="signatures are required"):
        pull_dataset(victim, fork.as_uri(), name=NAME, signatures="require", remember=False)
    assert files_under(victim.root) == before

    _, attacker_secret = DatasetId.generate()
    (fork / attestation_key(head)).write_bytes(forged(facts_of(forked, did, head), attacker_secret))
    with pytest.raises(
        SignatureRefusedError, match=r"\(bad-signature: the signature is not one by the key of"
    ):
        pull_dataset(victim, fork.as_uri(), name=NAME, remember=False)
    assert files_under(victim.root) == before


def test_an_attestation_larger_than_any_is_refused_unread(tmp_path: Path) -> None:
    origin, _did = signed_repo(tmp_path / "a", tmp_path)
    head = origin.dataset(NAME).head()
    remote = tmp_path / "remote" / NAME
    push_dataset(origin, NAME, remote.as_uri())
    (remote / attestation_key(head)).write_bytes(b" " * (1 << 20))
    replica = Repository.init(tmp_path / "b")
    with pytest.raises(SignatureRefusedError, match=r"\(malformed: .*larger than 4096 bytes"):
        pull_dataset(replica, remote.as_uri(), name=NAME)
    assert replica.list() == []


# ----- verify and gc -----


def test_verify_names_the_signer_and_fails_on_a_bad_attestation(tmp_path: Path) -> None:
    repo, did = signed_repo(tmp_path / "a", tmp_path)
    dataset = repo.dataset(NAME)
    head = dataset.head()
    assert head is not None
    report = verify_dataset(dataset)
    assert report.ok and report.signature is not None and report.signature.signer == did
    assert report.describe().endswith(f"; head {head} signed by {did}")
    assert report.fields()["signature"] == {"status": "signed", "signer": str(did)}
    record = read_record(dataset).integrity
    assert record is not None and record.signer == str(did)
    path = folder(repo, did) / attestation_key(head)
    path.write_bytes(forged(facts_of(dataset, did, head), DatasetId.generate()[1]))
    bad = verify_dataset(dataset)  # incremental: nothing new, yet the head's attestation is read again
    assert not bad.ok and [(p.kind, p.ref) for p in bad.problems] == [("signature", attestation_key(head))]
    path.unlink()
    unsigned = verify_dataset(dataset)
    assert unsigned.ok and unsigned.describe().endswith(f"; head {head} unsigned")
    assert read_record(dataset).integrity.signer == "unsigned"  # type: ignore[union-attr]


def test_gc_keeps_the_attestations_of_the_chain_and_drops_those_of_heads_that_left_it(tmp_path: Path) -> None:
    repo, did = signed_repo(tmp_path / "a", tmp_path)
    dataset = repo.dataset(NAME)
    chain = [h for h, _ in dataset.iter_blocks()]
    dataset.reset(chain[2])  # the two newest heads leave the chain; chain[2] and chain[3] stay in it
    removed = collect_garbage(dataset, min_age_seconds=0)
    assert sorted(k for k in removed if k.startswith("attestations/")) == sorted(
        attestation_key(h) for h in chain[:2]
    )
    kept = {p.name for p in (folder(repo, did) / "attestations").iterdir()}
    assert kept == {str(chain[2]), str(chain[3])}
    assert verify_dataset(dataset).signature.signer == did  # type: ignore[union-attr]


def test_gc_inside_a_commit_window_keeps_the_new_heads_attestation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attestation is stored before the ref moves; a collection at that moment finds it declared."""
    repo, did = signed_repo(tmp_path / "a", tmp_path)
    dataset = repo.dataset(NAME)
    move = dataset._move_head
    collected: list[list[str]] = []

    def collect_then_move(old: Any, new: Any) -> None:
        collected.append(collect_garbage(repo.dataset(NAME), min_age_seconds=0))
        move(old, new)

    monkeypatch.setattr(dataset, "_move_head", collect_then_move)
    result = dataset.commit([model.SetInfo(description="during gc")])
    assert collected == [[]]
    independently_checked(
        dataset.store.get(attestation_key(result.new_head)), facts_of(dataset, did, result.new_head)
    )


# ----- the command -----


def test_the_command_pulls_refuses_and_verifies(tmp_path: Path) -> None:
    origin, did = signed_repo(tmp_path / "a", tmp_path)
    head = origin.dataset(NAME).head()
    source = tmp_path / "kamu-made"
    rich_dataset(source, tmp_path / "stage")
    replica = tmp_path / "b"
    assert odf("init", repo=replica).returncode == 0
    refused = odf("pull", source.as_uri(), "--as", "unsigned", "--signatures", "require", repo=replica)
    assert refused.returncode == 2 and refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1 and "signatures are required" in refused.stderr
    noted = odf("pull", source.as_uri(), "--as", "unsigned", repo=replica)
    assert noted.returncode == 0 and "carries no attestation" in noted.stderr
    pulled = odf("pull", folder(origin, did).as_uri(), "--as", NAME, repo=replica)
    assert pulled.returncode == 0 and pulled.stdout.strip().endswith(f"head {head}, signed by {did}")
    verified = odf("verify", NAME, "--integrity", repo=replica)
    assert verified.returncode == 0 and verified.stdout.strip().endswith(f"head {head} signed by {did})")
    report = json.loads(odf("verify", "unsigned", "--integrity", "--format", "json", repo=replica).stdout)
    assert report["ok"] and report["signature"] == {"status": "missing", "signer": None}
    bogus = odf("pull", source.as_uri(), "--as", "x", "--signatures", "sometimes", repo=replica)
    assert bogus.returncode == 2 and "invalid choice: 'sometimes'" in bogus.stderr

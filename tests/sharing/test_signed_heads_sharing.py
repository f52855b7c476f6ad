"""Signed heads over S3 (moto) and HTTP (`odf serve`): push and pull carry the head's attestation
verbatim, a pull over HTTP refuses a bad one, and no dataset key ever leaves the key store — every
object pushed to S3 or to a folder, and everything `odf serve` answers from the repository that holds
the keys, is searched for the key's raw bytes, PEM, multibase and hex forms."""

from __future__ import annotations

import contextlib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.identity.attestation import attestation_key
from airflow_odf.odf.identity.keys import export_text
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.sharing.push_pull import pull_dataset, push_dataset
from airflow_odf.odf.sharing.serve import RepositoryServer
from airflow_odf.odf.sharing.sync import SignatureRefusedError
from airflow_odf.odf.storage.url import StoreCredentials
from tests.sharing.test_push_pull import s3_objects
from tests.unit.test_signed_heads import NAME, facts_of, files_under, folder, forged, signed_repo


@contextlib.contextmanager
def serving(repo: Repository) -> Iterator[str]:
    server = RepositoryServer(repo)
    server.start_in_thread()
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()


def get(url: str) -> bytes | None:
    """The body of a 200 answer; None for a 404."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read()
    except urllib.error.HTTPError as e:
        assert e.code == 404, (url, e.code)
        return None


def key_forms(repo: Repository) -> dict[str, bytes]:
    """Every form the dataset's private key is known in: raw, its PEM file, multibase, hex."""
    (identity,) = list(repo.keys.identities())
    secret = repo.keys.secret(identity)
    assert secret is not None
    (pem_file,) = list(Path(repo.keys.folder or "").glob("*.key"))
    pem = pem_file.read_bytes()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    body = b"".join(line for line in pem.splitlines() if not line.startswith(b"-----"))
    return {
        "raw": secret,
        "pem": pem,
        "pem body": body,
        "multibase": export_text(secret).encode(),
        "hex": secret.hex().encode(),
    }


def leaks(objects: dict[str, bytes], forms: dict[str, bytes]) -> list[tuple[str, str]]:
    return [(key, form) for key, data in objects.items() for form, text in forms.items() if text in data]


def test_s3_push_and_pull_carry_the_attestation(
    tmp_path: Path, s3_bucket: str, s3_credentials: StoreCredentials, moto_endpoint: str
) -> None:
    origin, did = signed_repo(tmp_path / "a", tmp_path)
    head = origin.dataset(NAME).head()
    assert head is not None
    genuine = (folder(origin, did) / attestation_key(head)).read_bytes()
    url = f"s3://{s3_bucket}/odf/{NAME}"
    pushed = push_dataset(origin, NAME, url, credentials=s3_credentials)
    assert pushed.as_dict()["signature"] == {"status": "signed", "signer": str(did)}
    in_bucket = s3_objects(moto_endpoint, s3_bucket, f"odf/{NAME}/")
    assert in_bucket[attestation_key(head)] == genuine
    assert [k for k in in_bucket if k.startswith("attestations/")] == [attestation_key(head)]
    replica = Repository.init(tmp_path / "b")
    pulled = pull_dataset(replica, url, name=NAME, credentials=s3_credentials, signatures="require")
    assert pulled.result.signature is not None and pulled.result.signature.signer == did
    assert (folder(replica, did) / attestation_key(head)).read_bytes() == genuine


def test_an_oversized_attestation_in_s3_is_refused_unread(
    tmp_path: Path, s3_bucket: str, s3_credentials: StoreCredentials, s3_admin: Any
) -> None:
    """The S3 store reads no more of an attestation than one can hold (as local disk and HTTP): a
    bucket holding a 32 MiB one is refused (malformed) and the pull writes nothing."""
    origin, _did = signed_repo(tmp_path / "a", tmp_path)
    head = origin.dataset(NAME).head()
    assert head is not None
    url = f"s3://{s3_bucket}/odf/{NAME}"
    push_dataset(origin, NAME, url, credentials=s3_credentials)
    s3_admin.put_object(Bucket=s3_bucket, Key=f"odf/{NAME}/{attestation_key(head)}", Body=b"{" * (32 << 20))
    replica = Repository.init(tmp_path / "b")
    with pytest.raises(SignatureRefusedError, match="larger than 4096 bytes"):
        pull_dataset(replica, url, name=NAME, credentials=s3_credentials)
    assert replica.list() == [] and not [p for p in (replica.root / "datasets").rglob("*") if p.is_file()]


def test_http_pull_carries_the_attestation_and_refuses_a_forged_one(tmp_path: Path) -> None:
    origin, did = signed_repo(tmp_path / "a", tmp_path)
    dataset = origin.dataset(NAME)
    head = dataset.head()
    assert head is not None
    path = folder(origin, did) / attestation_key(head)
    genuine = path.read_bytes()
    with serving(origin) as url:
        assert get(f"{url}/{NAME}/{attestation_key(head)}") == genuine
        assert get(f"{url}/{did}/{attestation_key(head)}") == genuine
        assert get(f"{url}/{NAME}/attestations/not-a-hash") is None
        replica = Repository.init(tmp_path / "b")
        pulled = pull_dataset(replica, f"{url}/{NAME}", name=NAME, signatures="require")
        assert pulled.as_dict()["signature"] == {"status": "signed", "signer": str(did)}
        assert (folder(replica, did) / attestation_key(head)).read_bytes() == genuine

        path.write_bytes(forged(facts_of(dataset, did, head), bytes(range(32))))
        other = Repository.init(tmp_path / "c")
        with pytest.raises(SignatureRefusedError, match="bad-signature"):
            pull_dataset(other, f"{url}/{NAME}", name=NAME)
        assert other.list() == [] and not [k for k in files_under(other.root) if "datasets" in k]


def test_no_key_is_ever_pushed_or_served(
    tmp_path: Path, s3_bucket: str, s3_credentials: StoreCredentials, moto_endpoint: str
) -> None:
    origin, did = signed_repo(tmp_path / "a", tmp_path)
    forms = key_forms(origin)
    assert leaks(files_under(origin.root), forms)  # the search finds the key where it is: its own file

    push_dataset(origin, NAME, f"s3://{s3_bucket}/odf/{NAME}", credentials=s3_credentials)
    bucket = s3_objects(moto_endpoint, s3_bucket, "")
    assert any(k.endswith(f"/{attestation_key(origin.dataset(NAME).head())}") for k in bucket)
    assert leaks(bucket, forms) == []

    pushed = tmp_path / "pushed" / NAME
    push_dataset(origin, NAME, pushed.as_uri())
    assert leaks(files_under(pushed.parent), forms) == []

    with serving(origin) as url:  # the repository that holds the keys, served as it is
        answered: dict[str, bytes] = {}
        inside = f"{folder(origin, did).relative_to(origin.root)}/"
        for relative in files_under(origin.root):  # every file, asked for under every prefix
            paths = {relative, relative.removeprefix(inside)}  # also as a key of the dataset
            for prefix in ("", f"/{NAME}", f"/{did}", f"/{NAME}/..", f"/{NAME}/attestations/.."):
                for path in paths:
                    body = get(f"{url}{prefix}/{path}")
                    if body is not None:
                        answered[f"{prefix}/{path}"] = body
        answered["/"] = get(f"{url}/") or b""
        assert any("/attestations/" in k for k in answered) and any("/blocks/" in k for k in answered)
        assert not any(".odf-keys" in k for k in answered)
        assert leaks(answered, forms) == []
        replica = Repository.init(tmp_path / "b")
        pull_dataset(replica, f"{url}/{NAME}", name=NAME)
    assert leaks(files_under(replica.root), forms) == []

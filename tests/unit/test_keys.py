"""The key store (`airflow_odf.odf.identity.keys`): where dataset and node keys live and what it refuses.

Real files in a temporary folder: modes as written, links and FIFOs planted as an attacker would, and
saves racing in threads. Every refusal is one line that never quotes a key.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.identity.keys import (
    KEYS_DIR_ENV,
    KeyStore,
    KeyStoreError,
    NodeKeyExistsError,
    default_keys_dir,
    export_text,
    parse_private_key,
    private_key_pem,
    write_private_file,
)
from airflow_odf.odf.identity.signing import public_key_of
from airflow_odf.odf.repo.repository import Repository


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _one_line(error: pytest.ExceptionInfo[KeyStoreError], secret: bytes) -> str:
    """The message, checked to be one line and to show the key in none of its forms."""
    message = str(error.value)
    assert "\n" not in message
    assert export_text(secret)[1:] not in message and secret.hex() not in message
    assert private_key_pem(secret).decode().splitlines()[1] not in message
    return message


def test_a_repository_keeps_each_new_dataset_key_beside_its_marker(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "repo")
    did = repo.add(model.DatasetSnapshot(name="a", kind=model.DatasetKind.ROOT, metadata=[])).dataset_id
    folder = tmp_path / "repo" / ".odf-keys"
    key_file = folder / (did.to_did_odf().removeprefix("did:odf:") + ".key")
    assert repo.keys.folder == folder
    assert _mode(folder) == 0o700 and _mode(key_file) == 0o600
    assert key_file.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public_key_of(repo.keys.secret(did) or b"") == did
    assert list(repo.keys.identities()) == [did]


def test_default_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEYS_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert default_keys_dir(tmp_path / "repo") == tmp_path / "repo" / ".odf-keys"
    assert default_keys_dir(None) == tmp_path / "config" / "airflow-provider-odf" / "keys"
    monkeypatch.setenv(KEYS_DIR_ENV, str(tmp_path / "mine"))
    assert default_keys_dir(tmp_path / "repo") == default_keys_dir(None) == tmp_path / "mine"


def test_the_folder_is_created_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o277)  # would make it 0500: unwritable
    try:
        KeyStore(tmp_path / "keys").save(DatasetId.generate()[1])
    finally:
        os.umask(old)
    assert _mode(tmp_path / "keys") == 0o700
    assert [_mode(p) for p in (tmp_path / "keys").iterdir()] == [0o600]


def test_a_folder_open_to_others_is_refused_for_writing(tmp_path: Path) -> None:
    folder = tmp_path / "keys"
    folder.mkdir()
    folder.chmod(0o755)
    secret = DatasetId.generate()[1]
    with pytest.raises(KeyStoreError) as e:
        KeyStore(folder).save(secret)
    assert (
        _one_line(e, secret) == f"the key folder {folder} is open to group or others (mode 755): chmod 700 it"
    )
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_a_key_file_open_to_others_is_refused(tmp_path: Path, mode: int) -> None:
    store = KeyStore(tmp_path / "keys")
    did = store.save(secret := DatasetId.generate()[1])
    path = tmp_path / "keys" / (did.to_did_odf()[len("did:odf:") :] + ".key")
    path.chmod(mode)
    with pytest.raises(KeyStoreError) as e:
        store.secret(did)
    assert _one_line(e, secret) == f"key {path} is open to group or others (mode {mode:o}): chmod 600 it"


def _key_path(store: KeyStore, did: DatasetId) -> Path:
    assert store.folder is not None
    return store.folder / (did.to_did_odf()[len("did:odf:") :] + ".key")


def test_a_link_out_of_the_folder_is_refused_and_one_inside_it_is_read(tmp_path: Path) -> None:
    """An attacker's link to a file elsewhere is never followed; a Kubernetes secret volume (each key a
    link to `..data/<name>` inside the folder) is read."""
    folder = tmp_path / "keys"
    store = KeyStore(folder)
    did, secret = DatasetId.generate()
    (folder / "..data").mkdir(parents=True, mode=0o700)
    inside = folder / "..data" / "k"
    write_private_file(inside, private_key_pem(secret))
    _key_path(store, did).symlink_to(Path("..data") / "k")
    assert store.secret(did) == secret

    outside = tmp_path / "elsewhere.key"
    other_did, other = DatasetId.generate()
    write_private_file(outside, private_key_pem(other))
    _key_path(store, other_did).symlink_to(outside)
    with pytest.raises(KeyStoreError) as e:
        store.secret(other_did)
    assert (
        _one_line(e, other) == f"key {_key_path(store, other_did)} is a link out of the key folder {folder}"
    )


def test_a_fifo_in_place_of_a_key_is_refused_without_hanging(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    did = store.save(DatasetId.generate()[1])
    path = _key_path(store, did)
    path.unlink()
    os.mkfifo(path, 0o600)
    with pytest.raises(KeyStoreError, match="is not a regular file"):
        store.secret(did)


def test_a_key_filed_under_another_did_is_refused(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    did = store.save(DatasetId.generate()[1])
    other = DatasetId.generate()[1]
    write_private_file(_key_path(store, did), private_key_pem(other), replace=True)
    with pytest.raises(KeyStoreError) as e:
        store.secret(did)
    assert (
        _one_line(e, other)
        == f"key {_key_path(store, did)} is the key of {public_key_of(other)}, not of {did}"
    )


def test_concurrent_saves_of_one_key_and_of_many_keys(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    one = DatasetId.generate()[1]
    many = [DatasetId.generate()[1] for _ in range(8)]
    errors: list[BaseException] = []

    def save(secret: bytes) -> None:
        try:
            store.save(secret)
        except BaseException as e:  # collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=save, args=(s,)) for s in [one] * 8 + many]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(store.identities(), key=str) == sorted({public_key_of(s) for s in [one, *many]}, key=str)
    assert all(not p.name.endswith(".tmp") for p in (tmp_path / "keys").iterdir())
    assert store.secret(public_key_of(one)) == one


def test_write_private_file_keeps_an_existing_file_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    path.write_bytes(b"old")
    path.chmod(0o644)
    assert write_private_file(path, b"new") is False
    assert path.read_bytes() == b"old"
    assert write_private_file(path, b"new", replace=True) is True
    assert path.read_bytes() == b"new" and _mode(path) == 0o600


def test_parse_accepts_pem_and_multibase_and_never_quotes_the_text(tmp_path: Path) -> None:
    secret = DatasetId.generate()[1]
    assert parse_private_key(private_key_pem(secret), "k") == secret
    assert parse_private_key(export_text(secret), "k") == secret
    assert parse_private_key("f" + secret.hex(), "k") == secret
    broken = "u" + export_text(secret)[2:] + "!"
    with pytest.raises(KeyStoreError) as e:
        parse_private_key(broken, "k")
    assert _one_line(e, secret) == "k: not an ed25519 private key (PKCS#8 PEM or multibase u…, z…, f…)"


def test_given_keys_are_checked_against_the_did_they_are_given_for(tmp_path: Path) -> None:
    did, secret = DatasetId.generate()
    other_did, other = DatasetId.generate()
    store = KeyStore(None, extra={str(did): export_text(secret), "b": private_key_pem(other).decode()})
    assert store.secret(did) == secret and store.secret(other_did) == other
    assert repr(store) == "KeyStore(None, 2 given key(s))"
    with pytest.raises(KeyStoreError) as e:
        KeyStore(None, extra={str(did): export_text(other)})
    assert _one_line(e, other) == f"key {str(did)!r} is the key of {other_did}, not of {did}"

    store.check_given_names({"b": other_did}.get)  # right, or not in the repository: fine
    store.check_given_names(lambda name: None)
    with pytest.raises(KeyStoreError, match=f"key 'b' is the key of {other_did}, not of {did}"):
        store.check_given_names({"b": did}.get)
    with pytest.raises(KeyStoreError, match="read-only"):
        store.save(DatasetId.generate()[1])


def test_the_node_key_is_made_on_first_use_and_replaced_only_when_asked(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    assert store.stored_node_secret() is None
    first = store.node_secret()
    assert store.node_secret() == first and _mode(tmp_path / "keys" / "node.key") == 0o600
    assert list(store.identities()) == []  # the node key is no dataset's
    other = DatasetId.generate()[1]
    assert store.import_node_key(private_key_pem(first)) == public_key_of(first)  # the same: nothing to do
    with pytest.raises(NodeKeyExistsError) as e:
        store.import_node_key(export_text(other))
    assert _one_line(e, other) == f"this node already has the identity {public_key_of(first).to_did_key()}"
    assert store.import_node_key(export_text(other), replace=True) == public_key_of(other)
    assert store.node_secret() == other
    given = KeyStore(None, node_key=export_text(first))
    assert given.node_secret() == first

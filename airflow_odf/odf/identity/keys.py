"""The key store: the ed25519 private keys of the datasets created here, and this node's own key.

Keys live outside every chain and outside everything `push` and `serve` send: one PKCS#8 PEM file per
key (mode 0600) in a folder (mode 0700) — `$ODF_KEYS_DIR`, else `.odf-keys/` beside a local
repository's marker, else `~/.config/airflow-provider-odf/keys` (`$XDG_CONFIG_HOME`) for a repository in
an object store. A file is named after the DID its key makes, so a key cannot be filed under another
dataset's name. Keys may also come read-only from a mapping (an Airflow connection's secret).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import DatasetId, multibase_decode
from airflow_odf.odf.identity.signing import public_key_of

KEYS_DIR_ENV = "ODF_KEYS_DIR"
LOCAL_KEYS_DIR = ".odf-keys"
NODE_KEY_NAME = "node"
_SUFFIX = ".key"
_MAX_KEY_FILE_BYTES = 4096


class KeyStoreError(OdfError):
    """A key that cannot be read, written, imported or found."""


def default_keys_dir(local_root: Path | None) -> Path:
    """Where keys live when nothing says otherwise (see the module docstring)."""
    if os.environ.get(KEYS_DIR_ENV):
        return Path(os.environ[KEYS_DIR_ENV])
    if local_root is not None:
        return local_root / LOCAL_KEYS_DIR
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config / "airflow-provider-odf" / "keys"


def _pem(secret: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    key = Ed25519PrivateKey.from_private_bytes(secret)
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


def parse_private_key(text: str | bytes, where: str) -> bytes:
    """The 32-byte private key of a PKCS#8 PEM text or a multibase text of the raw key (`u…`, `z…`,
    `f…`: the form kamu's tools take); KeyStoreError naming `where` otherwise."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        load_pem_private_key,
    )

    raw = text.encode() if isinstance(text, str) else text
    if len(raw) > _MAX_KEY_FILE_BYTES:
        raise KeyStoreError(f"{where}: {len(raw)} bytes is too long for an ed25519 key")
    stripped = raw.strip()
    try:
        if stripped.startswith(b"-----BEGIN"):
            key = load_pem_private_key(stripped, password=None)
            if not isinstance(key, Ed25519PrivateKey):
                raise KeyStoreError(f"{where}: not an ed25519 private key")
            return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        secret = multibase_decode(stripped.decode("ascii"))
    except (ValueError, TypeError, UnicodeDecodeError, OdfError) as e:
        if isinstance(e, KeyStoreError):
            raise
        raise KeyStoreError(f"{where}: not an ed25519 private key (PKCS#8 PEM or multibase): {e}") from None
    if len(secret) != 32:
        raise KeyStoreError(f"{where}: an ed25519 private key has 32 bytes, got {len(secret)}")
    return secret


def export_text(secret: bytes) -> str:
    """The raw key as multibase base64url (`u…`), the form kamu's tools take (`--private-key`)."""
    from airflow_odf.odf.identity.signing import signature_text  # same encoding as signatures

    return signature_text(secret)


class KeyStore:
    """Private keys by the identity they make. `folder` is where new keys are written (None: read-only);
    `extra` holds dataset keys given as text (e.g. from a secrets backend), read-only, looked up first;
    `node_key` the node's key given as text."""

    def __init__(
        self, folder: Path | None, extra: Mapping[str, str] | None = None, node_key: str | None = None
    ) -> None:
        self.folder = folder
        self._node = None if node_key is None else parse_private_key(node_key, "the node key")
        self._extra: dict[DatasetId, bytes] = {}
        for where, text in (extra or {}).items():
            secret = parse_private_key(text, f"key {where!r}")
            self._extra[public_key_of(secret)] = secret

    def __repr__(self) -> str:  # never shows a key
        return f"KeyStore({self.folder}, {len(self._extra)} given key(s))"

    def _path(self, name: str) -> Path | None:
        return None if self.folder is None else self.folder / (name + _SUFFIX)

    @staticmethod
    def _name(identity: DatasetId) -> str:
        return identity.to_did_odf().removeprefix(DatasetId.DID_ODF)

    def _read(self, path: Path) -> bytes | None:
        try:
            with path.open("rb") as f:
                mode = os.fstat(f.fileno()).st_mode
                data = f.read(_MAX_KEY_FILE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise KeyStoreError(f"cannot read key {path}: {e.strerror}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            mode_text = f"{stat.S_IMODE(mode):o}"
            raise KeyStoreError(f"key {path} is readable by others (mode {mode_text}): chmod 600 it")
        return parse_private_key(data, f"key {path}")

    def secret(self, identity: DatasetId) -> bytes | None:
        """The private key of `identity`, or None when this store does not hold it (e.g. a dataset
        pulled from elsewhere: read-only here). KeyStoreError when the stored file does not make it."""
        if identity in self._extra:
            return self._extra[identity]
        path = self._path(self._name(identity))
        secret = None if path is None else self._read(path)
        if secret is not None and public_key_of(secret) != identity:
            raise KeyStoreError(f"key {path} is not the key of {identity}")
        return secret

    def has(self, identity: DatasetId) -> bool:
        return self.secret(identity) is not None

    def save(self, secret: bytes) -> DatasetId:
        """Stores a private key (nothing to do when it is there); returns the identity it makes."""
        identity = public_key_of(secret)
        if self.secret(identity) is None:
            self._write(self._name(identity), secret)
        return identity

    def _write(self, name: str, secret: bytes) -> None:
        path = self._path(name)
        if path is None:
            raise KeyStoreError("this key store is read-only (keys given by a connection or secret)")
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(_pem(secret))
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # never replaces a key another process stored meanwhile
            except FileExistsError:
                pass
            finally:
                tmp.unlink()
        except OSError as e:
            raise KeyStoreError(f"cannot store key in {path.parent}: {e.strerror}") from None

    def identities(self) -> Iterator[DatasetId]:
        """The dataset identities whose keys this store holds (not the node key)."""
        seen = set(self._extra)
        yield from self._extra
        if self.folder is None or not self.folder.is_dir():
            return
        for path in sorted(self.folder.glob("*" + _SUFFIX)):
            if path.stem == NODE_KEY_NAME:
                continue
            with contextlib.suppress(OdfError):
                identity = DatasetId.parse(DatasetId.DID_ODF + path.stem)
                if identity not in seen:
                    yield identity

    def import_key(self, text: str | bytes, expected: DatasetId | None = None) -> DatasetId:
        """Stores a key given as text (PEM or multibase); KeyStoreError when it is not the key of
        `expected`."""
        secret = parse_private_key(text, "the imported key")
        identity = public_key_of(secret)
        if expected is not None and identity != expected:
            raise KeyStoreError(f"the imported key is the key of {identity}, not of {expected}")
        return self.save(secret)

    def node_secret(self) -> bytes:
        """This node's own key (its `did:key` signs query commitments): the one given, else the stored
        one, created on first use."""
        if self._node is not None:
            return self._node
        path = self._path(NODE_KEY_NAME)
        if path is None:
            raise KeyStoreError("no node key was given and this key store is read-only")
        secret = self._read(path)
        if secret is None:
            self._write(NODE_KEY_NAME, DatasetId.generate()[1])
            secret = self._read(path)  # the one stored: another process may have stored its own first
        if secret is None:
            raise KeyStoreError(f"the node key {path} vanished as it was created")
        return secret

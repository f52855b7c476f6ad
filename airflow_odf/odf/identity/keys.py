"""The key store: the ed25519 private keys of the datasets created here, and this node's own key.

Keys live outside every chain and outside everything `push` and `serve` send: one PKCS#8 PEM file per
key (mode 0600) in a folder (mode 0700) — `$ODF_KEYS_DIR`, else `.odf-keys/` beside a local
repository's marker, else `~/.config/airflow-provider-odf/keys` (`$XDG_CONFIG_HOME`) for a repository in
an object store. A file is named after the DID its key makes, so a key cannot be filed under another
dataset's name. Keys may also come read-only from a mapping (an Airflow connection's secret).

Like ssh, the store refuses a key file that group or others may access, a folder open to them when it
writes, and a key file that is not a regular file or is a link out of the folder (a link inside it is
read: a Kubernetes secret volume is made of such links).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import DatasetId, multibase_decode
from airflow_odf.odf.identity.signing import public_key_of, signature_text

KEYS_DIR_ENV = "ODF_KEYS_DIR"
LOCAL_KEYS_DIR = ".odf-keys"
NODE_KEY_NAME = "node"
_SUFFIX = ".key"
_MAX_KEY_FILE_BYTES = 4096
_OPEN_TO_OTHERS = stat.S_IRWXG | stat.S_IRWXO


class KeyStoreError(OdfError):
    """A key that cannot be read, written, imported or found."""


class NodeKeyExistsError(KeyStoreError):
    """Importing a node key where the node already has another one (its identity would change)."""

    def __init__(self, existing: DatasetId) -> None:
        super().__init__(f"this node already has the identity {existing.to_did_key()}")
        self.existing = existing


def default_keys_dir(local_root: Path | None) -> Path:
    """Where keys live when nothing says otherwise (see the module docstring)."""
    if os.environ.get(KEYS_DIR_ENV):
        return Path(os.environ[KEYS_DIR_ENV])
    if local_root is not None:
        return local_root / LOCAL_KEYS_DIR
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config / "airflow-provider-odf" / "keys"


def private_key_pem(secret: bytes) -> bytes:
    """The key as unencrypted PKCS#8 PEM: how the store keeps it and `odf keys export` gives it."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    key = Ed25519PrivateKey.from_private_bytes(secret)
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


def parse_private_key(text: str | bytes, where: str) -> bytes:
    """The 32-byte private key of a PKCS#8 PEM text or a multibase text of the raw key (`u…`, `z…`,
    `f…`: the form kamu's tools take); KeyStoreError naming `where` otherwise. No message quotes any
    part of the text: it may be a key."""
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
    not_a_key = KeyStoreError(f"{where}: not an ed25519 private key (PKCS#8 PEM or multibase u…, z…, f…)")
    try:
        if stripped.startswith(b"-----BEGIN"):
            key = load_pem_private_key(stripped, password=None)
            if not isinstance(key, Ed25519PrivateKey):
                raise not_a_key
            return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        secret = multibase_decode(stripped.decode("ascii"))
    except (ValueError, TypeError, UnicodeDecodeError, OdfError) as e:
        if isinstance(e, KeyStoreError):
            raise
        raise not_a_key from None
    if len(secret) != 32:
        raise KeyStoreError(f"{where}: an ed25519 private key has 32 bytes, got {len(secret)}")
    return secret


def export_text(secret: bytes) -> str:
    """The raw key as multibase base64url (`u…`), the form kamu's tools take (`--private-key`)."""
    return signature_text(secret)  # the same encoding as signatures


def write_private_file(path: Path, data: bytes, *, replace: bool = False) -> bool:
    """Writes a secret file readable by its owner only (0600), whole or not at all: a temporary file
    beside it, synced, then linked into place — an existing file is kept (returns False) unless
    `replace`, and never shows half-written. KeyStoreError when it cannot be written."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")  # unique per thread and process
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o600)  # whatever the umask
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if replace:
                os.replace(tmp, path)
                created = True
            else:
                try:
                    os.link(tmp, path)  # never replaces a file another process wrote meanwhile
                    created = True
                except FileExistsError:
                    created = False
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        _sync_folder(path.parent)
    except OSError as e:
        raise KeyStoreError(f"cannot write {path}: {e.strerror or e}") from None
    return created


def _sync_folder(folder: Path) -> None:
    """Makes a new name in `folder` durable: a key lost in a crash is a dataset nobody can sign."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class KeyStore:
    """Private keys by the identity they make. `folder` is where new keys are written (None: read-only);
    `extra` holds dataset keys given as text (e.g. from a secrets backend) by name or DID, read-only,
    looked up first; `node_key` the node's key given as text."""

    def __init__(
        self, folder: Path | None, extra: Mapping[str, str] | None = None, node_key: str | None = None
    ) -> None:
        self.folder = folder
        self._node = None if node_key is None else parse_private_key(node_key, "the node key")
        self._extra: dict[DatasetId, bytes] = {}
        self._given_names: dict[str, DatasetId] = {}
        for label, text in (extra or {}).items():
            secret = parse_private_key(text, f"key {label!r}")
            identity = public_key_of(secret)
            if label.startswith("did:"):
                _require_key_of(identity, _parse_did(label), f"key {label!r}")
            else:
                self._given_names[label] = identity
            self._extra[identity] = secret

    def __repr__(self) -> str:  # never shows a key
        return f"KeyStore({self.folder}, {len(self._extra)} given key(s))"

    def check_given_names(self, resolve: Callable[[str], DatasetId | None]) -> None:
        """KeyStoreError when a key given under a dataset's name is not the key of the dataset that
        name leads to (`resolve`: None for a name not in the repository, which is not checked)."""
        for name, identity in self._given_names.items():
            named = resolve(name)
            if named is not None:
                _require_key_of(identity, named, f"key {name!r}")

    def _path(self, name: str) -> Path | None:
        return None if self.folder is None else self.folder / (name + _SUFFIX)

    @staticmethod
    def _name(identity: DatasetId) -> str:
        return identity.to_did_odf().removeprefix(DatasetId.DID_ODF)

    def _open(self, path: Path) -> int | None:
        """A read descriptor of a key file, None when there is none; a link is followed only when it
        stays inside the folder."""
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO planted here never hangs
        try:
            return os.open(path, flags | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno != errno.ELOOP or self.folder is None:
                raise KeyStoreError(f"cannot read key {path}: {e.strerror}") from None
        folder = os.path.realpath(self.folder)
        if os.path.commonpath([folder, os.path.realpath(path)]) != folder:
            raise KeyStoreError(f"key {path} is a link out of the key folder {self.folder}")
        try:
            return os.open(path, flags)
        except FileNotFoundError:
            return None  # a dangling link: no key
        except OSError as e:
            raise KeyStoreError(f"cannot read key {path}: {e.strerror}") from None

    def _read(self, path: Path) -> bytes | None:
        fd = self._open(path)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise KeyStoreError(f"key {path} is not a regular file")
            if mode & _OPEN_TO_OTHERS:
                raise KeyStoreError(
                    f"key {path} is open to group or others (mode {stat.S_IMODE(mode):o}): chmod 600 it"
                )
            try:
                data = f.read(_MAX_KEY_FILE_BYTES + 1)
            except OSError as e:
                raise KeyStoreError(f"cannot read key {path}: {e.strerror}") from None
        return parse_private_key(data, f"key {path}")

    def secret(self, identity: DatasetId) -> bytes | None:
        """The private key of `identity`, or None when this store does not hold it (e.g. a dataset
        pulled from elsewhere: read-only here). KeyStoreError when the stored file does not make it."""
        if identity in self._extra:
            return self._extra[identity]
        path = self._path(self._name(identity))
        secret = None if path is None else self._read(path)
        if secret is not None:
            _require_key_of(public_key_of(secret), identity, f"key {path}")
        return secret

    def has(self, identity: DatasetId) -> bool:
        return self.secret(identity) is not None

    def save(self, secret: bytes) -> DatasetId:
        """Stores a private key (nothing to do when it is there); returns the identity it makes."""
        identity = public_key_of(secret)
        if self.secret(identity) is None:
            self._write(self._name(identity), secret)
        return identity

    def _writable_folder(self) -> Path:
        """The folder, created 0700 when missing; refused when group or others may enter it (they
        could remove or plant keys)."""
        if self.folder is None:
            raise KeyStoreError("this key store is read-only (keys given by a connection or secret)")
        try:
            self.folder.mkdir(mode=0o700, parents=True)
            os.chmod(self.folder, 0o700)  # whatever the umask
        except FileExistsError:
            pass
        except OSError as e:
            raise KeyStoreError(f"cannot create the key folder {self.folder}: {e.strerror}") from None
        try:
            mode = os.stat(self.folder).st_mode
        except OSError as e:
            raise KeyStoreError(f"cannot use the key folder {self.folder}: {e.strerror}") from None
        if not stat.S_ISDIR(mode):
            raise KeyStoreError(f"the key folder {self.folder} is not a folder")
        if mode & _OPEN_TO_OTHERS:
            raise KeyStoreError(
                f"the key folder {self.folder} is open to group or others "
                f"(mode {stat.S_IMODE(mode):o}): chmod 700 it"
            )
        return self.folder

    def _write(self, name: str, secret: bytes, *, replace: bool = False) -> None:
        path = self._writable_folder() / (name + _SUFFIX)
        write_private_file(path, private_key_pem(secret), replace=replace)

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
        if expected is not None:
            _require_key_of(public_key_of(secret), expected, "the imported key")
        return self.save(secret)

    def stored_node_secret(self) -> bytes | None:
        """This node's key as given or stored, None when it has none yet (nothing is created)."""
        if self._node is not None:
            return self._node
        path = self._path(NODE_KEY_NAME)
        return None if path is None else self._read(path)

    def node_secret(self) -> bytes:
        """This node's own key (its `did:key` signs query commitments): the one given, else the stored
        one, created on first use."""
        secret = self.stored_node_secret()
        if secret is None:
            self._write(NODE_KEY_NAME, DatasetId.generate()[1])
            secret = self.stored_node_secret()  # the one stored: another process may have been first
        if secret is None:
            raise KeyStoreError(f"the node key {self._path(NODE_KEY_NAME)} vanished as it was created")
        return secret

    def import_node_key(self, text: str | bytes, *, replace: bool = False) -> DatasetId:
        """Stores the node's key (PEM or multibase); returns the identity it makes. NodeKeyExistsError
        when the node has another key, unless `replace`: the node's identity would change."""
        secret = parse_private_key(text, "the imported node key")
        identity = public_key_of(secret)
        existing = self.stored_node_secret()
        if existing is not None and existing != secret and not replace:
            raise NodeKeyExistsError(public_key_of(existing))
        if existing != secret:
            self._write(NODE_KEY_NAME, secret, replace=existing is not None)
            stored = self.stored_node_secret()
            if stored is not None and stored != secret:  # another process made one meanwhile
                raise NodeKeyExistsError(public_key_of(stored))
        return identity


def _parse_did(text: str) -> DatasetId:
    try:
        return DatasetId.parse(text)
    except OdfError as e:
        raise KeyStoreError(str(e)) from None


def _require_key_of(identity: DatasetId, expected: DatasetId, what: str) -> None:
    """One line when a key makes another identity than the one it is meant for."""
    if identity != expected:
        raise KeyStoreError(f"{what} is the key of {identity}, not of {expected}")

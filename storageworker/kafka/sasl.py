"""SASL authentication of the ``kafka`` port: PLAIN and SCRAM-SHA-256/512 (RFC 5802, 7677).

Users come from a secret file (a YAML or JSON mapping of user name to password, as a mounted
Kubernetes Secret gives it). SCRAM credentials are derived once at load with a random salt and
4096 iterations (Kafka's minimum); the password itself is kept only for PLAIN. A client
authenticates with SaslHandshake (the mechanism) then SaslAuthenticate rounds carrying the
mechanism's messages; until it succeeds the connection may send nothing but ApiVersions and
those two.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

import yaml

from storagecore.errors import ConfigError

SCRAM_ITERATIONS: Final = 4096
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class AuthenticationError(Exception):
    """The client's credentials or messages were refused (the text is safe to send back)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class User:
    name: str
    password: str
    scram: Mapping[str, ScramCredential]


def scram_credential(
    password: str, hash_name: str, salt: bytes, iterations: int
) -> ScramCredential:
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    return ScramCredential(
        salt,
        iterations,
        hashlib.new(hash_name, client_key).digest(),
        hmac.digest(salted, b"Server Key", hash_name),
    )


def load_users(path: Path) -> dict[str, User]:
    """The users of a secret file; ConfigError naming the file and the entry."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the SASL users: {exc}") from None
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{path}: expected a mapping of user name to password")
    users: dict[str, User] = {}
    for name, password in raw.items():
        if not isinstance(name, str) or not name or not isinstance(password, str) or not password:
            raise ConfigError(f"{path}: user {name!r}: expected a non-empty string password")
        scram = {
            mechanism: scram_credential(password, hash_name, os.urandom(16), SCRAM_ITERATIONS)
            for mechanism, hash_name in _HASHES.items()
        }
        users[name] = User(name, password, scram)
    return users


class Authenticator:
    """One client's authentication exchange for ``mechanism``."""

    def __init__(
        self,
        mechanism: str,
        users: Mapping[str, User],
        server_nonce: Callable[[], str] | None = None,
    ) -> None:
        assert mechanism in MECHANISMS, mechanism
        self._server_nonce = server_nonce or (lambda: base64.b64encode(os.urandom(18)).decode())
        self.mechanism = mechanism
        self.users = users
        self.user: str | None = None
        self.complete = False
        self._scram_state: tuple[str, str, str, ScramCredential] | None = None

    def step(self, token: bytes) -> bytes:
        """The server's answer to one client message; sets :attr:`complete` when done."""
        if self.complete:
            raise AuthenticationError("authentication already completed")
        if self.mechanism == "PLAIN":
            return self._plain(token)
        if self._scram_state is None:
            return self._scram_first(token)
        return self._scram_final(token)

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationError("invalid PLAIN message")
        _authzid, name, password = (p.decode("utf-8", "replace") for p in parts)
        user = self.users.get(name)
        if user is None or not hmac.compare_digest(user.password.encode(), password.encode()):
            raise AuthenticationError("authentication failed: invalid user name or password")
        self.user, self.complete = name, True
        return b""

    def _scram_first(self, token: bytes) -> bytes:
        text = token.decode("utf-8", "replace")
        gs2, _, bare = text.partition(",")
        _authzid, _, bare = bare.partition(",")
        if gs2 not in ("n", "y") or not bare:
            raise AuthenticationError("invalid SCRAM client-first message")
        fields = dict(item.split("=", 1) for item in bare.split(",") if "=" in item)
        name = fields.get("n", "").replace("=2C", ",").replace("=3D", "=")
        client_nonce = fields.get("r", "")
        user = self.users.get(name)
        if user is None or not client_nonce:
            raise AuthenticationError("authentication failed: invalid user name or password")
        credential = user.scram[self.mechanism]
        nonce = client_nonce + self._server_nonce()
        server_first = (
            f"r={nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        )
        self._scram_state = (name, bare + "," + server_first, nonce, credential)
        return server_first.encode()

    def _scram_final(self, token: bytes) -> bytes:
        assert self._scram_state is not None
        name, auth_prefix, nonce, credential = self._scram_state
        text = token.decode("utf-8", "replace")
        without_proof, _, proof_b64 = text.rpartition(",p=")
        fields = dict(item.split("=", 1) for item in without_proof.split(",") if "=" in item)
        if fields.get("r") != nonce:
            raise AuthenticationError("authentication failed: nonce mismatch")
        hash_name = _HASHES[self.mechanism]
        auth_message = (auth_prefix + "," + without_proof).encode()
        client_signature = hmac.digest(credential.stored_key, auth_message, hash_name)
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise AuthenticationError("invalid SCRAM client proof") from None
        if len(proof) != len(client_signature):
            raise AuthenticationError("authentication failed: invalid user name or password")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(
            hashlib.new(hash_name, client_key).digest(), credential.stored_key
        ):
            raise AuthenticationError("authentication failed: invalid user name or password")
        server_signature = hmac.digest(credential.server_key, auth_message, hash_name)
        self.user, self.complete = name, True
        return b"v=" + base64.b64encode(server_signature)

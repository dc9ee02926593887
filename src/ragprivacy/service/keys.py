"""API keys: made once, shown once, stored only as a slow salted hash.

A key is ``rpk_<key id>_<secret>``: the key id (12 hex characters) names the stored row,
the secret (32 random bytes, URL-safe base64) is never stored. The stored hash is scrypt
(RFC 7914, ``hashlib.scrypt``: memory-hard, so a stolen state file does not give the keys
back cheaply) over the secret with a per-key salt; checking a key recomputes it and
compares in constant time (``hmac.compare_digest``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from ragprivacy.errors import ConfigError

__all__ = ["ApiKey", "hash_secret", "new_key", "parse_key", "secret_matches"]

_SCRYPT_N = 2**14  # 128·N·r = 16 MiB per check: slow for a guesser, fine per request
_SCRYPT_R = 8
_SCRYPT_P = 1
_KEY = re.compile(r"rpk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A fresh key: ``key_id`` (stored, shown in listings) and the full ``token`` (shown
    once to the admin, never stored)."""

    key_id: str
    token: str
    secret: str

    def __repr__(self) -> str:  # never print the secret by accident
        return f"ApiKey(key_id={self.key_id!r})"


def new_key() -> ApiKey:
    """A new random key."""
    key_id = secrets.token_hex(6)
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    return ApiKey(key_id, f"rpk_{key_id}_{secret}", secret)


def parse_key(token: str) -> tuple[str, str]:
    """(key id, secret) of a presented key; refuses anything not shaped like one."""
    m = _KEY.fullmatch(token) if isinstance(token, str) else None
    if m is None:
        raise ConfigError("Malformed API key: expected 'rpk_<12 hex>_<43 characters>'.")
    return m.group(1), m.group(2)


def hash_secret(secret: str, salt: bytes) -> bytes:
    """scrypt(secret, salt), 32 bytes."""
    return hashlib.scrypt(
        secret.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32
    )


def secret_matches(secret: str, salt: bytes, stored: bytes) -> bool:
    """Whether ``secret`` hashes to ``stored`` (constant-time comparison)."""
    return hmac.compare_digest(hash_secret(secret, salt), stored)

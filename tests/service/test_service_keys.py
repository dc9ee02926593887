"""API keys: scrypt-hashed at rest, the first check of a key pays scrypt and later ones a
keyed hash in memory, and a revocation (by another process: the admin) holds at once."""

from __future__ import annotations

import pytest

from ragprivacy.service import AuthError, ServiceState


def test_a_cached_key_is_still_revoked_at_once_and_a_wrong_secret_never_passes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    server = ServiceState(tmp_path / "state")
    server.create_tenant("clinic")
    server.create_account("clinic", "alice", epsilon=1.0, delta=1e-6, rate_limit=5)
    key = server.create_key("alice")
    assert server.authenticate(key.token) == "alice"  # scrypt, then kept
    assert server.authenticate(key.token) == "alice"  # the kept keyed hash
    wrong = key.token[:-4] + ("AAAA" if not key.token.endswith("AAAA") else "BBBB")
    with pytest.raises(AuthError):
        server.authenticate(wrong)  # same id, another secret: scrypt, refused
    admin = ServiceState(tmp_path / "state", create=False)  # another process
    admin.revoke_key(key.key_id)
    with pytest.raises(AuthError):
        server.authenticate(key.token)
    assert "secret" not in repr(server) and key.token not in repr(server.__dict__)

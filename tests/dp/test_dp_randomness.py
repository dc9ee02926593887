"""Keyed streams and the ChaCha20 bit source."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ragprivacy.dp import ChaCha20Bits, encode_record, stream
from ragprivacy.dp.randomness import derive_key
from ragprivacy.errors import ConfigError

SEED = b"ragprivacy.dp test suite seed.."  # 31 bytes (>= 16); real seeds: os.urandom(32)


def test_chacha20_known_answer_rfc8439() -> None:
    """RFC 8439 App. A.1, test vector #1: all-zero key, nonce and counter."""
    ks = ChaCha20Bits(bytes(32)).random_bytes(64)
    assert ks.hex().startswith("76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7")
    assert ks.hex().endswith("6a43b8f41518a11cc387b669b2ee6586")


def test_chacha20_draws_are_sequential() -> None:
    a = ChaCha20Bits(bytes(range(32)))
    b = ChaCha20Bits(bytes(range(32)))
    whole = b.random_bytes(80)
    assert a.random_bytes(13) + a.random_bytes(67) == whole
    assert a.bytes_used == 80
    key = bytes(range(32))
    for text in (repr(a), str(a), repr(ChaCha20Bits.derived(SEED, "r"))):
        assert key.hex() not in text.lower() and "bytes_used=80" in repr(a)
    derived = ChaCha20Bits.derived(SEED, "r")
    assert derived._key.hex() not in repr(derived) and str(derived._key) not in repr(derived)


def test_child_streams_are_independent_and_do_not_consume() -> None:
    a = ChaCha20Bits.derived(SEED, "root")
    c1 = a.child("x").uint64(4)
    assert a.bytes_used == 0
    assert (c1 != a.child("y").uint64(4)).all()
    np.testing.assert_array_equal(c1, ChaCha20Bits.derived(SEED, "root").child("x").uint64(4))


@pytest.mark.statistical
def test_chacha20_bits_are_uniform() -> None:
    """Byte frequencies of 10^6 bytes: χ² at α = 1e-6."""
    data = np.frombuffer(
        ChaCha20Bits.derived(SEED, "uniform").random_bytes(1_000_000), dtype=np.uint8
    )
    assert stats.chisquare(np.bincount(data, minlength=256)).pvalue > 1e-6


def test_randbelow_is_in_range_and_uniform() -> None:
    src = ChaCha20Bits.derived(SEED, "rb")
    draws = [src.randbelow(6) for _ in range(6000)]
    assert set(draws) == set(range(6))
    assert stats.chisquare(np.bincount(draws)).pvalue > 1e-6
    with pytest.raises(ConfigError):
        src.randbelow(0)


def test_record_encoding_is_unambiguous() -> None:
    assert derive_key("ab", "c") != derive_key("a", "bc")
    assert derive_key(b"s", ("a", 1)) != derive_key(b"s", ("a", "1"))
    assert derive_key(b"s", ("a", ("b",))) != derive_key(b"s", ("a", "b"))
    assert encode_record("x") != encode_record(b"x")
    assert len(derive_key(b"s")) == 32
    with pytest.raises(ConfigError):
        derive_key(b"s", (1.5,))  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        derive_key(b"s", (True,))
    with pytest.raises(ConfigError):
        ChaCha20Bits(b"short")


def test_keyed_numpy_streams() -> None:
    a = stream(7, ("acct", 3)).random(5)
    np.testing.assert_array_equal(a, stream(7, ("acct", 3)).random(5))
    b = stream(7, ("acct", 4)).random(5)
    assert not np.allclose(a, b)
    # streams for different records are uncorrelated
    x = stream(1, "a").standard_normal(20_000)
    y = stream(1, "b").standard_normal(20_000)
    assert abs(np.corrcoef(x, y)[0, 1]) < 5 / np.sqrt(20_000)


@pytest.mark.parametrize("bad", [7, "a string seed", b"short", bytes(15), None, 1.5])
def test_derived_refuses_guessable_seeds(bad: object) -> None:
    with pytest.raises(ConfigError, match="at least 16"):
        ChaCha20Bits.derived(bad, "q")  # type: ignore[arg-type]


def test_derived_key_is_hmac_sha256_of_the_record() -> None:
    """Key = HMAC-SHA256(seed, domain ‖ encode_record("chacha20", record)); 16 bytes accepted."""
    import hashlib
    import hmac

    seed = bytes(range(16))
    rec = ("acct", "tenant", "ab" * 32, 17)
    key = hmac.new(
        seed, b"ragprivacy.dp/v1" + encode_record("chacha20", rec), hashlib.sha256
    ).digest()
    np.testing.assert_array_equal(
        ChaCha20Bits.derived(seed, rec).uint64(4), ChaCha20Bits(key).uint64(4)
    )
    assert (
        ChaCha20Bits.derived(seed, rec).uint64(2) != ChaCha20Bits.derived(seed, "x").uint64(2)
    ).all()


def test_fork_depends_on_the_stream_position() -> None:
    a = ChaCha20Bits.derived(SEED, "fork")
    f0 = a.fork("extra").uint64(2)
    np.testing.assert_array_equal(f0, a.fork("extra").uint64(2))  # no draw: same fork
    assert a.bytes_used == 0
    a.uint64(1)
    assert (a.fork("extra").uint64(2) != f0).all()
    np.testing.assert_array_equal(f0, ChaCha20Bits.derived(SEED, "fork").fork("extra").uint64(2))

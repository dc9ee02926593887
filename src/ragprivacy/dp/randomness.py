"""Keyed, reproducible randomness and a cryptographic bit source.

Two kinds of randomness, kept apart on purpose:

- :func:`stream` — a numpy ``Generator`` (Philox) keyed by SHA-256 of a root seed and a
  record: independent, reproducible streams for simulations and sweeps. Not for noise
  that protects real data.
- :class:`ChaCha20Bits` — the ChaCha20 keystream (RFC 8439, from ``cryptography``) under
  a 256-bit key, drawn in bulk. The secure samplers of :mod:`ragprivacy.dp.samplers` read
  their bits from it. :meth:`ChaCha20Bits.from_entropy` keys it from the OS and cannot be
  seeded; :meth:`ChaCha20Bits.derived` keys it from H(seed ‖ record), which is what the
  audit protocol's derived noise z_q = DGS(H(s_W ‖ rec_q); σ) needs (collusion paper §5.3,
  claim A2).

Records are encoded unambiguously (type tag and length before every part), so that
("ab", "c") and ("a", "bc") give different keys.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Sequence

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from ragprivacy._random import RngLike, make_rng
from ragprivacy.errors import BackendError, ConfigError

__all__ = [
    "ChaCha20Bits",
    "RecordPart",
    "derive_key",
    "encode_record",
    "simulation_rng",
    "stream",
]

RecordPart = bytes | str | int | Sequence["RecordPart"]

_DOMAIN = b"ragprivacy.dp/v1"
MIN_SEED_BYTES = 16
# ChaCha20's block counter is 32 bits: one key/nonce gives at most 2^32 blocks of 64 bytes.
_MAX_BYTES = (1 << 32) * 64


def _encode(part: RecordPart, out: list[bytes]) -> None:
    if isinstance(part, bool):
        raise ConfigError(f"Record parts must be bytes, str, int or sequences; got bool {part!r}.")
    if isinstance(part, bytes | bytearray | memoryview):
        data = bytes(part)
        out += [b"b", len(data).to_bytes(8, "big"), data]
    elif isinstance(part, str):
        data = part.encode("utf-8")
        out += [b"s", len(data).to_bytes(8, "big"), data]
    elif isinstance(part, int | np.integer):
        data = str(int(part)).encode("ascii")
        out += [b"i", len(data).to_bytes(8, "big"), data]
    elif isinstance(part, Sequence):
        out += [b"t", len(part).to_bytes(8, "big")]
        for item in part:
            _encode(item, out)
    else:
        raise ConfigError(
            f"Record parts must be bytes, str, int or sequences of them; got "
            f"{type(part).__name__}. Encode floats as strings explicitly."
        )


def encode_record(*parts: RecordPart) -> bytes:
    """The unambiguous byte encoding of ``parts`` (type tag, 8-byte length, payload)."""
    out: list[bytes] = []
    _encode(list(parts), out)
    return b"".join(out)


def derive_key(seed: RecordPart, record: RecordPart = (), *, label: str = "") -> bytes:
    """A 32-byte key H(domain ‖ label ‖ seed ‖ record) with SHA-256 (a PRF on its inputs).

    >>> derive_key(b"s", ("acct-1", 7)) == derive_key(b"s", ("acct-1", 7))
    True
    >>> derive_key("ab", "c") == derive_key("a", "bc")
    False
    """
    return hashlib.sha256(_DOMAIN + encode_record(label, seed, record)).digest()


def _hmac_key(secret: bytes, label: str, record: RecordPart) -> bytes:
    """HMAC-SHA256(secret, domain ‖ label ‖ record): a 32-byte key (a PRF keyed by ``secret``)."""
    return hmac.new(secret, _DOMAIN + encode_record(label, record), hashlib.sha256).digest()


def stream(seed: RecordPart, record: RecordPart = ()) -> np.random.Generator:
    """An independent, reproducible numpy stream for (``seed``, ``record``): Philox keyed
    by SHA-256(seed ‖ record). For simulations only; secure noise uses :class:`ChaCha20Bits`.

    >>> float(stream(1, "q1").random()) == float(stream(1, "q1").random())
    True
    """
    key = int.from_bytes(derive_key(seed, record, label="philox")[:16], "little")
    return np.random.Generator(np.random.Philox(key=key))


class ChaCha20Bits:
    """Random bits from the ChaCha20 keystream under a 256-bit key (RFC 8439).

    Draws are sequential: the same key always yields the same bits in the same order.
    One key yields at most 256 GiB (the 32-bit block counter); beyond that it refuses.

    >>> seed = bytes(range(32))  # in practice: os.urandom(32), kept secret
    >>> a = ChaCha20Bits.derived(seed, ("acct", 1))
    >>> b = ChaCha20Bits.derived(seed, ("acct", 1))
    >>> bool((a.uint64(4) == b.uint64(4)).all())
    True
    """

    __slots__ = ("_enc", "_key", "_used")

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) != 32:
            raise ConfigError(
                f"A ChaCha20 key must be 32 bytes; got {type(key).__name__} of length "
                f"{len(key) if isinstance(key, bytes) else '?'}. Use derive_key()."
            )
        self._key = key
        # 16-byte nonce = 4-byte little-endian block counter (0) + 12-byte nonce (0); one
        # key is used for exactly one stream, so a fixed nonce is safe.
        cipher = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None)
        self._enc = cipher.encryptor()
        self._used = 0

    @classmethod
    def from_entropy(cls) -> ChaCha20Bits:
        """A source keyed from the operating system's CSPRNG (cannot be reproduced)."""
        return cls(os.urandom(32))

    @classmethod
    def derived(cls, seed: bytes, record: RecordPart = ()) -> ChaCha20Bits:
        """A source keyed by HMAC-SHA256(seed, record): reproducible by whoever knows ``seed``.

        Args:
            seed: a secret of at least 16 random bytes (32 recommended, e.g.
                ``os.urandom(32)``; the audit protocol's s_W). Integers, strings and short
                byte strings are refused: a guessable seed makes the noise guessable.
            record: what the stream is for (e.g. rec_q = (W, a, t(a), H(q), j, n): window,
                account, its tenant, query hash, query number), encoded unambiguously by
                :func:`encode_record`.
        """
        if not isinstance(seed, bytes | bytearray) or len(seed) < MIN_SEED_BYTES:
            got = (
                f"{len(seed)} bytes"
                if isinstance(seed, bytes | bytearray)
                else f"{type(seed).__name__} {seed!r}"
            )
            raise ConfigError(
                f"A derived secure source needs a secret seed of at least {MIN_SEED_BYTES} "
                f"random bytes (32 recommended); got {got}. Use os.urandom(32) and keep it "
                f"secret, or use ragprivacy.dp.stream(seed, record) for simulations."
            )
        return cls(_hmac_key(bytes(seed), "chacha20", record))

    def child(self, label: str) -> ChaCha20Bits:
        """An independent source keyed by HMAC-SHA256(key, label); does not consume this stream."""
        return ChaCha20Bits(_hmac_key(self._key, "child", label))

    def fork(self, label: str) -> ChaCha20Bits:
        """An independent source for one call's auxiliary bits, keyed by (label, bytes_used).

        Unlike :meth:`child`, two forks taken at different points of this stream differ, so
        the auxiliary bits of successive calls on one source are independent. Deterministic:
        the same key and the same sequence of draws give the same forks.
        """
        return ChaCha20Bits(_hmac_key(self._key, "fork", (label, self._used)))

    @property
    def bytes_used(self) -> int:
        """How many keystream bytes have been drawn so far."""
        return self._used

    def random_bytes(self, n: int) -> bytes:
        """The next ``n`` keystream bytes."""
        if n < 0:
            raise ConfigError(f"The 'n' parameter must be >= 0; got {n!r}.")
        if self._used + n > _MAX_BYTES:
            raise BackendError(
                "This ChaCha20 key has produced 256 GiB, its limit; derive a fresh source."
            )
        self._used += n
        return self._enc.update(bytes(n))

    def uint64(self, n: int) -> np.ndarray:
        """The next ``n`` uniform 64-bit words (little-endian) as a uint64 array."""
        n = int(n)
        if n < 0:
            raise ConfigError(f"The 'n' parameter must be >= 0; got {n!r}.")
        if self._used + 8 * n > _MAX_BYTES:
            raise BackendError(
                "This ChaCha20 key has produced 256 GiB, its limit; derive a fresh source."
            )
        # The keystream is XORed into zeros in place (the bytes random_bytes would return,
        # without a second buffer and a copy); the words are read little-endian.
        out = np.zeros(n, dtype="<u8")
        if n:
            view = memoryview(out.data).cast("B")
            self._enc.update_into(view, view)
        self._used += 8 * n
        return out.astype(np.uint64, copy=False)

    def randbelow(self, n: int) -> int:
        """A uniform integer in [0, n) by rejection (exact)."""
        if n <= 0:
            raise ConfigError(f"The 'n' parameter must be >= 1; got {n!r}.")
        bits = max(1, (n - 1).bit_length())
        nbytes = (bits + 7) // 8
        while True:
            v = int.from_bytes(self.random_bytes(nbytes), "little") & ((1 << bits) - 1)
            if v < n:
                return v

    def permutation(self, n: int) -> list[int]:
        """A uniform permutation of ``range(n)``: Fisher–Yates with exact
        :meth:`randbelow` draws (so whoever holds the key derives the same one)."""
        if n < 0:
            raise ConfigError(f"The 'n' parameter must be >= 0; got {n!r}.")
        order = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.randbelow(i + 1)
            order[i], order[j] = order[j], order[i]
        return order

    def __repr__(self) -> str:  # never show the key
        return f"ChaCha20Bits(bytes_used={self._used})"


def simulation_rng(
    rng: RngLike, *, simulation: bool, bits: object | None = None
) -> np.random.Generator | None:
    """The one check of secure versus simulated noise, for every private mechanism and system.

    Secure mode (``simulation=False``, the default everywhere) refuses a user seed — noise
    from a seeded stream is reproducible by whoever knows the seed, so it protects nothing
    — and returns ``None``: the caller then draws from :class:`ChaCha20Bits` (OS entropy,
    or ``bits`` derived from a committed window seed). Simulation mode (the seeded float
    fast path, for experiments, reported as simulated) returns the ``rng`` stream and
    refuses ``bits``.

    >>> simulation_rng(None, simulation=False) is None
    True
    >>> a, b = simulation_rng(3, simulation=True), simulation_rng(3, simulation=True)
    >>> bool(a.integers(10) == b.integers(10))
    True
    """
    if simulation:
        if bits is not None:
            raise ConfigError("Simulation mode draws from 'rng'; do not pass 'bits'.")
        return make_rng(rng)
    if rng is not None:
        raise ConfigError(
            "Secure mode refuses 'rng' (seeded noise is not secure): set simulation=True to "
            "simulate with a seed, or pass bits=ChaCha20Bits.derived(...) for derived, "
            "auditable noise."
        )
    return None

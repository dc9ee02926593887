"""The private release of one token-voted answer (Private-RAG Alg. 4 lines 2, 4, 11–16),
apart from the language model, and its trace.

:class:`TokenRelease` is the whole of what Alg. 4 draws at random once the votes are
counted: the noisy threshold θ̂ = θ + Lap(2/ε_Lap) (line 2), per token the test
Hist_t[y^nonRAG_t] + Lap(4/ε_Lap) ≤ θ̂ (line 11, :class:`~ragprivacy.dp.AboveThreshold`
with ``below=True``) and, on a discovery, the exponential mechanism over the histogram
(line 12, :func:`~ragprivacy.dp.exponential_mechanism`), until c discoveries (line 16).
:func:`voter_slots` is line 4's uniform split of the m·k retrieved slots into m voters.

Both draw from a :class:`~ragprivacy.dp.ChaCha20Bits` when one is given: an audited
answer derives them from the committed window seed and the public record
(:func:`~ragprivacy.dp.derived_bits`: ``child("partition")``, ``child("threshold")``,
``child("exponential")``), so that a verifier holding the seed replays the release from
the voters' witnessed votes (:class:`VoteTrace`) and the provider chooses none of it.
Without one they read fresh OS entropy (secure) or ``rng`` (simulation), as before.

The draws happen in the same order whichever source feeds them, so a seeded simulation
gives the same answers as when this rule lived inside the vote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragprivacy._random import RngLike
from ragprivacy._validation import check_positive, check_positive_int
from ragprivacy.dp.exponential import exponential_mechanism
from ragprivacy.dp.randomness import ChaCha20Bits
from ragprivacy.dp.sparse_vector import AboveThreshold
from ragprivacy.errors import DataError

__all__ = [
    "TokenRelease",
    "VoteRecorder",
    "VoteStep",
    "VoteTrace",
    "vote_histogram",
    "voter_slots",
]


def voter_slots(bits: ChaCha20Bits, voters: int, per_voter: int) -> list[tuple[int, ...]]:
    """Alg. 4 line 4 from ``bits``: the slot indices (0 … m·k − 1, retrieved documents
    first, then padding) of each of the ``voters`` voters, ``per_voter`` each."""
    voters = check_positive_int("voters", voters)
    per_voter = check_positive_int("per_voter", per_voter)
    order = bits.permutation(voters * per_voter)
    return [tuple(order[i * per_voter : (i + 1) * per_voter]) for i in range(voters)]


class TokenRelease:
    """The noisy part of one voted answer (Alg. 4 lines 2, 11–16), step by step.

    Args:
        theta: the public threshold θ (an integer count).
        epsilon_token: ε_0 of one discovery; ε_Lap = ε_Expo = ε_0/2 (line 1).
        max_discoveries: c.
        resample_threshold: re-draw θ̂ after each discovery (the vote's δ > 0 accounting,
            :mod:`ragprivacy.rag.dp_vote`).
        simulation, rng: float noise from ``rng`` (one stream for both mechanisms, in
            the order they are called).
        bits: secure mode: the threshold and the exponential mechanism read
            ``bits.child("threshold")`` and ``bits.child("exponential")``; ``None`` = fresh
            OS entropy for each.
    """

    def __init__(
        self,
        theta: int,
        epsilon_token: float,
        max_discoveries: int,
        *,
        resample_threshold: bool = False,
        simulation: bool = False,
        rng: RngLike = None,
        bits: ChaCha20Bits | None = None,
    ) -> None:
        self.epsilon_half = check_positive("epsilon_token", epsilon_token) / 2
        self.simulation = bool(simulation)
        self._rng = rng
        self._expo = None if bits is None else bits.child("exponential")
        self._sv = AboveThreshold(
            theta,
            self.epsilon_half,
            max_discoveries=max_discoveries,
            below=True,
            resample_threshold=resample_threshold,
            simulation=simulation,
            rng=rng,
            bits=None if bits is None else bits.child("threshold"),
        )  # θ̂ = θ + Lap(2/ε_Lap) now (line 2)

    @property
    def discoveries(self) -> int:
        return self._sv.discoveries

    @property
    def halted(self) -> bool:
        """True once c discoveries were made (line 16)."""
        return self._sv.halted

    def step(self, hist: np.ndarray, non_rag: int) -> int | None:
        """One token: ``hist`` counts the voters' votes over the vocabulary, ``non_rag`` is
        the non-RAG token's position in it (−1: outside, counted 0). The exponential
        mechanism's pick on a discovery; ``None`` when the non-RAG token is released."""
        count = int(hist[non_rag]) if non_rag >= 0 else 0
        if not self._sv.test(count):  # line 11: no discovery
            return None
        if self.simulation:
            pick = exponential_mechanism(hist, self.epsilon_half, simulation=True, rng=self._rng)
        else:
            pick = exponential_mechanism(hist, self.epsilon_half, bits=self._expo)
        return int(pick)


@dataclass(frozen=True, slots=True)
class VoteStep:
    """One released token: every vote as a vocabulary position (index 0: the non-RAG
    prompt's, then voter 1 … m; −1: outside the vocabulary), whether it was a discovery,
    the released token's position (the pick, or the non-RAG vote's) and its text."""

    votes: tuple[int, ...]
    discovery: bool
    released: int
    token: str


@dataclass(frozen=True, slots=True)
class VoteTrace:
    """What one voted answer did, for its replay: the vocabulary's size, ⟨EOS⟩'s position
    and a digest of it, each step, the answer's text and, when the vote failed part way
    (the generator failed after the documents were read), the error's type."""

    vocabulary_size: int
    eos: int
    vocabulary_digest: str
    steps: tuple[VoteStep, ...]
    text: str
    failure: str = ""

    def tokens(self) -> tuple[str, ...]:
        """The released tokens, ⟨EOS⟩ left out."""
        return tuple(s.token for s in self.steps if s.released != self.eos)

    def to_dict(self) -> dict[str, Any]:
        return {
            "vocabulary_size": self.vocabulary_size,
            "eos": self.eos,
            "vocabulary_digest": self.vocabulary_digest,
            "steps": [[list(s.votes), s.discovery, s.released, s.token] for s in self.steps],
            "text": self.text,
            "failure": self.failure,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VoteTrace:
        try:
            steps = tuple(
                VoteStep(tuple(int(v) for v in votes), bool(disc), int(rel), str(tok))
                for votes, disc, rel, tok in d["steps"]
            )
            return cls(
                vocabulary_size=int(d["vocabulary_size"]),
                eos=int(d["eos"]),
                vocabulary_digest=str(d["vocabulary_digest"]),
                steps=steps,
                text=str(d["text"]),
                failure=str(d.get("failure", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"A vote trace is malformed: {exc}.") from None


class VoteRecorder:
    """Collects a vote's trace while it runs, so that a vote whose generator fails part
    way keeps the steps it released (an audited answer records them)."""

    def __init__(self) -> None:
        self.vocabulary_size = 0
        self.eos = -1
        self.vocabulary_digest = ""
        self.steps: list[VoteStep] = []

    def trace(self, text: str, failure: str = "") -> VoteTrace:
        return VoteTrace(
            self.vocabulary_size, self.eos, self.vocabulary_digest, tuple(self.steps), text, failure
        )


def vote_histogram(votes: Sequence[int] | np.ndarray, size: int) -> np.ndarray:
    """Alg. 8: the voters' votes (``votes[1:]``; the non-RAG row is no voter) counted
    over a vocabulary of ``size`` (positions −1 count for none)."""
    v = np.asarray(votes[1:], dtype=np.int64)
    return np.bincount(v[v >= 0], minlength=size).astype(np.int64)

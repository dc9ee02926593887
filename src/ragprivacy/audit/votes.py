"""Audited voting tenants: Private-RAG's DP token vote (Alg. 4) inside the audit window.

A ``dp_vote`` tenant's answer is a ledger record like a retrieval's, r_q = (a, t(a),
C(H(q), n), C(H(answer)), ts, j, π_q), and its account's answers are counted by the ledger.
What the vote draws at random — the voter partition (line 4), the noisy threshold and
every token's test (lines 2, 11), the exponential mechanism's picks (line 12) — is derived
from the committed seed and the public record, H(s_W ‖ rec_q) with rec_q = (W, a, t(a),
H(q), j, n) (:func:`ragprivacy.dp.derived_bits`; the partition, threshold and picks read
its children ``partition``, ``threshold`` and ``exponential``). The vote's settings are
committed per tenant before the window opens (:class:`VoteSettings`, in the signed
commitments), so the provider chooses none of it.

The witness (:class:`~ragprivacy.audit.RecordWitness` with ``vote``) holds what the
provider saw: the retrieved positions with their Merkle openings, and every voter's vote
at every step (:class:`ragprivacy.dp.VoteTrace`). A verifier with the seed re-executes
(:func:`check_vote`):

* the retrieval: the m·k positions are the top of the exact integer scores of Emb(q) over
  the tenant's committed index (ties to the lower position; the vote's guarantee covers
  retrieval, so it has no noise of its own);
* the partition, re-derived; voters whose contexts are the same documents in the same
  order voted alike, and a voter holding only padding voted as the non-RAG prompt;
* the release, step by step from the witnessed votes with the re-derived noise: every
  discovery, every pick and every released token, at most c discoveries, and the stop
  rule (⟨EOS⟩, c discoveries or T_max tokens);
* the account's answers: at most min(r, ⌊ε_acc/ε_q⌋) in the window, each charged ε_q
  (pure: c·ε_0 ≤ ε_q, checked on the committed settings).

**What it does not check** (docs/audit.md): that each vote is the language model's
greedy next token for the voter's prompt — re-running the model is not done — nor the
mapping of vocabulary positions to token texts (the witness carries a digest of the
vocabulary, not the vocabulary). A provider that fabricates votes is not caught here;
one that chooses the noise, the partition, the retrieved set, or a release the noise did
not give, is.

``murag`` and ``murag_ada`` tenants vote the same way over the documents their screening
passes on, at ε_RAG (ε_q, or ε_q − ε_thr for MURAG-ADA); their screening and the
per-document filters it charges are committed and replayed by
:mod:`ragprivacy.audit.filters` (the retrieved set is then the screening's, not the top
m·k).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ragprivacy._validation import check_positive, check_positive_int
from ragprivacy.audit.commitments import canonical_json
from ragprivacy.dp import ChaCha20Bits, TokenRelease, VoteTrace, vote_histogram, voter_slots
from ragprivacy.errors import ConfigError

__all__ = ["AUDITED_VOTING_MODES", "VoteSettings", "answer_hash", "check_vote", "vote_positions"]

#: the voting modes the audit covers
AUDITED_VOTING_MODES = ("dp_vote", "murag", "murag_ada")

#: the screening settings each mode commits (:mod:`ragprivacy.audit.filters`)
_SCREENING: dict[str, tuple[str, ...]] = {
    "dp_vote": (),
    "murag": ("tau", "max_retrievals"),
    "murag_ada": ("max_retrievals", "epsilon_thr", "bin_top", "bin_bottom", "bin_size"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteSettings:
    """A voting tenant's committed settings (Private-RAG Alg. 4).

    ``slots`` = m·k documents retrieved per answer, ``docs_per_voter`` = k (so m voters),
    ``theta`` = θ, ``max_tokens`` = T_max, ``epsilon_q`` the ε each answer is charged,
    ``epsilon_token`` = ε_0 of one discovery and ``max_discoveries`` = c (pure
    composition: c·ε_0 ≤ ε_RAG, Lemma 1; ε_RAG = ε_q but under MURAG-ADA).

    ``murag`` (Alg. 1) and ``murag_ada`` (Alg. 2/6) tenants also commit their screening
    (:mod:`ragprivacy.audit.filters`): M (``max_retrievals``), and τ (``tau``) or ε_thr
    with the score bins (``epsilon_thr``, ``bin_top``, ``bin_bottom``, ``bin_size``); τ
    and the bins are in the window's grid units (2^b per unit of cosine). ``slots`` is
    then K, the documents the vote gets (padded when fewer pass).
    """

    mode: str
    slots: int
    docs_per_voter: int
    theta: int
    max_tokens: int
    epsilon_q: float
    epsilon_token: float
    max_discoveries: int
    #: MURAG: the relevance threshold τ in grid units (a document is relevant above it)
    tau: int = 0
    #: MURAG/-ADA: M, each document's budget being M·ε_q over its lifetime
    max_retrievals: int = 0
    #: MURAG-ADA: ε_thr of the adaptive threshold (the vote gets ε_q − ε_thr)
    epsilon_thr: float = 0.0
    #: MURAG-ADA: the score bins (grid units): top edge, bottom edge and width
    bin_top: int = 0
    bin_bottom: int = 0
    bin_size: int = 0

    def __post_init__(self) -> None:
        if self.mode not in AUDITED_VOTING_MODES:
            raise ConfigError(
                f"Only {', '.join(AUDITED_VOTING_MODES)} tenants are audited; got mode "
                f"{self.mode!r}."
            )
        check_positive_int("slots", self.slots)
        check_positive_int("docs_per_voter", self.docs_per_voter)
        check_positive_int("theta", self.theta, allow_zero=True)
        check_positive_int("max_tokens", self.max_tokens)
        check_positive("epsilon_q", self.epsilon_q)
        check_positive("epsilon_token", self.epsilon_token)
        check_positive_int("max_discoveries", self.max_discoveries)
        if self.slots % self.docs_per_voter:
            raise ConfigError(
                f"{self.slots} retrieved documents do not split into voters of "
                f"{self.docs_per_voter}."
            )
        unused = [k for k, v in self._screening().items() if k not in _SCREENING[self.mode] and v]
        if unused:
            raise ConfigError(f"A {self.mode} tenant takes no {', '.join(unused)}.")
        if self.filtered:
            check_positive_int("max_retrievals", self.max_retrievals)
        if self.mode == "murag_ada":
            if not 0 < self.epsilon_thr < self.epsilon_q:
                raise ConfigError(
                    f"MURAG-ADA splits ε_q = ε_thr + ε_RAG with both positive; got "
                    f"epsilon_thr={self.epsilon_thr:g} and epsilon_q={self.epsilon_q:g}."
                )
            check_positive_int("bin_size", self.bin_size)
            if not self.bin_top > self.bin_bottom:
                raise ConfigError(
                    f"The score bins need bin_top > bin_bottom; got {self.bin_top} and "
                    f"{self.bin_bottom}."
                )
        if self.max_discoveries * self.epsilon_token > self.epsilon_rag * (1 + 1e-9):
            raise ConfigError(
                f"c·ε_0 = {self.max_discoveries}·{self.epsilon_token:g} exceeds the ε = "
                f"{self.epsilon_rag:g} each answer's vote is charged (Private-RAG Lemma 1)."
            )

    def _screening(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _SCREENING["murag_ada"] + ("tau",)}

    @property
    def filtered(self) -> bool:
        """Whether the tenant keeps per-document filters (MURAG, MURAG-ADA)."""
        return self.mode != "dp_vote"

    @property
    def epsilon_rag(self) -> float:
        """The vote's ε: ε_q, or ε_q − ε_thr under MURAG-ADA (Thm 2)."""
        return self.epsilon_q - self.epsilon_thr

    @property
    def document_budget(self) -> float:
        """M·ε_q: what each document of a filtered tenant may spend in its lifetime."""
        return self.max_retrievals * self.epsilon_q

    def bin_edges(self) -> np.ndarray:
        """MURAG-ADA's bin edges in grid units, most relevant first (as
        :func:`ragprivacy.retrieval.score_bins`): bin i holds [edges[i+1], edges[i])."""
        count = -(-(self.bin_top - self.bin_bottom) // self.bin_size)
        return self.bin_top - self.bin_size * np.arange(count + 1, dtype=np.int64)

    @property
    def voters(self) -> int:
        """m."""
        return self.slots // self.docs_per_voter

    def answer_cap(self, epsilon_acc: float, rate_limit: int) -> int:
        """An account's answers in a window: its rate limit, and no more than its ε_acc
        buys at ε_q each (sequential composition)."""
        return max(0, min(int(rate_limit), math.floor(epsilon_acc / self.epsilon_q + 1e-9)))

    def to_dict(self) -> dict[str, Any]:
        """The committed form: the screening settings only of the modes that have them
        (a ``dp_vote`` tenant's settings read as before filtered tenants were audited)."""
        d = asdict(self)
        for key in self._screening():
            if key not in _SCREENING[self.mode]:
                d.pop(key)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VoteSettings:
        try:
            return cls(**dict(d))
        except TypeError as exc:
            raise ConfigError(
                f"A voting tenant's committed settings are malformed: {exc}."
            ) from None


def answer_hash(tenant: str, text: str) -> str:
    """H(answer): SHA-256 hex over the tenant and the released text — what a voting
    record commits to in place of H(top-K) (the documents never leave the service)."""
    return hashlib.sha256(
        b"answer:" + canonical_json({"tenant": tenant, "answer": text})
    ).hexdigest()


def vote_positions(scores: np.ndarray, slots: int) -> tuple[int, ...]:
    """The ``slots`` positions of largest exact score, best first, ties to the lower
    position: the vote's retrieval."""
    s = np.asarray(scores, dtype=np.int64)
    order = np.lexsort((np.arange(s.shape[0]), -s))
    return tuple(int(p) for p in order[:slots])


def check_vote(
    trace: VoteTrace,
    settings: VoteSettings,
    bits: ChaCha20Bits,
    contents: Sequence[str],
) -> str | None:
    """Replay one voted answer (module docstring); ``contents`` are the committed text
    hashes of the retrieved documents, best first. The first failure, or ``None``."""
    m, steps, size = settings.voters, trace.steps, trace.vocabulary_size
    if len(steps) > settings.max_tokens:
        return f"{len(steps)} tokens were released; T_max is {settings.max_tokens}"
    if steps and not 0 <= trace.eos < size:
        return "the vocabulary's ⟨EOS⟩ lies outside it"
    groups = voter_slots(bits.child("partition"), m, settings.docs_per_voter)
    real = len(contents)
    contexts = [tuple(contents[s] for s in g if s < real) for g in groups]
    release = TokenRelease(
        settings.theta, settings.epsilon_token, settings.max_discoveries, bits=bits
    )
    for t, step in enumerate(steps):
        where = f"token {t + 1}"
        if len(step.votes) != m + 1 or any(not -1 <= v < size for v in step.votes):
            return f"{where}: the votes are not one vocabulary position per voter"
        for i, ctx in enumerate(contexts):
            same = 0 if not ctx else next(j + 1 for j, c in enumerate(contexts) if c == ctx)
            if step.votes[i + 1] != step.votes[same]:
                return (
                    f"{where}: voter {i + 1} voted unlike the prompt with the same context "
                    "(the votes do not follow the derived partition)"
                )
        if release.halted:
            return f"{where} came after the c-th discovery"
        pick = release.step(vote_histogram(step.votes, size), step.votes[0])
        if (pick is not None) != step.discovery:
            return f"{where}: the derived noisy threshold test does not give its discovery"
        expected = step.votes[0] if pick is None else pick
        if step.released != expected:
            return f"{where}: the released token is not the one the derived noise selects"
        if step.released == trace.eos and t != len(steps) - 1:
            return f"{where}: tokens were released after ⟨EOS⟩"
    if trace.failure:
        return None  # it failed part way: the steps it released are what it spent
    ended = bool(steps) and (
        steps[-1].released == trace.eos or release.halted or len(steps) == settings.max_tokens
    )
    if not ended:
        return "the answer stopped before ⟨EOS⟩, the c-th discovery or T_max tokens"
    return None

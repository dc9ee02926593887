"""Audited per-document filters: MURAG and MURAG-ADA answers inside the audit window.

A ``murag`` or ``murag_ada`` tenant (Private-RAG Alg. 1, Alg. 2/6) screens each query's
documents by relevance and charges every screened document's privacy filter before the
single-query vote runs (:mod:`ragprivacy.retrieval.threshold`); a document whose budget
M·ε_q cannot pay the next charge drops out. The filters outlive a window, so a window
commits, per filtered tenant, what each document has spent when it opens, and the
verifier replays every charge of the window from there, in ledger order:

* **C_filters[t]** = H("C_filters" ‖ K_filt ‖ t ‖ spent), with K_filt derived from s_W
  (:func:`filters_commitment`): a keyed hash, so nobody without the seed can test a
  guessed state (which documents earlier windows retrieved) against it; the auditor
  package holds the state, and the verifier recomputes the commitment from it.
* **Screening** (:func:`screen_documents`), a function of the exact integer scores, the state and
  the derived bits H(s_W ‖ rec_q)'s child ``screen`` — nothing the provider chooses:
  fixed τ: A_t = the documents that can pay ε_q, D_qt = those of A_t scoring above τ;
  each pays ε_q, and the top K of D_qt (padded, Alg. 3) go to the vote. Adaptive: the
  noisy prefix sums over score bins (exact discrete Laplace at scale 1/ε_thr, from the
  derived bits) release the most relevant bins; their documents that can pay ε_thr pay
  it, those that can pay ε_q in all pay ε_q and form A'_t, whose top K go to the vote
  (Alg. 6 lines 2–15).
* **Replay** (:func:`replay_filters`): the verifier re-screens every record of a
  filtered tenant in ledger order from the committed state, checks the witnessed
  screening (documents voted over, charges, threshold), and applies the charges, so a
  document charged past its budget, a screening the derived noise did not give, or a
  document left out while it could still pay FAILs. The replay covers every record of
  the tenant even when the verifier samples the others (a charge's effect outlives its
  record).

Scores and thresholds are integers in the window's grid units (2^b per unit of cosine,
:func:`ragprivacy.audit.integer_scores`); the state is each document's spent ε in
float64, and a document can pay ``amount`` iff spent + amount ≤ M·ε_q·(1 + 10⁻⁹), the
rule of :class:`ragprivacy.dp.BudgetStore`. Each float sum is one IEEE addition in the
same order for provider and verifier, so the replay is bit for bit.

Deviation from the library's :class:`~ragprivacy.rag.MuRAG`: the scores are the exact
fixed-point scores of the committed index (the library compares float cosines), and only
the pure filter (M·ε_q per document, Private-RAG Thm 1–2) is audited, not the Rényi one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragprivacy.audit.commitments import commit_hash
from ragprivacy.audit.votes import VoteSettings
from ragprivacy.dp import ChaCha20Bits, noisy_prefix_threshold
from ragprivacy.errors import ConfigError, DataError

__all__ = [
    "FilterScreen",
    "FilterState",
    "apply_charges",
    "filters_commitment",
    "replay_filters",
    "screen_documents",
]

_RTOL = 1e-9  # ragprivacy.dp.BudgetStore's tolerance for float sums


@dataclass(frozen=True, slots=True)
class FilterScreen:
    """What one screening did: the ``positions`` voted over (the top K of the charged
    set that can pay the whole answer, best first; the vote pads the rest), every
    ``charges`` entry (position, ε paid) in position order, and the threshold ``tau``
    used (τ, or the released τ_t of MURAG-ADA, in grid units)."""

    positions: tuple[int, ...]
    charges: tuple[tuple[int, float], ...]
    tau: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "positions": list(self.positions),
            "charges": [[p, a] for p, a in self.charges],
            "tau": self.tau,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FilterScreen:
        try:
            return cls(
                positions=tuple(int(p) for p in d["positions"]),
                charges=tuple((int(p), float(a)) for p, a in d["charges"]),
                tau=int(d["tau"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"A witness's screening is malformed: {exc}.") from None


def _fits(spent: np.ndarray, amount: float, capacity: float) -> np.ndarray:
    return np.asarray(spent + amount <= capacity * (1 + _RTOL))


def _bins(scores: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each integer score, most relevant first (−1 below the lowest edge); the
    first bin also holds scores above the top edge (as :func:`ragprivacy.retrieval.
    score_bins`, in integers)."""
    width = int(edges[0] - edges[1])
    b = np.maximum((int(edges[0]) - scores) // width, 0)
    b[scores < edges[-1]] = -1
    return np.asarray(np.minimum(b, edges.size - 2))


def screen_documents(
    scores: np.ndarray, spent: np.ndarray, settings: VoteSettings, bits: ChaCha20Bits
) -> FilterScreen:
    """One query's screening over the tenant's exact ``scores`` and filter state
    ``spent`` (module docstring); ``bits``: the record's derived bits (the adaptive
    threshold reads their child ``screen``)."""
    s = np.asarray(scores, dtype=np.int64)
    budget = settings.document_budget
    eps_q = settings.epsilon_q
    if settings.mode == "murag":  # Alg. 1 lines 2-5
        chosen = np.flatnonzero((s > settings.tau) & _fits(spent, eps_q, budget))
        charges = [(int(p), eps_q) for p in chosen]
        tau = settings.tau
    elif settings.mode == "murag_ada":  # Alg. 2/6 lines 2-15
        edges = settings.bin_edges()
        bins = _bins(s, edges)
        use = (bins >= 0) & _fits(spent, settings.epsilon_thr, budget)
        counts = np.bincount(bins[use], minlength=edges.size - 1).astype(np.int64)
        pt = noisy_prefix_threshold(
            counts, settings.slots, settings.epsilon_thr, bits=bits.child("screen")
        )
        released = np.flatnonzero(use & (bins <= pt.bins_released - 1))
        both = _fits(spent[released], eps_q, budget)
        chosen = released[both]
        paid = np.where(both, eps_q, settings.epsilon_thr)
        charges = [(int(p), float(a)) for p, a in zip(released, paid)]
        tau = int(edges[pt.bins_released])
    else:
        raise ConfigError(f"A {settings.mode} tenant has no per-document filters.")
    order = np.lexsort((chosen, -s[chosen]))[: settings.slots]  # Alg. 3, ties to lower
    return FilterScreen(tuple(int(p) for p in chosen[order]), tuple(charges), int(tau))


def apply_charges(spent: np.ndarray, result: FilterScreen) -> None:
    """Add ``result``'s charges to ``spent`` in place (one IEEE addition each)."""
    for p, amount in result.charges:
        spent[p] = spent[p] + amount


def filters_commitment(seed: bytes, tenant: str, spent: np.ndarray) -> str:
    """C_filters[t]: a keyed hash of tenant ``tenant``'s filter state when the window
    opens, keyed by K_filt = H("K_filt", s_W) (module docstring)."""
    state = np.ascontiguousarray(spent, dtype="<f8").tobytes()
    return commit_hash("C_filters", commit_hash("K_filt", seed), tenant, state).hex()


class FilterState:
    """A filtered tenant's state inside one window: what each document (by position in
    the committed index) had spent when the window opened (``start``, committed), plus
    the charges of the tenant's records so far (:meth:`catch_up`).

    The state is a replay of the ledger, the verifier's own, not a second store that
    could drift from it: every process serving the window catches up on the records any
    of them appended before it screens, and an append whose screening missed one is
    stale (:meth:`ragprivacy.audit.LedgerCounter.guard`) and screened again."""

    def __init__(self, start: np.ndarray) -> None:
        self.start = np.array(start, dtype=np.float64)
        if self.start.ndim != 1 or not np.all(np.isfinite(self.start)) or (self.start < 0).any():
            raise ConfigError("A filter state is one finite non-negative ε per document.")
        self.start.flags.writeable = False
        self._spent = self.start.copy()
        self.applied = 0  # the tenant's records whose charges are in
        self._lock = threading.Lock()

    def catch_up(
        self,
        fetch: Callable[[int], tuple[Sequence[int], int]],
        load: Callable[[Sequence[int]], Sequence[FilterScreen]],
    ) -> tuple[np.ndarray, int]:
        """Apply the charges of the tenant's records not applied yet: ``fetch(applied)``
        gives their ledger positions and the tenant's record count, ``load`` their
        screenings. Returns the state and how many records it holds, read together
        (another thread may catch up meanwhile)."""
        with self._lock:
            new, total = fetch(self.applied)
            for result in load(new):
                apply_charges(self._spent, result)
            self.applied = max(self.applied, total)
            return self._spent.copy(), self.applied


def replay_filters(
    screens: Sequence[tuple[int, np.ndarray, ChaCha20Bits, FilterScreen | None]],
    start: np.ndarray,
    settings: VoteSettings,
) -> list[tuple[int, str]]:
    """Replay one tenant's screenings in ledger order (module docstring).

    ``screens``: per record, (ledger position, exact scores, derived bits, the
    witnessed screening). Returns (position, what failed) for each record whose
    witnessed screening is not the one the state and the derived noise give; the
    replay goes on from the re-executed charges."""
    spent = np.array(start, dtype=np.float64)
    failures: list[tuple[int, str]] = []
    for position, scores, bits, witnessed in screens:
        if scores.shape != spent.shape:
            failures.append((position, "the scores do not cover the committed filter state"))
            continue
        expected = screen_documents(scores, spent, settings, bits)
        if witnessed is None:
            failures.append((position, "the witness has no screening"))
        elif witnessed.positions != expected.positions:
            failures.append(
                (
                    position,
                    "the documents voted over are not the top K of those the committed "
                    "filters and the derived threshold admit",
                )
            )
        elif witnessed.charges != expected.charges or witnessed.tau != expected.tau:
            failures.append(
                (
                    position,
                    "the filter charges are not those the committed filters and the derived "
                    "threshold give",
                )
            )
        apply_charges(spent, expected)
    return failures

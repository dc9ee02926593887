"""The one integer selection of an audited query (collusion paper eq. 2.1, §5.3).

:func:`answer_query` is the step every audited path runs — an :class:`AuditWindow`'s
queries, the service's, the demo's: noise z_q derived from (s_W, rec_q) by the committed
derivation (:class:`~ragprivacy.audit.noise.QueryNoise`), the account's noise-then-select
over its tenant's committed index (:func:`honest_selection`, which reads only the slots
the noise leaves in the race), then the record r_q and its private witness. The
verifier's re-execution runs the same derivation and selection with every slot's score
at hand and must find the same positions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ragprivacy._typing import IntArray
from ragprivacy.audit.commitments import TenantCommitment
from ragprivacy.audit.noise import QueryNoise, ScoreAt
from ragprivacy.audit.proofs import ProofSystem, RecordWitness
from ragprivacy.audit.records import (
    QueryRecord,
    query_commitment,
    record_salt,
    topk_commitment,
    topk_hash,
)
from ragprivacy.dp import GaussianNoisyTopK, noise_first_min_scored, query_input

__all__ = ["ScoreAt", "Selection", "answer_query", "exact_selection", "honest_selection"]


def exact_selection(mechanism: GaussianNoisyTopK, noise: IntArray, score_at: ScoreAt) -> IntArray:
    """The account's noise-then-select TopK(clip(s) + z) (collusion paper eq. 2.1), asking
    ``score_at`` only for the slots whose noise leaves them a chance.

    ``noise`` holds z_q for every slot (derived before any score is read); ``score_at``
    gives exact integer scores for the positions it is asked. Every clipped score lies
    in the mechanism's bounds [lo, hi], so a slot whose z_i + hi is below the K-th
    largest z + lo cannot win (K slots beat it for sure):
    :meth:`~ragprivacy.dp.GaussianNoisyTopK.noise_first_positions` gives the others, C,
    from the noise alone. Only C is scored, and the top K of C under the same rule (ties
    to the lower position, C sorted) is the top K of the whole index, bit for bit: the
    verifier's re-execution stays the full rule over every slot and finds the same
    positions. At the audit's calibrations (σ ≫ Δ) C holds about K slots, so a query
    reads a handful of rows (from memory, or by position from a pgvector table) instead
    of every committed embedding.

    C is padded with the next-largest noises to at least
    :func:`ragprivacy.dp.noise_first_min_scored` (max(64, 8K)) slots, so the number of
    rows read is constant in practice: which rows are read depends on the noise and must
    stay as secret as it (a log of the rows read, seen beside the answer, says more than
    the answer). When C is more than :data:`~ragprivacy.dp.account.NOISE_FIRST_MAX_FRACTION` of
    the index (σ not large against Δ) every slot is scored in one pass instead.
    """
    z = np.asarray(noise, dtype=np.int64)
    if mechanism.bounds_units() is None:  # no clipping: no bound to prune with
        return mechanism.select_units(score_at(np.arange(z.shape[0], dtype=np.int64)), z)
    return mechanism.select_units_noise_first(
        z, score_at, min_scored=noise_first_min_scored(mechanism.k)
    )


#: a selection rule: the positions an account's query gets, from its mechanism, its derived
#: noise and a way to read exact scores (:func:`honest_selection` is the honest one)
Selection = Callable[[GaussianNoisyTopK, QueryNoise, ScoreAt], IntArray]


def honest_selection(
    mechanism: GaussianNoisyTopK, noise: QueryNoise, score_at: ScoreAt
) -> IntArray:
    """The account's noise-then-select on its derived noise (:meth:`QueryNoise.select`:
    lazy where the policy commits it and public parameters admit it, else
    :func:`exact_selection` over every slot's noise)."""
    return noise.select(score_at)


def answer_query(
    *,
    window_id: str,
    mechanism: GaussianNoisyTopK,
    grid_bits: int,
    index: TenantCommitment,
    seed: bytes,
    account: str,
    tenant: str,
    query_fixed: np.ndarray,
    query_hash: str,
    query_text: str | None,
    seq: int,
    ts: int,
    proof_system: ProofSystem,
    scored_tenant: str | None = None,
    scores: np.ndarray | None = None,
    select: Selection = honest_selection,
    salt: str | None = None,
    nonce: str = "",
    derivation: str = "full",
) -> tuple[QueryRecord, RecordWitness]:
    """Answer one query privately: the one implementation every audited path runs.

    ``scores``: the exact integer scores of ``query_fixed`` against ``index``, when the
    caller computed them already (they depend on neither the seed nor the record, so a
    provider computes them before it takes its lock); computed here otherwise.

    Noise z_q derived from (s_W, rec_q = (W, a, t(a), H(q), j, n)) by ``derivation`` (the
    policy's :attr:`~ragprivacy.audit.AuditPolicy.noise`) for the slots of the tenant's
    index, exact integer scores of the fixed-point query against the slots that noise
    leaves in the race (:func:`honest_selection`: the same positions as scoring every
    slot), the account mechanism's integer noise-then-select, then the record r_q (H(q) and
    H(top-K) committed under a fresh salt) with its attestation π_q and the private witness
    (the salt, Merkle openings of the selected positions). ``salt``: a fresh one unless
    given (a test that compares two runs gives one).
    Appending the record, charging the account and signing the receipt are the caller's
    (:class:`~ragprivacy.audit.AuditWindow`). ``select`` is the selection rule; only a
    test of the verifier passes another one (a cheating provider's, e.g.
    :mod:`ragprivacy.audit.cheats`).
    """
    rec = query_input(window_id, account, tenant, query_hash, seq, nonce)
    z = QueryNoise(seed, rec, mechanism, index.size, derivation)
    given = scores

    def score_at(positions: IntArray) -> IntArray:
        """Exact scores at ``positions``: from ``scores`` when given, else read from the
        index (in memory, or rows fetched by position from its store)."""
        pos = np.asarray(positions, dtype=np.int64)
        if given is not None:
            return np.asarray(given)[pos]
        if pos.shape[0] == index.size and np.array_equal(pos, np.arange(index.size)):
            return index.scores(query_fixed, grid_bits)
        return index.scores_at(query_fixed, pos.tolist(), grid_bits)

    positions = select(mechanism, z, score_at)
    chosen = tuple(int(p) for p in positions)
    chosen_ids = tuple(index.ids[p] for p in chosen)
    chosen_contents = tuple(index.contents[p] for p in chosen)
    openings = [
        (p, vector.hex(), tuple(h.hex() for h in proof), leaf.hex())
        for p, (vector, proof, leaf) in zip(chosen, index.openings(chosen))
    ]
    salt = salt or record_salt()
    witness = RecordWitness(
        query_text=query_text,
        query_fixed=np.asarray(query_fixed).astype("<i4").tobytes().hex(),
        scored_tenant=scored_tenant or tenant,
        noise_digest=z.digest,
        positions=chosen,
        ids=chosen_ids,
        contents=chosen_contents,
        openings=tuple(openings),
        salt=salt,
        nonce=nonce,
    )
    record = QueryRecord(
        account,
        tenant,
        query_commitment(salt, query_hash, nonce),
        topk_commitment(salt, topk_hash(tenant, chosen, chosen_ids, chosen_contents)),
        int(ts),
        int(seq),
        proof_system.prove_record(witness),
    )
    return record, witness

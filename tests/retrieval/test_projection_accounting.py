"""DP-RP-G's accounting (RP paper App. D, Alg. 2) under replace-one neighbours: Δ = 2c.

The retriever returns positions of the top-K, so it is DP only under replace-one-slot
neighbours, where two rows of norm ≤ c differ by up to 2c; σ is calibrated for Δ = 2c and
every release is charged ``GaussianEvent(σ, 2c)`` (the paper charges c for add/remove).
The statistical test releases the noisy matrix of a worst-case neighbour pair (row r
replaced by r' = −r, ‖r − r'‖ = 2c) and reads μ back from the released row.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.stats import norm

from ragprivacy.corpus import Corpus
from ragprivacy.dp import (
    GaussianEvent,
    NoOpEvent,
    gaussian_mu,
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
)
from ragprivacy.index import create_index
from ragprivacy.retrieval import DPProjectionRetriever, KnowledgeBase, dp_rp_sigma
from ragprivacy.types import Document

TEXTS = [
    "red apples and green pears in the orchard",
    "blue sky over the quiet harbour at night",
    "green pears ripen slowly in autumn",
    "the harbour master counts fishing boats",
    "apples and pears make a fine autumn pie",
    "night trains cross the northern plain",
]
SLOT = 2  # the slot whose document the neighbour replaces
DIM = 16
CLIP = 0.25  # below every projected norm here, so both rows of the pair have norm c


def _sigma(calibration: str, epsilon: float, delta: float, sensitivity: float) -> float:
    if calibration == "analytic":
        return gaussian_sigma_analytic(epsilon, delta, sensitivity)
    return gaussian_sigma_classic(epsilon, delta, sensitivity, allow_large_epsilon=True)


@pytest.fixture(scope="module")
def pair() -> tuple[KnowledgeBase, KnowledgeBase]:
    """Two indices of the same size that differ in the document of one slot, whose vector
    is the negation of the original: after the (linear) projection and clipping the two
    rows are r and −r, the worst case ‖r − r'‖ = 2c."""
    docs = [Document(f"d{i}", t) for i, t in enumerate(TEXTS)]
    kb = KnowledgeBase.build(Corpus(docs), embedder="hashing")
    vectors = kb.embedder.encode(kb.corpus.texts)
    vectors[SLOT] = -vectors[SLOT]
    other = list(docs)
    other[SLOT] = Document(f"d{SLOT}", "an unrelated record in the same slot")
    corpus = Corpus(other)
    index = create_index("exact", dim=kb.embedder.dim)
    index.add(vectors, corpus.ids)
    return kb, KnowledgeBase(corpus, kb.embedder, index)


# ------------------------------------------------------------------------------ the event


@pytest.mark.parametrize(
    ("calibration", "epsilon", "delta", "clip"),
    [("paper", 10.0, 1e-4, 1.0), ("paper", 1.0, 1e-5, 0.7), ("analytic", 2.0, 1e-6, 0.5)],
)
def test_event_has_sensitivity_2c_and_sigma_is_calibrated_for_it(
    pair: tuple[KnowledgeBase, KnowledgeBase],
    calibration: str,
    epsilon: float,
    delta: float,
    clip: float,
) -> None:
    kb, _ = pair
    dp = DPProjectionRetriever(
        kb,
        k=2,
        dim=DIM,
        epsilon=epsilon,
        delta=delta,
        clip=clip,
        calibration=calibration,
        simulation=True,
        rng=0,
    )
    expected = _sigma(calibration, epsilon, delta, 2 * clip)
    assert dp.sensitivity == 2 * clip
    assert dp.sigma == expected == dp_rp_sigma(epsilon, delta, clip, calibration=calibration)
    # Twice the paper's σ (RP Alg. 2 line 9: sensitivity c) for the same (ε, δ).
    assert dp.sigma == pytest.approx(2 * _sigma(calibration, epsilon, delta, clip), rel=1e-12)
    events = [dp.retrieve(q).event for q in ("apples", "night", "harbour")]
    assert events == [GaussianEvent(sigma=expected, sensitivity=2 * clip)] * 3
    assert dp.config()["sensitivity"] == 2 * clip
    assert dp.config()["neighbouring"] == "replace_one"
    if calibration == "analytic":  # exact: one release is exactly (ε, δ)-DP
        assert isinstance(events[0], GaussianEvent)
        assert events[0].mu == pytest.approx(gaussian_mu(epsilon, delta), rel=1e-9)


def test_defaults_double_the_papers_sigma(pair: tuple[KnowledgeBase, KnowledgeBase]) -> None:
    kb, _ = pair
    dp = DPProjectionRetriever(kb, k=2, dim=DIM, simulation=True, rng=0)  # ε=10, δ=1e-4, c=1
    paper = math.sqrt(2 * math.log(1.25 / 1e-4)) / 10.0  # RP Alg. 2 line 9, Δ = c = 1
    assert paper == pytest.approx(0.434361, abs=1e-6)
    assert dp.sigma == pytest.approx(2 * paper, rel=1e-12)
    assert dp.sigma == pytest.approx(0.868722, abs=1e-6)
    # The claimed μ (so the ε reported) is the paper's; the noise that delivers it doubles.
    assert dp.event is not None and dp.event.mu == pytest.approx(1 / paper, rel=1e-12)


def test_noise_once_charges_one_release(pair: tuple[KnowledgeBase, KnowledgeBase]) -> None:
    kb, _ = pair
    once = DPProjectionRetriever(kb, k=2, dim=DIM, noise="once", simulation=True, rng=0)
    events = [once.retrieve(q).event for q in ("apples", "night", "harbour")]
    assert events[0] == GaussianEvent(sigma=once.sigma, sensitivity=2.0)
    assert events[1:] == [NoOpEvent(), NoOpEvent()]  # the same release, post-processed


def test_secure_mode_adds_the_rounding_of_a_row(pair: tuple[KnowledgeBase, KnowledgeBase]) -> None:
    kb, _ = pair
    dp = DPProjectionRetriever(kb, k=2, dim=DIM, clip=0.5)
    unit = 2.0**-20
    # Rounding each of the 16 coordinates moves a row by ≤ √16/2 units, two rows by 4.
    assert dp.sensitivity == (math.ceil(1.0 / unit) + 4) * unit
    assert dp.sensitivity >= 2 * 0.5 + math.sqrt(DIM) * unit
    assert dp.sigma == _sigma("paper", 10.0, 1e-4, dp.sensitivity)
    assert dp.sigma == pytest.approx(dp_rp_sigma(10.0, 1e-4, 0.5), rel=1e-5)
    assert dp.retrieve("apples").event == GaussianEvent(dp.sigma, dp.sensitivity)


# ------------------------------------------------------- the claim, read back from releases

DRAWS = 20_000  # releases per database
ALPHA = 1e-6  # false-alarm rate of each consistency check (two-sided)
Z = float(norm.isf(ALPHA / 2))  # 4.89


def _released_mu(
    d: DPProjectionRetriever, d_prime: DPProjectionRetriever, draws: int
) -> tuple[float, float]:
    """μ̂ of the released row of SLOT, and its standard error.

    On the line through r and r', u = (r − r')/‖r − r'‖, the released row is N(⟨r, u⟩, σ²)
    on D and N(⟨r', u⟩, σ²) on D': the Gaussian mechanism whose privacy loss is
    μ = ‖r − r'‖/σ (orthogonal directions carry the same noise on both sides, no signal).
    μ̂ is the mean difference over the pooled standard deviation (the noise actually
    drawn, not the σ the retriever reports); its variance is 2/n + μ²/(4n) to first order.
    """
    r, r_prime = d.clipped[SLOT], d_prime.clipped[SLOT]
    u = (r - r_prime) / np.linalg.norm(r - r_prime)
    on_d = np.array([d._noisy()[SLOT] @ u for _ in range(draws)])
    on_d_prime = np.array([d_prime._noisy()[SLOT] @ u for _ in range(draws)])
    sd = math.sqrt((on_d.var(ddof=1) + on_d_prime.var(ddof=1)) / 2)
    mu = float(on_d.mean() - on_d_prime.mean()) / sd
    return mu, math.sqrt(2 / draws + mu**2 / (4 * draws))


def _worst_case_pair(
    pair: tuple[KnowledgeBase, KnowledgeBase], cls: type[DPProjectionRetriever], **options: Any
) -> tuple[DPProjectionRetriever, DPProjectionRetriever]:
    kb, kb_prime = pair
    # The same seed gives both the same public R; the noise streams must be independent.
    d = cls(kb, k=2, dim=DIM, clip=CLIP, simulation=True, rng=0, **options)
    d_prime = cls(kb_prime, k=2, dim=DIM, clip=CLIP, simulation=True, rng=0, **options)
    d._gen, d_prime._gen = np.random.default_rng(11), np.random.default_rng(12)
    np.testing.assert_array_equal(d.matrix, d_prime.matrix)
    rows = np.arange(len(TEXTS)) != SLOT
    np.testing.assert_array_equal(d.clipped[rows], d_prime.clipped[rows])  # one slot differs
    assert np.linalg.norm(d.projected[SLOT]) > CLIP  # both rows clipped to norm exactly c
    np.testing.assert_allclose(d_prime.clipped[SLOT], -d.clipped[SLOT], atol=1e-12)
    gap = float(np.linalg.norm(d.clipped[SLOT] - d_prime.clipped[SLOT]))
    assert gap == pytest.approx(2 * CLIP, rel=1e-12)  # ‖r − r'‖ = 2c: the worst case
    return d, d_prime


class _PaperAccounting(DPProjectionRetriever):
    """The planted bug: the accounting before the fix (and the paper's), σ calibrated for
    Δ = c and ``GaussianEvent(σ, c)`` charged."""

    def __init__(self, kb: KnowledgeBase, **options: Any) -> None:
        super().__init__(kb, **options)
        self.sensitivity = self.clip
        self.sigma = _sigma(self.calibration, self.epsilon, options["delta"], self.clip)


CASES = [("paper", 10.0, 1e-4), ("analytic", 1.0, 1e-5)]


@pytest.mark.statistical
@pytest.mark.parametrize(("calibration", "epsilon", "delta"), CASES)
def test_released_row_has_mu_2c_over_sigma(
    pair: tuple[KnowledgeBase, KnowledgeBase], calibration: str, epsilon: float, delta: float
) -> None:
    d, d_prime = _worst_case_pair(
        pair, DPProjectionRetriever, epsilon=epsilon, delta=delta, calibration=calibration
    )
    assert d.event is not None
    mu, se = _released_mu(d, d_prime, DRAWS)
    assert abs(mu - 2 * CLIP / d.sigma) <= Z * se  # the charged event's μ = Δ/σ, Δ = 2c
    assert abs(mu - d.event.mu) <= Z * se
    assert abs(mu - CLIP / d.sigma) > Z * se  # sensitivity c under-counts the loss
    if calibration == "analytic":  # the release is exactly (ε, δ)-DP, no more
        assert abs(mu - gaussian_mu(epsilon, delta)) <= Z * se


@pytest.mark.statistical
@pytest.mark.parametrize(("calibration", "epsilon", "delta"), CASES)
def test_planted_bug_sensitivity_c_is_caught(
    pair: tuple[KnowledgeBase, KnowledgeBase], calibration: str, epsilon: float, delta: float
) -> None:
    bug, bug_prime = _worst_case_pair(
        pair, _PaperAccounting, epsilon=epsilon, delta=delta, calibration=calibration
    )
    assert bug.event == GaussianEvent(bug.sigma, CLIP)  # what the old code charged
    mu, se = _released_mu(bug, bug_prime, DRAWS)
    assert abs(mu - bug.event.mu) > Z * se  # the claim c/σ is refuted...
    assert abs(mu - 2 * bug.event.mu) <= Z * se  # ...the release leaks twice that μ

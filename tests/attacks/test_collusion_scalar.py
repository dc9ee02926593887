"""The adversaries against the scalar mechanism M*, the sweep against eq. (3.11) and the gates
(M* on its own: tests/dp/test_dp_scalar.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from tests._load import slowdown

from ragprivacy.attacks.collusion import (
    DiversifiedSplit,
    PooledMeanAttack,
    auc_with_se,
    bayes_llr,
    bayes_llr_samples,
)
from ragprivacy.dp import ScalarMechanism
from ragprivacy.errors import ConfigError
from ragprivacy.eval.experiments.collusion import SweepCell, gates, scalar_sweep


def test_auc_and_delong_against_brute_force() -> None:
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(0.3, 1, 300), 1)  # ties on purpose
    y = np.round(rng.normal(0.0, 1, 200), 1)
    diff = x[:, None] - y[None, :]
    psi = (diff > 0) + 0.5 * (diff == 0)
    auc, se = auc_with_se(x, y)
    assert auc == pytest.approx(psi.mean(), abs=1e-12)
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    expected = np.sqrt(v10.var(ddof=1) / x.size + v01.var(ddof=1) / y.size)
    assert se == pytest.approx(expected, rel=1e-10)


def test_pooled_mean_shortcut_matches_per_query_answers() -> None:
    mech = ScalarMechanism(epsilon_acc=4.0, n=50)
    answers = mech.release(member=True, size=(4000, 3 * 50), rng=1)
    direct = PooledMeanAttack.statistic(answers)
    shortcut = PooledMeanAttack(mech).simulate(member=True, k=3, trials=4000, rng=2)
    # Same distribution: N(Δ, σ²/(kn)).
    sd = mech.sigma / np.sqrt(150)
    for s in (direct, shortcut):
        assert abs(s.mean() - 1.0) < 5 * sd / np.sqrt(4000)
        assert s.std() == pytest.approx(sd, rel=0.05)


def test_bayes_llr_is_monotone_in_the_pooled_mean() -> None:
    mech = ScalarMechanism(epsilon_acc=2.0, n=20)
    answers = mech.release(member=False, size=(50, 40), rng=3)
    full = bayes_llr_samples(answers, mechanism=mech)
    fast = bayes_llr(answers.mean(axis=1), mechanism=mech, queries=40)
    np.testing.assert_allclose(full, fast, rtol=1e-9, atol=1e-9)


def test_split_predictions() -> None:
    mech = ScalarMechanism(epsilon_acc=4.0)
    split = DiversifiedSplit(mechanism=mech, rho=0.5)
    assert split.target_accounts(20) == 10
    assert split.predicted_auc(20) == pytest.approx(mech.predicted_auc(10))
    assert DiversifiedSplit(mechanism=mech, rho=0.5, pool="all").predicted_auc(20) < (
        split.predicted_auc(20)
    )
    with pytest.raises(ConfigError):
        DiversifiedSplit(mechanism=mech, rho=0.0)


@pytest.mark.statistical
def test_fifteen_cell_sweep_matches_eq_3_11_in_seconds() -> None:
    # Under a correct model a cell leaves 2 SE with probability ~5 %; >= 14 of 15 holds
    # with probability 0.83 per seed, so a fixed seed is used (seed 3: 15 of 15).
    start = time.perf_counter()
    res = scalar_sweep(seed=3)
    assert time.perf_counter() - start < 10 * slowdown()
    assert len(res.cells) == 15
    verdicts = {g.name: g for g in res.gates}
    assert verdicts["P3"].passed and verdicts["P3"].details["within_2se"] >= 14
    assert verdicts["P1"].passed
    row4 = sorted((c for c in res.cells if c.eps_acc == 4.0), key=lambda c: c.k)
    assert row4[-1].auc > row4[0].auc + 0.08  # rises ~4.5x in advantage from k=1 to 20
    d = res.to_dict()
    assert {"k", "eps_acc", "auc", "se", "predicted", "z"} <= set(d["cells"][0])


@pytest.mark.statistical
def test_alternative_adversaries_do_not_beat_the_baseline() -> None:
    base = scalar_sweep(eps=(4.0,), ks=(20,), trials=5000, seed=1).cells[0]
    llr = scalar_sweep(eps=(4.0,), ks=(20,), trials=5000, seed=1, adversary="bayes-llr").cells[0]
    assert llr.auc == pytest.approx(base.auc, abs=1e-12)  # same draws, monotone map
    split = scalar_sweep(eps=(4.0,), ks=(20,), trials=5000, seed=1, adversary="split", rho=0.25)
    assert split.cells[0].auc < base.auc


def test_gates_can_fail() -> None:
    def cells(shift: float, slope_factor: float = 1.0) -> list[SweepCell]:
        out = []
        for e in (1.0, 2.0, 4.0):
            mech = ScalarMechanism(epsilon_acc=e)
            for k in (1, 2, 5, 10, 20):
                p = mech.predicted_auc(k)
                auc = 0.5 + (p - 0.5) * slope_factor + shift
                out.append(SweepCell(k, e, auc, 0.004, p, (auc - p) / 0.004, 10_000))
        return out

    assert all(g.passed for g in gates(cells(0.0)))
    shifted = {g.name: g.passed for g in gates(cells(0.02))}
    assert not shifted["P3"]
    flat = {g.name: g.passed for g in gates(cells(0.0, slope_factor=0.0))}
    assert not flat["P1"] and not flat["P3"]

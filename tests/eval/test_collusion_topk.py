"""The probe attack through the multi-tenant service's noisy top-K."""

from __future__ import annotations

import numpy as np
import pytest

from ragprivacy.attacks.collusion import auc_with_se
from ragprivacy.eval.experiments.collusion import topk_sweep
from ragprivacy.eval.experiments.collusion_topk import TopKHarness


@pytest.mark.statistical
def test_service_path_agrees_with_the_exact_hit_probability() -> None:
    h = TopKHarness(epsilon_acc=16.0, n=40)
    p_in, p_out = h.hit_probabilities()
    assert p_in > p_out
    res = h.run(k=3, trials=150, mode="service", instrumented=True, rng=5)
    m = 3 * 40 * 150
    for hits, p in ((res.hits_member, p_in), (res.hits_nonmember, p_out)):
        assert hits.sum() / m == pytest.approx(p, abs=4 * np.sqrt(p * (1 - p) / m))
    assert res.score_member is not None and res.score_member.mean() > res.score_nonmember.mean()


@pytest.mark.statistical
def test_topk_curve_rises_with_sqrt_k() -> None:
    res = topk_sweep(eps=(16.0,), trials=2000, seed=0)
    aucs = [c.auc for c in sorted(res.cells, key=lambda c: c.k)]
    assert aucs[-1] - 0.5 > 2.5 * (aucs[0] - 0.5)
    assert all(g.passed for g in res.gates)
    assert 0.56 < aucs[0] < 0.64 and 0.76 < aucs[-1] < 0.86  # paper: 0.598 -> 0.814
    # top-K is post-processing of the score release: below the scalar prediction
    assert all(c.auc < c.predicted + 3 * c.se for c in res.cells)


def test_external_regimes() -> None:
    same = TopKHarness(epsilon_acc=16.0).hit_probabilities()
    m4 = TopKHarness(epsilon_acc=16.0, regime="external-m4").hit_probabilities()
    assert m4 == pytest.approx(same)  # under M4 the regimes coincide (Table 1)
    ext = TopKHarness(epsilon_acc=16.0, regime="external", n=20)
    res = ext.run(k=2, trials=30, mode="service", rng=1)
    assert res.hits_member.sum() == res.hits_nonmember.sum() == 0  # no same-index access
    auc, _ = auc_with_se(res.hits_member, res.hits_nonmember)
    assert auc == 0.5

"""The scalar mechanism M* (collusion paper eq. 3.3-3.4) on its own."""

from __future__ import annotations

import numpy as np
import pytest

from ragprivacy.dp import ScalarMechanism, collusion_sigma, predicted_auc_closed
from ragprivacy.errors import ConfigError


def test_predictions_pinned_to_the_paper() -> None:
    mech = ScalarMechanism(epsilon_acc=4.0)
    assert [round(mech.predicted_auc(k), 3) for k in (1, 20)] == [0.531, 0.638]
    assert mech.predicted_auc(5) == pytest.approx(predicted_auc_closed(4.0, 1e-6, 10_000, 5))
    assert mech.predicted_auc(5, queries_per_account=mech.n) == mech.predicted_auc(5)
    assert mech.sigma == collusion_sigma(4.0, 1e-6, 10_000, 1.0)


def test_pooled_means_are_the_mean_of_the_answers() -> None:
    mech = ScalarMechanism(epsilon_acc=4.0, n=50)
    direct = mech.release(member=True, size=(4000, 150), rng=1).mean(axis=1)
    shortcut = mech.pooled_means(member=True, queries=150, trials=4000, rng=2)
    sd = mech.sigma / np.sqrt(150)  # both N(delta, sigma^2 / queries)
    for s in (direct, shortcut):
        assert abs(s.mean() - mech.mean(True)) < 5 * sd / np.sqrt(4000)
        assert s.std() == pytest.approx(sd, rel=0.05)
    assert mech.mean(False) == 0.0


def test_the_gap_stays_within_the_sensitivity() -> None:
    with pytest.raises(ConfigError):
        ScalarMechanism(epsilon_acc=1.0, delta_gap=1.5)
    with pytest.raises(ConfigError):
        ScalarMechanism(epsilon_acc=0.0)

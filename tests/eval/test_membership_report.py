"""The membership report states its sample and prints only figures that sample resolves."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ragprivacy.eval.experiments._membership_report import membership_report
from ragprivacy.eval.metrics import membership_metrics


def test_the_membership_report_gives_intervals_and_only_resolvable_tprs(tmp_path) -> None:
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(100), np.zeros(100)].astype(int)
    separated = np.r_[rng.normal(5, 1, 100) + 10, rng.normal(0, 1, 100)]
    noisy = rng.normal(y * 0.8, 1.0)

    def cell(system: str, scores: np.ndarray) -> dict:
        metrics = membership_metrics(scores, y).to_dict()
        metrics |= {"retrieval_recall": 1.0, "queries_per_target": 1.0}
        return {
            "cell": {"system": system, "attack": "rag-mia", "defense": "none"},
            "result": {"metrics": metrics, "roc": {"fpr": [0, 1], "tpr": [0, 1]}},
        }

    options = SimpleNamespace(
        member_fraction=0.5, targets=200, calibration=0, criterion="accuracy", accounting_delta=1e-6
    )
    exp = SimpleNamespace(options=options, corpus_name="c", index=0)
    text = membership_report(exp, [cell("sep", separated), cell("rag", noisy)], tmp_path).markdown
    assert "100 members / 100 non-members" in text
    assert "±" not in text  # no "1.000 ± 0.000"
    rows = {line.split(" | ")[0]: line.split(" | ") for line in text.splitlines()}
    sep, rag = rows["| sep"], rows["| rag"]
    assert sep[3] == f"1.000 ({0.025 ** (1 / 100):.3f}–1.000)†"  # exact interval, contains 1
    assert rag[3].startswith(f"{membership_metrics(noisy, y).auc:.3f} (") and "†" not in rag[3]
    assert sep[4].startswith("1.000 (") and rag[4].count("–") == 1  # accuracy intervals
    # 100 non-members resolve FPR 1 % but not 0.1 %
    assert sep[6] == "1.000" and sep[7] == rag[7] == "n/a (needs ≥ 1000 non-members)"

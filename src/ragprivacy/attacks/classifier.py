"""Membership classifiers fitted on shadow data, chosen by cross-validation.

S-RAG (Section 4.2.3) trains its audit model with AutoGluon, which searches model
families and hyper-parameters automatically; S²MIA uses XGBoost. Neither is a
dependency here: :func:`fit_classifier` picks among a few scikit-learn models
(logistic regression, random forest, gradient boosting, k-nearest neighbours)
by stratified k-fold ROC AUC and refits the best on all the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ragprivacy.errors import ConfigError, DataError

__all__ = ["CLASSIFIERS", "fit_classifier", "shadow_features"]

CLASSIFIERS = ("gradient-boosting", "knn", "logistic", "random-forest")


def _make(name: str, seed: int) -> Any:
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if name == "logistic":
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    if name == "random-forest":
        return RandomForestClassifier(n_estimators=100, min_samples_leaf=2, random_state=seed)
    if name == "gradient-boosting":
        return GradientBoostingClassifier(n_estimators=100, max_depth=3, random_state=seed)
    if name == "knn":
        return make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=15))
    raise ConfigError(f"Unknown classifier {name!r}; choose one of: {', '.join(CLASSIFIERS)}.")


def fit_classifier(
    x: Any, y: Any, *, candidates: Sequence[str] = CLASSIFIERS, folds: int = 5, seed: int = 0
) -> tuple[Any, str]:
    """The candidate with the best cross-validated ROC AUC, refitted on all of ``x, y``;
    returns ``(model, name)``.

    >>> import numpy as np
    >>> x = np.r_[np.zeros((20, 1)), np.ones((20, 1))]; y = np.r_[np.zeros(20), np.ones(20)]
    >>> model, name = fit_classifier(x, y, candidates=("logistic",))
    >>> name, int(model.predict([[1.0]])[0])
    ('logistic', 1)
    """
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    if not candidates:
        raise ConfigError(f"Give at least one classifier; choose from: {', '.join(CLASSIFIERS)}.")
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y).astype(int)
    counts = np.bincount(ya, minlength=2)
    if counts.min() < 2:
        raise DataError(
            f"A membership classifier needs at least 2 members and 2 non-members; got "
            f"{counts[1]} and {counts[0]}."
        )
    k = int(min(folds, counts.min()))
    cv = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    best: tuple[float, str] | None = None
    for name in candidates:
        score = float(np.mean(cross_val_score(_make(name, seed), xa, ya, cv=cv, scoring="roc_auc")))
        if best is None or score > best[0] + 1e-12:
            best = (score, name)
    name = best[1] if best is not None else candidates[0]
    return _make(name, seed).fit(xa, ya), name


def shadow_features(
    attack: Any, shadow: Any, *, batch_size: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """Run ``attack.queries`` for the shadow's members (label 1) and non-members (0)
    against the shadow system and return ``attack.features`` of each as ``(x, y)``."""
    from ragprivacy.attacks.base import BlackBox

    view = BlackBox(shadow.system)
    docs = list(shadow.members) + list(shadow.non_members)
    labels = [1] * len(shadow.members) + [0] * len(shadow.non_members)
    rows: list[list[float]] = []
    for start in range(0, len(docs), batch_size):
        chunk = docs[start : start + batch_size]
        plans = [attack.queries(d) for d in chunk]
        responses = view.answer_batch([q for p in plans for q in p])
        pos = 0
        for d, p in zip(chunk, plans):
            rows.append(list(attack.features(d, responses[pos : pos + len(p)])))
            pos += len(p)
    return np.asarray(rows, dtype=np.float64), np.asarray(labels, dtype=int)

"""The interpolated Kneser–Ney background model: normalisation, hand-computed values, a
brute-force cross-check, storage and speed."""

from __future__ import annotations

import time
from collections import Counter
from fractions import Fraction
from itertools import product

import numpy as np
import pytest
from tests._load import slowdown

from ragprivacy.errors import ConfigError, DataError
from ragprivacy.generate import BackgroundModel, build_background, default_background, tokenize
from ragprivacy.generate.background import BOS, BOS_ID, EOS, UNK


def test_hand_computed_bigram_values() -> None:
    # Docs "the cat sat", "the dog sat"; order 2, D = 1/2. Bigram types: <s> the, the cat,
    # cat sat, sat </s>, the dog, dog sat → continuation counts the 1, cat 1, dog 1, sat 2,
    # </s> 1 (C1 = 6, T1 = 5); |V| = 6 predictable symbols (<unk>, </s>, 4 words).
    bg = BackgroundModel.from_texts(["the cat sat", "the dog sat"], order=2, discount=0.5)
    p1 = {w: Fraction(1, 2) / 6 + Fraction(1, 2) * 5 / 6 / 6 for w in ("the", "cat", "dog")}
    p1["sat"] = Fraction(3, 2) / 6 + Fraction(5, 72)
    p1["unk"] = Fraction(5, 72)
    # Start of text: c(<s> the) = 2, C = 2, T = 1.
    assert bg.prob("the") == pytest.approx(float(Fraction(3, 4) + Fraction(1, 4) * p1["the"]))
    assert bg.prob("cat") == pytest.approx(float(Fraction(1, 4) * p1["cat"]))
    # After "cat": c(cat sat) = 1, C = 1, T = 1.
    assert bg.prob("sat", ["cat"]) == pytest.approx(float(Fraction(1, 2) + p1["sat"] / 2))
    # After "the": c(the cat) = c(the dog) = 1, C = 2, T = 2.
    assert bg.prob("dog", ["the"]) == pytest.approx(float(Fraction(1, 4) + p1["dog"] / 2))
    # An unseen history backs off to P1; an unseen word gets the <unk> mass; case is ignored.
    assert bg.prob("sat", ["zebra"]) == pytest.approx(float(p1["sat"]))
    assert bg.prob("zebra", ["zebra"]) == pytest.approx(float(p1["unk"]))
    assert bg.prob("SAT", ["Cat"]) == bg.prob("sat", ["cat"])
    assert bg.prob(BOS) == 0.0


def _reference_kn(docs: list[list[str]], order: int, d: float):
    """A plain dictionary implementation of interpolated Kneser–Ney (the docstring's
    formulas), independent of the vectorised one."""
    vocab = sorted({t for doc in docs for t in doc} | {EOS})
    n_pred = len(vocab) + 1  # + <unk>
    grams: Counter[tuple[str, ...]] = Counter()
    for doc in docs:
        seq = [BOS] * (order - 1) + doc + [EOS]
        for i in range(order - 1, len(seq)):
            grams[tuple(seq[i - order + 1 : i + 1])] += 1
    counts = {order: grams}
    for k in range(order - 1, 0, -1):
        cont: Counter[tuple[str, ...]] = Counter()
        for g in counts[k + 1]:
            cont[g[1:]] += 1
        counts[k] = cont

    def prob(w: str, hist: tuple[str, ...], k: int) -> float:
        if k == 1:
            total = sum(counts[1].values())
            return max(counts[1].get((w,), 0) - d, 0) / total + d * len(counts[1]) / total / n_pred
        h = hist[len(hist) - (k - 1) :]
        follow = {g: c for g, c in counts[k].items() if g[:-1] == h}
        lower = prob(w, hist, k - 1)
        if not follow:
            return lower
        total = sum(follow.values())
        return max(follow.get((*h, w), 0) - d, 0) / total + d * len(follow) / total * lower

    return vocab, prob


@pytest.mark.parametrize("order", [1, 2, 3])
def test_matches_a_brute_force_implementation(order: int) -> None:
    rng = np.random.default_rng(order)
    words = ["a", "b", "c", "d", "e"]
    docs = [list(rng.choice(words, size=rng.integers(1, 9))) for _ in range(12)]
    bg = BackgroundModel.fit(docs, order=order, discount=0.6)
    vocab, ref = _reference_kn(docs, order, 0.6)
    histories = [(), *[(x,) for x in words], *product(words, repeat=2)]
    for hist in histories:
        h = tuple(hist)[-(order - 1) :] if order > 1 else ()
        h = (BOS,) * (order - 1 - len(h)) + h
        dense = bg.distribution(list(hist))
        for w in vocab:
            assert bg.prob(w, list(hist)) == pytest.approx(ref(w, h, order), rel=1e-12), (hist, w)
        assert dense.sum() == pytest.approx(1.0, abs=1e-12)
        assert dense[BOS_ID] == 0.0
        assert bg.prob("zzz", list(hist)) == pytest.approx(dense[bg.vocab.index(UNK)])


def test_dense_and_scalar_queries_agree_and_sum_to_one() -> None:
    texts = ["The weather was mild.", "The train leaves every hour.", "Mild weather, mild day."]
    bg = BackgroundModel.from_texts(texts)
    for hist in ([], ["the"], ["The", "weather"], ["mild", "."], ["unseen", "words"]):
        p = bg.distribution(hist)
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
        assert (p[np.arange(len(p)) != BOS_ID] > 0).all()
        ctx = bg.context_ids(hist)
        assert [bg.prob_id(i, ctx) for i in range(len(bg))] == pytest.approx(p.tolist(), rel=1e-12)
        with pytest.raises(ValueError):
            p[0] = 1.0  # cached vectors are read-only


def test_estimated_discounts_follow_ney() -> None:
    docs = [["a", "b"], ["a", "b"], ["a", "c"], ["d", "e"]]
    bg = BackgroundModel.fit(docs, order=2)
    # Bigram counts: <s>a 3, ab 2, ac 1, b</s> 2, c</s> 1, <s>d 1, de 1, e</s> 1 → n1 = 5, n2 = 2.
    assert bg.discounts[1] == pytest.approx(5 / (5 + 2 * 2))


def test_surface_form_is_the_most_frequent() -> None:
    bg = BackgroundModel.from_texts(["Velmora is big. Velmora is old. velmora"], order=2)
    assert bg.surfaces[bg.lookup("VELMORA")] == "Velmora"


def test_save_load_round_trip_and_digest(tmp_path) -> None:
    bg = build_background(["one two three", "two three four", "three four five"])
    path = tmp_path / "bg.npz"
    bg.save(path)
    back = BackgroundModel.load(path)
    assert back.state_digest() == bg.state_digest()
    assert (
        back.distribution(["two", "three"]).tolist() == bg.distribution(["two", "three"]).tolist()
    )
    other = build_background(["one two three", "two three four"])
    assert other.state_digest() != bg.state_digest()
    with pytest.raises(DataError, match=r"BackgroundModel\.save"):
        BackgroundModel.load(tmp_path / "missing.npz")


def test_invalid_inputs_are_refused() -> None:
    with pytest.raises(ConfigError, match="order"):
        BackgroundModel.fit([["a"]], order=4)
    with pytest.raises(ConfigError, match="from_texts"):
        BackgroundModel.fit(["a raw text"])
    with pytest.raises(ConfigError, match="discount"):
        BackgroundModel.fit([["a"]], discount=1.5)
    with pytest.raises(DataError):
        BackgroundModel.fit([])


def test_default_background_is_built_in_and_cached() -> None:
    a, b = default_background(), default_background()
    assert a is b
    assert len(a) > 100


def test_fit_on_two_thousand_documents_is_fast() -> None:
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(5000)] + ["the", "a", ".", ","] * 200
    docs = [list(rng.choice(words, size=200)) for _ in range(2000)]
    start = time.perf_counter()
    bg = BackgroundModel.fit(docs)
    elapsed = time.perf_counter() - start
    assert elapsed < 6.0 * slowdown()  # ~0.5 s measured on 2 shared cores; the target is < 2 s
    start = time.perf_counter()
    for d in docs[:50]:
        bg.distribution(d[:2])
        bg.prob(d[2], d[:2])
    assert time.perf_counter() - start < 1.0 * slowdown()
    assert len(tokenize("the a .")) == 3

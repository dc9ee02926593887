"""The lazy retriever skips its candidate search when its recent selections fell back.

``FallbackMemory``'s rule (window, threshold, probes, recovery), and the lazy
``NoisyTopKRetriever`` with it: at a σ where every lazy selection falls back it stops
searching for candidates after one window, still probes, and its top-2 output stays
distributed as the full noise-then-select's (two-sample χ², α = 1e-4, fixed seeds).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from ragprivacy.corpus import Corpus
from ragprivacy.embed import HashingEmbedder
from ragprivacy.errors import ConfigError
from ragprivacy.index import create_index
from ragprivacy.retrieval import FallbackMemory, KnowledgeBase, NoisyTopKRetriever
from ragprivacy.types import Document


def _run(memory: FallbackMemory, outcomes: list[bool]) -> list[bool]:
    """Feed outcomes to the lazy selections the memory lets through; which queries searched."""
    searched, it = [], iter(outcomes)
    for _ in range(len(outcomes)):
        s = memory.search_first()
        searched.append(s)
        if s:
            memory.record(next(it))
    return searched


def test_memory_searches_until_its_window_is_full() -> None:
    m = FallbackMemory(window=4, skip_at=0.75, probe_every=3)
    assert _run(m, [True] * 3) == [True] * 3  # window not full yet
    assert m.search_first()  # the 4th lazy selection still searches
    m.record(True)
    assert m.fallback_rate == 1.0
    # Full window of fallbacks: skip, skip, probe, skip, skip, probe, ...
    assert [m.search_first() for _ in range(2)] == [False, False]
    assert m.search_first()


def test_memory_keeps_searching_when_few_fall_back() -> None:
    m = FallbackMemory(window=4, skip_at=0.75, probe_every=3)
    for fell in [True, False, True, False, True, False]:
        assert m.search_first()
        m.record(fell)
    assert m.fallback_rate == 0.5  # only the last 4 are remembered
    assert all(m.search_first() for _ in range(10))


def test_memory_recovers_when_probes_stop_falling_back() -> None:
    m = FallbackMemory(window=4, skip_at=0.75, probe_every=2)
    for _ in range(4):
        m.search_first()
        m.record(True)
    decisions = []
    for _ in range(8):
        s = m.search_first()
        decisions.append(s)
        if s:
            m.record(False)  # the queries changed: the probe did not fall back
    # skip, probe (rate 3/4: still skipping), skip, probe (rate 1/2): searching again
    assert decisions[:4] == [False, True, False, True]
    assert all(decisions[4:])


def test_memory_checks_its_settings() -> None:
    with pytest.raises(ConfigError, match="window"):
        FallbackMemory(window=0)
    with pytest.raises(ConfigError, match="skip_at"):
        FallbackMemory(skip_at=1.5)


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    rng = np.random.default_rng(5)
    n, dim = 300, 32
    x = rng.standard_normal((n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = [f"d{i}" for i in range(n)]
    index = create_index("exact", dim=dim)
    index.add(x, ids)
    return KnowledgeBase(Corpus([Document(i, "x") for i in ids]), HashingEmbedder(dim=dim), index)


def _top2(r: NoisyTopKRetriever, draws: int) -> list[tuple[int, ...]]:
    return [ret.indices for ret in r.retrieve_batch(["one query"] * draws, account="a")]


@pytest.mark.statistical
def test_lazy_retriever_skips_the_search_and_keeps_the_law(kb: KnowledgeBase) -> None:
    common = dict(k=2, sigma=0.05, simulation=True, queries_per_account=10**6)
    lazy = NoisyTopKRetriever(kb, **common, lazy=True, candidates=8, rng=1)  # type: ignore[arg-type]
    full = NoisyTopKRetriever(kb, **common, noise_first=False, rng=2)  # type: ignore[arg-type]
    searches = []
    search = kb.index.search

    def counting(*args, **kw):  # type: ignore[no-untyped-def]
        searches.append(1)
        return search(*args, **kw)

    kb.index.search = counting  # type: ignore[method-assign]
    try:
        got = _top2(lazy, 4000)
    finally:
        kb.index.search = search  # type: ignore[method-assign]
    # The bounds (u = 1) are loose at σ = 0.05: every lazy selection falls back, so after
    # one window of 16 only every 8th query (a probe) searches for candidates.
    assert lazy.fallbacks.fallback_rate == 1.0
    assert len(searches) == 16 + (4000 - 16) // 8
    assert lazy.fallbacks.skipped == 4000 - len(searches)
    want = _top2(full, 4000)
    a, b = Counter(got), Counter(want)
    keys = [k for k in sorted(set(a) | set(b)) if a[k] + b[k] >= 20]
    rest = [4000 - sum(a[k] for k in keys), 4000 - sum(b[k] for k in keys)]
    table = np.array([[a[k], b[k]] for k in keys] + ([rest] if sum(rest) else []))
    assert len(keys) >= 5  # the noise really moves the top 2
    assert float(chi2_contingency(table)[1]) > 1e-4

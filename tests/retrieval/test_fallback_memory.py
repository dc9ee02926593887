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


# ------------------------------------------------------------------ one memory per account
def test_memory_is_one_per_account_and_none_is_an_account() -> None:
    m = FallbackMemory(window=4, skip_at=0.75, probe_every=3)
    for _ in range(4):
        assert m.search_first(account="a")
        m.record(True, account="a")
    assert not m.search_first(account="a")  # a's window is full of fallbacks: a skips
    # nobody else's choice reads a's outcomes: None and "anonymous" are accounts too
    for other in ("b", None, "anonymous"):
        assert _run_account(m, other, [True] * 4) == [True] * 4
        assert m.fallback_rate_of(other) == 1.0
    assert m.fallback_rate_of("a") == 1.0 and m.fallback_rate_of("never") == 0.0
    assert len(m) == 4 and None in m and "never" not in m
    assert m.skipped == 1


def _run_account(memory: FallbackMemory, account: str | None, outcomes: list[bool]) -> list[bool]:
    searched, it = [], iter(outcomes)
    for _ in range(len(outcomes)):
        s = memory.search_first(account=account)
        searched.append(s)
        if s:
            memory.record(next(it), account=account)
    return searched


def test_memory_keeps_the_most_recently_active_accounts_only() -> None:
    m = FallbackMemory(window=2, skip_at=0.5, probe_every=10**6, max_accounts=8)
    for _ in range(2):
        m.search_first(account="steady")
        m.record(True, account="steady")
    for i in range(1000):
        m.search_first(account=f"acct-{i}")
        m.record(i % 2 == 0, account=f"acct-{i}")
        if i % 5 == 0:  # "steady" queries now and then: it stays among the recent ones
            assert not m.search_first(account="steady")
        assert len(m) <= 8
    assert len(m) == 8 and "steady" in m and "acct-999" in m and "acct-0" not in m
    # a forgotten account starts again with an empty window: it searches first
    assert m.fallback_rate_of("acct-0") == 0.0
    assert m.search_first(account="acct-0")
    with pytest.raises(ConfigError, match="max_accounts"):
        FallbackMemory(max_accounts=0)


def _counting_search(kb: KnowledgeBase, calls: list[int]):  # type: ignore[no-untyped-def]
    search = kb.index.search

    def counting(*args, **kw):  # type: ignore[no-untyped-def]
        calls.append(1)
        return search(*args, **kw)

    return search, counting


def test_one_accounts_fallbacks_do_not_choose_another_accounts_path(kb: KnowledgeBase) -> None:
    """Account A's selections fall back (σ small against the loose bound u = 1) until A
    skips its candidate search; account B's first queries still run the lazy path (the
    candidate search) — B's path depends on B's outcomes only — and so does the
    anonymous account's (``None``)."""
    lazy = NoisyTopKRetriever(
        kb,
        k=2,
        sigma=0.05,
        simulation=True,
        queries_per_account=10**6,
        lazy=True,
        candidates=8,
        rng=3,
    )
    calls: list[int] = []
    search, counting = _counting_search(kb, calls)
    kb.index.search = counting  # type: ignore[method-assign]
    try:
        searched = {}
        for account, n in (("A", 64), ("B", 16), (None, 16), ("A", 8), ("B", 8)):
            before = len(calls)
            for _ in range(n):
                lazy.retrieve("one query", account=account)
            searched[account, n] = len(calls) - before
    finally:
        kb.index.search = search  # type: ignore[method-assign]
    # A: one window of 16 lazy selections, then only the probes (every 8th) search
    assert searched["A", 64] == 16 + (64 - 16) // 8
    # B and None: every one of their first 16 queries searches, whatever A's memory says
    assert searched["B", 16] == 16
    assert searched[None, 16] == 16
    # each account's own window of fallbacks now makes it skip (probes aside)
    assert searched["A", 8] == 1 and searched["B", 8] == 1
    assert all(lazy.fallbacks.fallback_rate_of(a) == 1.0 for a in ("A", "B", None))
    assert len(lazy.fallbacks) == 3


def test_the_retrievers_memories_stay_bounded(kb: KnowledgeBase) -> None:
    lazy = NoisyTopKRetriever(
        kb,
        k=2,
        sigma=0.05,
        simulation=True,
        queries_per_account=10**6,
        lazy=True,
        candidates=8,
        rng=4,
    )
    assert lazy.fallbacks.max_accounts == 4096
    lazy.fallbacks = FallbackMemory(max_accounts=5)
    for i in range(40):
        lazy.retrieve("one query", account=f"user-{i}")
        assert len(lazy.fallbacks) <= 5
    assert len(lazy.fallbacks) == 5 and "user-39" in lazy.fallbacks

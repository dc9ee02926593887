"""Per-document filters and budget stores: atomic, durable, concurrent-safe, never overspent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragprivacy.dp import (
    BudgetStore,
    DocumentBudgetExhaustedError,
    GaussianEvent,
    LaplaceEvent,
    MemoryBudgetStore,
    PureDpEvent,
    PureDpFilter,
    RenyiFilter,
    SqliteBudgetStore,
    exact_gaussian_epsilon,
)
from ragprivacy.dp.events import SelfComposedEvent
from ragprivacy.dp.filters import renyi_capacities
from ragprivacy.errors import BudgetExhaustedError, ConfigError

StoreFactory = Callable[[Path, object], BudgetStore]


def _memory(tmp: Path, cap: object) -> BudgetStore:
    return MemoryBudgetStore(cap)  # type: ignore[arg-type]


def _sqlite(tmp: Path, cap: object) -> BudgetStore:
    return SqliteBudgetStore(tmp / "budgets.db", cap)  # type: ignore[arg-type]


STORES = [pytest.param(_memory, id="memory"), pytest.param(_sqlite, id="sqlite")]


# ------------------------------------------------------------ contract suite (both stores)


@pytest.mark.parametrize("make", STORES)
def test_charge_is_all_or_nothing_and_names_exhausted(make: StoreFactory, tmp_path: Path) -> None:
    store = make(tmp_path, 1.0)
    store.charge(["a", "b"], 0.6)
    with pytest.raises(DocumentBudgetExhaustedError) as err:
        store.charge(["c", "a", "d", "b"], 0.5)
    assert err.value.exhausted == ("a", "b")
    assert "2 of 4 document(s)" in str(err.value) and "nothing was charged" in str(err.value)
    assert "'a'" not in str(err.value)  # ids are private: the attribute has them, not the text
    assert isinstance(err.value, BudgetExhaustedError)
    # nothing changed, c and d untouched
    np.testing.assert_allclose(store.spent(["a", "b", "c", "d"])[:, 0], [0.6, 0.6, 0, 0])
    assert store.active(["a", "b", "c"], 0.4) == ["a", "b", "c"]
    assert store.active(["a", "b", "c"], 0.5) == ["c"]


@pytest.mark.parametrize("make", STORES)
def test_release_gives_a_charge_back_once(make: StoreFactory, tmp_path: Path) -> None:
    store = make(tmp_path, [1.0, 2.0])
    store.charge(["a", "b"], [0.25, 0.5], charge_id="keep")
    failed = store.charge(["b", "c"], [0.5, 1.0])
    np.testing.assert_allclose(store.spent(["a", "b", "c"]), [[0.25, 0.5], [0.75, 1.5], [0.5, 1]])
    assert store.release(failed.charge_id)
    np.testing.assert_allclose(store.spent(["a", "b", "c"]), [[0.25, 0.5], [0.25, 0.5], [0, 0]])
    assert not store.release(failed.charge_id)  # at most once
    assert not store.release("never-made")
    np.testing.assert_allclose(store.spent(["a", "b", "c"]), [[0.25, 0.5], [0.25, 0.5], [0, 0]])
    # the released budget can be spent again; the id is free for a new request
    store.charge(["b"], [0.75, 1.5], charge_id=failed.charge_id)
    assert store.can_afford(["b"], [0.0, 0.0]).all() and not store.can_afford(["b"], 0.01).any()


@pytest.mark.parametrize("make", STORES)
def test_float_sums_reach_the_budget_exactly(make: StoreFactory, tmp_path: Path) -> None:
    """M charges of ε_q fit a budget of M·ε_q despite float round-off; the next does not."""
    store = make(tmp_path, 10 * 0.1)
    for _ in range(10):
        store.charge(["x"], 0.1)
    with pytest.raises(DocumentBudgetExhaustedError):
        store.charge(["x"], 0.1)
    assert store.spent(["x"])[0, 0] == pytest.approx(1.0)


@pytest.mark.parametrize("make", STORES)
def test_charge_id_is_idempotent(make: StoreFactory, tmp_path: Path) -> None:
    store = make(tmp_path, [1.0, 2.0])
    r1 = store.charge(["a"], [0.5, 0.5], charge_id="q-1")
    r2 = store.charge(["a"], [0.5, 0.5], charge_id="q-1")
    assert r2.replayed and not r1.replayed and r2.doc_ids == ("a",)
    np.testing.assert_allclose(store.spent(["a"]), [[0.5, 0.5]])
    with pytest.raises(DocumentBudgetExhaustedError):
        store.charge(["a"], [0.6, 0.0])


@pytest.mark.parametrize("make", STORES)
def test_reused_charge_id_for_a_different_request_is_refused(
    make: StoreFactory, tmp_path: Path
) -> None:
    """A reused id with other documents or another amount must not skip the charge."""
    store = make(tmp_path, 1.0)
    store.charge(["a", "b"], 0.5, charge_id="q1")
    # the same request (documents in any order) replays
    assert store.charge(["b", "a"], 0.5, charge_id="q1").replayed
    with pytest.raises(ConfigError, match="already used for a different charge"):
        store.charge(["c", "d"], 0.9, charge_id="q1")
    with pytest.raises(ConfigError, match="already used"):
        store.charge(["a", "b"], 0.25, charge_id="q1")
    with pytest.raises(ConfigError, match="already used"):
        store.charge(["a"], 0.5, charge_id="q1")
    np.testing.assert_allclose(store.spent(["a", "b", "c", "d"]).ravel(), [0.5, 0.5, 0, 0])


def test_sqlite_lock_timeout_is_a_backend_error(tmp_path: Path) -> None:
    """Another writer holding the lock past the timeout is not an exhausted budget."""
    import sqlite3

    from ragprivacy.errors import BackendError

    store = SqliteBudgetStore(tmp_path / "b.db", 1.0, timeout=0.2)
    holder = sqlite3.connect(tmp_path / "b.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(BackendError, match="Could not lock") as err:
            store.charge(["a"], 0.5, charge_id="c")
        assert not isinstance(err.value, BudgetExhaustedError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.charge(["a"], 0.5, charge_id="c").charge_id == "c"  # the retry lands
    np.testing.assert_allclose(store.spent(["a"]), [[0.5]])


@pytest.mark.parametrize("make", STORES)
def test_invalid_requests(make: StoreFactory, tmp_path: Path) -> None:
    store = make(tmp_path, [1.0, 1.0])
    with pytest.raises(ConfigError, match="more than once"):
        store.charge(["a", "a"], 0.1)
    with pytest.raises(ConfigError, match="finite non-negative"):
        store.charge(["a"], [-0.1, 0.0])
    with pytest.raises(ConfigError, match="finite non-negative"):
        store.charge(["a"], [0.1, 0.1, 0.1])
    with pytest.raises(ConfigError):
        store.charge([""], 0.1)
    assert store.can_afford([], 0.1).size == 0


@pytest.mark.parametrize("make", STORES)
def test_threads_never_overspend(make: StoreFactory, tmp_path: Path) -> None:
    store = make(tmp_path, 5.0)
    docs = [f"d{i}" for i in range(6)]
    ok_counts = [0] * 8

    def worker(w: int) -> None:
        rng = np.random.default_rng(w)
        for _ in range(40):
            pick = list(rng.choice(docs, size=3, replace=False))
            try:
                store.charge(pick, 1.0)
                ok_counts[w] += 1
            except DocumentBudgetExhaustedError:
                pass

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spent = store.spent(docs)[:, 0]
    assert (spent <= 5.0 + 1e-9).all()
    assert spent.sum() == pytest.approx(3 * sum(ok_counts))


@settings(max_examples=60, deadline=None)
@given(
    charges=st.lists(
        st.tuples(
            st.sets(st.sampled_from("abcdef"), min_size=1, max_size=4),
            st.floats(0.0, 0.7, allow_nan=False),
        ),
        max_size=30,
    )
)
def test_filters_never_overspend_property(charges: list[tuple[set[str], float]]) -> None:
    f = PureDpFilter(budget=1.5)
    ledger: dict[str, float] = {}
    for docs, eps in charges:
        ids = sorted(docs)
        active = f.active(ids, eps)
        try:
            f.charge(ids, eps)
        except DocumentBudgetExhaustedError as err:
            assert set(err.exhausted) == set(ids) - set(active)
            continue
        assert active == ids
        for d in ids:
            ledger[d] = ledger.get(d, 0.0) + eps
    ids = sorted(ledger)
    if ids:
        assert (f.spent(ids) <= 1.5 * (1 + 1e-9)).all()
        np.testing.assert_allclose(f.spent(ids), [ledger[d] for d in ids])


# ------------------------------------------------------------ filters


def test_murag_filter_follows_algorithm_1() -> None:
    """M retrievals at ε_q each, then the document leaves the active set."""
    f = PureDpFilter.for_murag(epsilon_q=0.5, max_retrievals=3)
    assert f.budget == 1.5
    for _ in range(3):
        assert f.active(["z", "y"], 0.5) == ["z", "y"]
        f.charge(["z"], 0.5)
    assert f.active(["z", "y"], 0.5) == ["y"]
    np.testing.assert_allclose(f.remaining(["z", "y"]), [0.0, 1.5])
    f.charge_event(["y"], LaplaceEvent(scale=2.0))  # ε = 0.5
    assert f.spent(["y"])[0] == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="RenyiFilter"):
        f.charge_event(["y"], GaussianEvent(1.0))
    with pytest.raises(ConfigError, match="capacity"):
        PureDpFilter(budget=2.0, store=MemoryBudgetStore(1.0))


def test_default_renyi_filter_admits_a_plausible_load() -> None:
    """for_target's default orders let σ = 8 Gaussian charges through (order 8 blocked all)."""
    f = RenyiFilter.for_target(2.0, 1e-6)
    ev = GaussianEvent(sigma=8.0)
    n = 0
    while f.active(["doc"], ev):
        f.charge(["doc"], ev)
        n += 1
    assert n >= 6
    assert float(f.epsilon(["doc"], 1e-6)[0]) <= 2.0
    assert all(b > 0.5 for b in f.budgets)
    # explicit orders with a useless budget are dropped (8: B = 0.026)
    assert RenyiFilter.for_target(2.0, 1e-6, orders=(8.0, 16.0, 32.0)).orders == [16.0, 32.0]
    # picking orders for the expected charge: large orders for large pure-DP charges
    pure = RenyiFilter.for_target(2.0, 1e-6, expected_event=PureDpEvent(0.5))
    assert min(pure.orders) > 64
    m = 0
    while pure.active(["doc"], PureDpEvent(0.5)):
        pure.charge(["doc"], PureDpEvent(0.5))
        m += 1
    assert m >= 3 and float(pure.epsilon(["doc"], 1e-6)[0]) <= 2.0
    with pytest.raises(ConfigError, match="keep_fraction"):
        RenyiFilter.for_target(2.0, 1e-6, keep_fraction=0.0)


def test_renyi_filter_gives_the_target_guarantee() -> None:
    f = RenyiFilter.for_target(2.0, 1e-6, orders=(16.0, 32.0))
    ev = GaussianEvent(sigma=8.0)
    n = 0
    while f.active(["doc"], ev):
        f.charge(["doc"], ev)
        n += 1
    assert n > 0
    with pytest.raises(DocumentBudgetExhaustedError):
        f.charge(["doc"], ev)
    eps = float(f.epsilon(["doc"], 1e-6)[0])
    assert eps <= 2.0
    # the guarantee is a true upper bound: the exact ε of n Gaussians is below it
    assert exact_gaussian_epsilon(SelfComposedEvent(ev, n), 1e-6) <= eps
    orders, caps = renyi_capacities(1.0, 1e-6, (1.5, 2.0, 20.0))
    assert orders == [20.0] and caps[0] == pytest.approx(1.0 - np.log(1e6) / 19)
    with pytest.raises(ConfigError, match="positive budget"):
        renyi_capacities(0.1, 1e-9, (2.0,))
    f.charge(["other"], PureDpEvent(0.5))  # pure events have a Rényi curve too


# ------------------------------------------------------------ SQLite durability


def test_sqlite_store_reopens_and_checks_capacity(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    s = SqliteBudgetStore(path, 2.0)
    s.charge(["a"], 1.5, charge_id="c1")
    s.close()
    again = SqliteBudgetStore(path)  # capacity read back
    assert again.capacity.tolist() == [2.0]
    assert again.spent(["a"])[0, 0] == 1.5
    assert [c.charge_id for c in again.charges()] == ["c1"]
    with pytest.raises(ConfigError, match="created with capacity"):
        SqliteBudgetStore(path, 3.0)
    with pytest.raises(ConfigError, match="pass a capacity"):
        SqliteBudgetStore(tmp_path / "new.db")


def test_sqlite_rolls_back_on_exception_before_commit(tmp_path: Path) -> None:
    s = SqliteBudgetStore(tmp_path / "b.db", 1.0)

    def boom() -> None:
        raise RuntimeError("crash before commit")

    s._before_commit = boom
    with pytest.raises(RuntimeError):
        s.charge(["a", "b"], 0.5)
    s._before_commit = None
    assert s.spent(["a", "b"]).sum() == 0
    assert s.charges() == []
    s.charge(["a"], 1.0)  # the lock was released


_WORKER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    import numpy as np
    from ragprivacy.dp import SqliteBudgetStore, DocumentBudgetExhaustedError
    path, seed, n, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    store = SqliteBudgetStore(path)
    if mode == "barrier":  # start charging together with the other workers
        open(f"{path}.ready{seed}", "w").close()
        while not os.path.exists(f"{path}.go"):
            time.sleep(0.005)
    if mode == "kill-in-commit":
        store._before_commit = lambda: os.kill(os.getpid(), signal.SIGKILL)
    rng = np.random.default_rng(seed)
    docs = [f"d{i}" for i in range(12)]
    ok = 0
    for i in range(n):
        pick = [str(d) for d in rng.choice(docs, size=4, replace=False)]
        try:
            store.charge(pick, 1.0, charge_id=f"w{seed}-{i}")
            ok += 1
        except DocumentBudgetExhaustedError:
            pass
    print(json.dumps({"ok": ok}))
    """
)


def _spawn(path: Path, seed: int, n: int, mode: str = "normal") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(path), str(seed), str(n), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )


def _check_consistent(store: SqliteBudgetStore, capacity: float) -> None:
    """Spent per document equals the sum of the committed charges, and never overspends."""
    docs = [f"d{i}" for i in range(12)]
    expected = dict.fromkeys(docs, 0.0)
    for c in store.charges():
        for d in c.doc_ids:
            expected[d] += c.amount[0]
    spent = store.spent(docs)[:, 0]
    np.testing.assert_allclose(spent, [expected[d] for d in docs])
    assert (spent <= capacity * (1 + 1e-9)).all()


def test_processes_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    SqliteBudgetStore(path, 6.0).close()
    procs = [_spawn(path, seed, 30, "barrier") for seed in range(4)]
    for _ in range(6000):  # all workers imported and ready, then release them together
        if all(Path(f"{path}.ready{seed}").exists() for seed in range(4)):
            break
        threading.Event().wait(0.01)
    Path(f"{path}.go").touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    ok = sum(json.loads(out)["ok"] for out, _ in outs)
    store = SqliteBudgetStore(path)
    _check_consistent(store, 6.0)
    assert len(store.charges()) == ok
    # contention was real: 120 requests of 4 documents for 12 x 6 = 72 units of budget
    assert 4 * ok <= 72 and ok >= 12


def test_process_killed_inside_a_charge_leaves_no_trace(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    SqliteBudgetStore(path, 100.0).close()
    p = _spawn(path, 1, 5, "kill-in-commit")
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    store = SqliteBudgetStore(path)
    assert store.charges() == []
    assert store.spent([f"d{i}" for i in range(12)]).sum() == 0
    store.charge(["d0"], 1.0)  # not locked, usable


def test_process_killed_at_random_times_keeps_the_store_consistent(tmp_path: Path) -> None:
    path = tmp_path / "random-kill.db"
    SqliteBudgetStore(path, 1000.0).close()
    rng = np.random.default_rng(5)
    for round_ in range(3):
        p = _spawn(path, 10 + round_, 100_000)
        store = SqliteBudgetStore(path)
        # wait until the worker is charging, then kill it mid-stream
        for _ in range(2000):
            if store.charges():
                break
            threading.Event().wait(0.01)
        threading.Event().wait(float(rng.uniform(0.05, 0.3)))
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=30)
        assert p.returncode == -signal.SIGKILL
        _check_consistent(SqliteBudgetStore(path), 1000.0)
    assert len(SqliteBudgetStore(path).charges()) > 0


def test_processes_creating_one_store_at_once_all_open_it(tmp_path: Path, at_once: Any) -> None:
    """Service workers started together create the same new file; none may fail to open
    it ("database is locked" while another turns it to WAL), and the budget still holds."""
    for round_ in range(10):
        path = str(tmp_path / f"r{round_}" / "budgets.db")
        Path(path).parent.mkdir()

        def create_and_charge(n: int, path: str = path) -> str:
            try:
                SqliteBudgetStore(path, 3.0).charge(["d"], 1.0, charge_id=f"p{n}")
            except DocumentBudgetExhaustedError:
                return "refused"
            return "charged"

        assert sorted(at_once(create_and_charge, 6)) == ["charged"] * 3 + ["refused"] * 3
        np.testing.assert_allclose(SqliteBudgetStore(path).spent(["d"]), [[3.0]])

"""The coalition-size estimator (§5.4) and a small version of its calibration."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

import ragprivacy.audit.coalition as coalition
from ragprivacy.audit import calibrate_estimator, estimate_coalition, simulate_window
from ragprivacy.audit.coalition import coalition_pairs, coalition_sizes, pair_recall
from ragprivacy.errors import ConfigError


def test_links_only_distinct_accounts_within_tau() -> None:
    e = np.eye(4)
    v = np.stack([e[0], e[0], e[0], e[1], e[2]])
    accounts = ["a", "a", "b", "c", "d"]
    est = estimate_coalition(v, accounts, theta=0.8)
    assert est.size == 2 and est.accounts == ("a", "b")
    # Same probe, but b's query comes long after a's: outside tau, no link.
    assert estimate_coalition(v, accounts, theta=0.8, ts=[0, 1, 500, 2, 3], tau=10).size == 1
    # One account repeating itself is not a coalition.
    assert estimate_coalition(np.stack([e[0]] * 3), ["a"] * 3, theta=0.9).size == 1


@pytest.mark.parametrize("pattern", ["P-A", "P-B", "P-C"])
def test_patterns_are_recovered_exactly_at_theta_080(pattern: str) -> None:
    v, names = simulate_window(k_true=5, pattern=pattern, rng=3)
    assert coalition_sizes(v, names, [0.8])[0] == 5
    null_v, null_names = simulate_window(rng=4)
    assert coalition_sizes(null_v, null_names, [0.2, 0.95]) == [30, 1]


@pytest.mark.statistical
def test_small_calibration_lands_near_the_paper() -> None:
    r = calibrate_estimator(trials=3, k_values=(2, 10), rng=11)
    assert r.null_fpr[0] == 1.0 and r.null_fpr[-1] == 0.0
    assert r.theta_star is not None and 0.75 <= r.theta_star <= 0.85  # paper: 0.80
    for pattern in ("P-A", "P-B", "P-C"):
        assert r.mean_k_hat[pattern][0] == 30  # merged graph at theta = 0.20
        for stats in r.at_theta_star[pattern].values():
            assert stats["tpr"] == 1.0 and stats["exact_recovery"] == 1.0


# ------------------------------------------------------------------ exact range search
def _reference(
    v: np.ndarray,
    names: list[str],
    theta: float,
    ts: list[int] | None = None,
    tau: int | None = None,
) -> tuple[int, set[tuple[str, ...]]]:
    """All pairs by brute force, in float64: ĉ and the account sets of every component
    with ĉ accounts (the test's oracle, independent of the estimator's forest)."""
    x = v / np.linalg.norm(v, axis=1, keepdims=True)
    cos = x @ x.T
    acc = np.asarray(names)
    linked = (cos >= theta - coalition.TIE) & (acc[:, None] != acc[None, :])
    if tau is not None and ts is not None:
        t = np.asarray(ts)
        linked &= np.abs(t[:, None] - t[None, :]) <= tau
    i, j = np.nonzero(np.triu(linked, 1))
    graph = csr_matrix((np.ones(i.size), (i, j)), shape=linked.shape)
    labels = connected_components(graph, directed=False)[1]
    groups = [tuple(sorted(set(acc[labels == lab].tolist()))) for lab in np.unique(labels)]
    size = max(len(g) for g in groups)
    return size, {g for g in groups if len(g) == size}


@functools.cache
def _cell(pattern: str, k_true: int) -> tuple[np.ndarray, list[str]]:
    """A §5.4 calibration cell (A = 30, n = 100, d = 32), made once per test run; its
    array is read-only, so no test can change what the others see."""
    v, names = simulate_window(k_true=k_true, pattern=pattern, rng=100 + k_true)
    v.flags.writeable = False
    return v, names


@functools.cache
def _cell_reference(
    pattern: str, k_true: int, theta: float
) -> tuple[int, frozenset[tuple[str, ...]]]:
    """:func:`_reference` of a calibration cell, computed once per (cell, θ)."""
    size, groups = _reference(*_cell(pattern, k_true), theta)
    return size, frozenset(groups)


@pytest.fixture(params=["dense", "blocks"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test on the small-window path (Prim) and on the blocked range search with
    small blocks, the projection bound forced on whenever d allows it."""
    if request.param == "blocks":
        monkeypatch.setattr(coalition, "_DENSE", 0)
        monkeypatch.setattr(coalition, "_ROWS", 256)
        monkeypatch.setattr(coalition, "_COLS", 700)
        monkeypatch.setattr(coalition, "_VERIFY_COST", 0.0)  # the smallest m always wins
    return str(request.param)


@pytest.mark.parametrize(
    ("pattern", "k_true"), [(p, k) for p in ("P-A", "P-B", "P-C") for k in (0, 2, 10, 20)]
)
def test_same_estimate_as_all_pairs_on_the_calibration_cells(
    path: str, pattern: str, k_true: int
) -> None:
    """§5.4 cells (A = 30, n = 100, d = 32): ĉ over the θ grid and the largest cluster at
    θ* = 0.80 are those of the brute-force all-pairs graph."""
    v, names = _cell(pattern, k_true)
    grid = [0.2, 0.6, 0.75, 0.8, 0.85, 0.95]
    assert coalition_sizes(v, names, grid) == [
        _cell_reference(pattern, k_true, th)[0] for th in grid
    ]
    size, groups = _cell_reference(pattern, k_true, 0.8)
    est = estimate_coalition(v, names, theta=0.8)
    assert est.size == size == max(k_true, 1) and est.accounts in groups


def _near_threshold(
    rng: np.random.Generator, theta: float, dim: int
) -> tuple[np.ndarray, list[str]]:
    """Clusters whose members sit at cosine ≈ θ from their centre (some pairs just above,
    some just below θ), plus pairs built at cosine exactly θ, plus background noise."""
    blocks, names = [], []
    for c in range(40):
        centre = rng.standard_normal(dim)
        centre /= np.linalg.norm(centre)
        m = int(rng.integers(2, 12))
        noise = rng.standard_normal((m, dim))
        noise -= np.outer(noise @ centre, centre)
        noise /= np.linalg.norm(noise, axis=1, keepdims=True)
        cos = np.sqrt(theta) + rng.normal(0.0, 0.01, (m, 1))  # member-member ≈ θ
        blocks.append(cos * centre + np.sqrt(1 - cos**2) * noise)
        names += [f"c{c}-{int(a)}" for a in rng.integers(0, 4, m)]
    for p in range(30):  # cos exactly θ in float64 up to rounding: linked (TIE)
        u = rng.standard_normal((2, dim))
        u[0] /= np.linalg.norm(u[0])
        u[1] -= (u[1] @ u[0]) * u[0]
        u[1] /= np.linalg.norm(u[1])
        blocks.append(np.stack([u[0], theta * u[0] + np.sqrt(1 - theta**2) * u[1]]))
        names += [f"p{p}-a", f"p{p}-b"]
    background = rng.standard_normal((600, dim))
    blocks.append(background)
    names += [f"bg-{int(a)}" for a in rng.integers(0, 50, 600)]
    v = np.concatenate(blocks)
    perm = rng.permutation(v.shape[0])
    return v[perm], [names[i] for i in perm]


@pytest.mark.parametrize("seed", range(6))
def test_randomized_equality_near_the_threshold(path: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    theta = float(rng.choice([0.5, 0.8, 0.9]))
    dim = int(rng.choice([24, 64, 128]))
    v, names = _near_threshold(rng, theta, dim)
    ts = rng.integers(0, 2_000, v.shape[0]).tolist()
    for tau in (None, 300):
        for th in (theta, theta - 0.01, theta + 0.01):
            size, groups = _reference(v, names, th, ts, tau)
            est = estimate_coalition(v, names, theta=th, ts=ts, tau=tau)
            assert est.size == size and est.accounts in groups
        grid = [theta - 0.02, theta, theta + 0.02]
        got = coalition_sizes(v, names, grid, ts=ts, tau=tau)
        assert got == [_reference(v, names, th, ts, tau)[0] for th in grid]


@pytest.mark.parametrize("dim", [32, 128, 384])
def test_the_pruning_bound_keeps_every_linked_pair(dim: int) -> None:
    """Pair recall 1.0 at θ* = 0.80: every pair with cos ≥ θ* − TIE passes the float32
    bound (Px, ‖Qx‖)·(Py, ‖Qy‖) ≥ θ* − TIE − δ, for every projection size m; and the bound
    does prune (else it would be pointless)."""
    rng = np.random.default_rng(dim)
    theta = 0.8
    v, _ = _near_threshold(rng, theta, dim)
    x = v / np.linalg.norm(v, axis=1, keepdims=True)
    truth = x @ x.T >= theta - coalition.TIE
    np.fill_diagonal(truth, False)
    _, vecs = np.linalg.eigh(x.T @ x)
    for m in (1, 4, dim // 4, dim // 2, dim - 1):
        s = coalition._bound_vectors(x, np.ascontiguousarray(vecs[:, ::-1][:, :m]))
        kept = s @ s.T >= theta - coalition.TIE - coalition._margin(m + 1)
        assert kept[truth].all()  # recall 1.0
    assert kept.mean() < 0.1  # at m = d − 1 the bound is nearly the cosine itself


def test_threads_and_bad_input() -> None:
    v, names = simulate_window(k_true=5, rng=1)
    assert coalition_sizes(v, names, [0.8], threads=None) == [5]
    assert coalition_sizes(v, names, [0.8], threads=2) == [5]
    with pytest.raises(ConfigError, match="threads"):
        coalition_sizes(v, names, [0.8], threads=0)
    with pytest.raises(ConfigError, match="one timestamp per query"):
        estimate_coalition(v, names, theta=0.8, ts=[0, 1], tau=5)
    bad = v.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ConfigError, match="finite"):
        estimate_coalition(bad, names, theta=0.8)


# ------------------------------------------------------------ IVF candidate searches
@functools.cache
def _cell_pairs(pattern: str, k_true: int) -> np.ndarray:
    """:func:`_brute_pairs` of a calibration cell at θ = 0.8, computed once."""
    pairs = _brute_pairs(*_cell(pattern, k_true), 0.8)
    pairs.flags.writeable = False
    return pairs


def _brute_pairs(
    v: np.ndarray,
    names: list[str],
    theta: float,
    ts: list[int] | None = None,
    tau: int | None = None,
) -> np.ndarray:
    """Every linked pair (i < j) by brute force in float64, sorted: the oracle of
    ``coalition_pairs``."""
    x = v / np.linalg.norm(v, axis=1, keepdims=True)
    acc = np.asarray(names)
    linked = (x @ x.T >= theta - coalition.TIE) & (acc[:, None] != acc[None, :])
    if tau is not None and ts is not None:
        t = np.asarray(ts)
        linked &= np.abs(t[:, None] - t[None, :]) <= tau
    i, j = np.nonzero(np.triu(linked, 1))
    return np.stack([i, j], axis=1)


@pytest.fixture
def ivf_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The IVF searches at calibration size: no dense shortcut, small blocks of sources."""
    monkeypatch.setattr(coalition, "_DENSE", 0)
    monkeypatch.setattr(coalition, "_ROWS", 256)
    monkeypatch.setattr(coalition, "_COLS", 700)


@pytest.mark.usefixtures("ivf_blocks")
@pytest.mark.parametrize("search", ["ivf-bound", "ivf"])
@pytest.mark.parametrize(
    ("pattern", "k_true"), [(p, k) for p in ("P-A", "P-B", "P-C") for k in (0, 2, 10, 20)]
)
def test_ivf_same_estimate_and_recall_one_on_the_calibration_cells(
    search: str, pattern: str, k_true: int
) -> None:
    """§5.4 cells: the IVF searches give the brute-force ĉ over the θ grid and the largest
    cluster at θ* = 0.80; every pair they return is linked, once. ``ivf-bound`` finds
    every linked pair at θ* (pair recall 1.0, guaranteed); ``ivf`` at its default nprobe
    (32 of 55 cells) has a measured recall: 1.0 on these cells (at nprobe = 16: 0.81 on
    P-B with k = 20, whose jittered probes spread over many cells), and 1.0 when it probes
    every cell."""
    v, names = _cell(pattern, k_true)
    grid = [0.75, 0.8, 0.85, 0.95]
    got = coalition_sizes(v, names, grid, search=search)
    assert got == [_cell_reference(pattern, k_true, th)[0] for th in grid]
    size, groups = _cell_reference(pattern, k_true, 0.8)
    est = estimate_coalition(v, names, theta=0.8, search=search)
    assert est.size == size == max(k_true, 1) and est.accounts in groups
    truth = _cell_pairs(pattern, k_true)
    exact = coalition_pairs(v, names, theta=0.8)
    assert np.array_equal(exact, truth)
    found = coalition_pairs(v, names, theta=0.8, search=search)
    assert np.unique(found, axis=0).shape == found.shape  # each pair once
    assert pair_recall(truth, found) == 1.0  # precision: every pair found is linked
    if search == "ivf-bound":
        assert pair_recall(found, exact) == 1.0 and np.array_equal(found, truth)
    else:
        assert pair_recall(found, exact) == 1.0
        every = coalition_pairs(v, names, theta=0.8, search=search, nprobe=55)
        assert np.array_equal(every, truth)


@pytest.mark.usefixtures("ivf_blocks")
@pytest.mark.parametrize("search", ["ivf-bound", "ivf"])
@pytest.mark.parametrize("seed", range(6))
def test_ivf_randomized_equality_near_the_threshold(search: str, seed: int) -> None:
    """Clusters straddling θ and pairs at exactly θ (some across IVF cells): the same
    ĉ, clusters and linked pairs as brute force, with and without τ."""
    rng = np.random.default_rng(seed)
    theta = float(rng.choice([0.5, 0.8, 0.9]))
    dim = int(rng.choice([24, 64, 128]))
    v, names = _near_threshold(rng, theta, dim)
    ts = rng.integers(0, 2_000, v.shape[0]).tolist()
    for tau in (None, 300):
        truth = _brute_pairs(v, names, theta, ts, tau)
        found = coalition_pairs(v, names, theta=theta, ts=ts, tau=tau, search=search)
        assert pair_recall(found, truth) == 1.0 and np.array_equal(found, truth)
        for th in (theta, theta + 0.01):
            size, groups = _reference(v, names, th, ts, tau)
            est = estimate_coalition(v, names, theta=th, ts=ts, tau=tau, search=search)
            assert est.size == size and est.accounts in groups
        grid = [theta, theta + 0.02]
        got = coalition_sizes(v, names, grid, ts=ts, tau=tau, search=search)
        assert got == [_reference(v, names, th, ts, tau)[0] for th in grid]


def _drop_last_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted bug: every query loses its last probe (the probed cell of the lowest
    similarity, never its own)."""
    original = coalition._probe_matrix

    def buggy(
        x: np.ndarray, x32: np.ndarray, theta: float, how: coalition._Search
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cell, probe, sims = original(x, x32, theta, how)
        rows = np.arange(x.shape[0])
        masked = np.where(probe.T, sims, np.inf)
        masked[rows, cell] = np.inf
        last = np.argmin(masked, axis=1)
        has = np.isfinite(masked[rows, last])
        probe = probe.copy()
        probe[last[has], rows[has]] = False
        return cell, probe, sims

    monkeypatch.setattr(coalition, "_probe_matrix", buggy)


@pytest.mark.usefixtures("ivf_blocks")
@pytest.mark.parametrize("seed", range(3))
def test_a_dropped_probe_is_caught(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With one IVF cell per query the angle bound is tight: ``ivf-bound`` probes only
    cells that could hold a linked query, so the pairs at exactly θ (each query's only
    neighbour) need their last probe. The recall check passes on the search and fails
    once every query drops its last probe; so does ``ivf`` at nprobe = 2."""
    rng = np.random.default_rng(seed)
    theta = 0.8
    v, names = _near_threshold(rng, theta, 32)
    n = v.shape[0]
    truth = _brute_pairs(v, names, theta)
    nprobe = {"ivf-bound": 16, "ivf": 2}  # ivf-bound ignores nprobe
    good = {
        s: coalition_pairs(v, names, theta=theta, search=s, nlist=n, nprobe=p)
        for s, p in nprobe.items()
    }
    assert pair_recall(good["ivf-bound"], truth) == 1.0
    assert np.array_equal(good["ivf-bound"], truth)
    _drop_last_probe(monkeypatch)
    for search, p in nprobe.items():
        bad = coalition_pairs(v, names, theta=theta, search=search, nlist=n, nprobe=p)
        assert pair_recall(bad, truth) < pair_recall(good[search], truth)


@pytest.mark.usefixtures("ivf_blocks")
def test_the_angle_bound_prunes_clustered_queries() -> None:
    """On tight clusters (no background) ``ivf-bound`` probes a few cells per query, not
    all of them, and still finds every linked pair; on i.i.d. queries in 64-d every cell
    is within reach (the case ``ivf`` is for)."""
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((60, 64))
    v = np.repeat(centres, 20, axis=0) + 0.05 * rng.standard_normal((1200, 64))
    names = [f"a{i}" for i in rng.integers(0, 40, 1200)]
    x = coalition._unit_rows(v)
    _, probe, _ = coalition._probe_matrix(
        x, x.astype(np.float32), 0.8, coalition._Search("ivf-bound", nlist=60)
    )
    assert probe.sum(axis=0).mean() < 0.1 * probe.shape[0]
    found = coalition_pairs(v, names, theta=0.8, search="ivf-bound", nlist=60)
    assert np.array_equal(found, _brute_pairs(v, names, 0.8))
    u = rng.standard_normal((1200, 64))
    xu = coalition._unit_rows(u)
    _, probe, _ = coalition._probe_matrix(
        xu, xu.astype(np.float32), 0.8, coalition._Search("ivf-bound", nlist=35)
    )
    assert probe.mean() > 0.9


def test_search_options_are_checked() -> None:
    v, names = simulate_window(k_true=5, rng=1)
    with pytest.raises(ConfigError, match="search"):
        coalition_sizes(v, names, [0.8], search="lsh")
    with pytest.raises(ConfigError, match="nprobe"):
        estimate_coalition(v, names, theta=0.8, search="ivf", nprobe=0)
    with pytest.raises(ConfigError, match="nlist"):
        coalition_pairs(v, names, theta=0.8, search="ivf", nlist=0)
    assert pair_recall(np.zeros((0, 2)), np.zeros((0, 2))) == 1.0
    assert pair_recall(np.array([[0, 1]]), np.array([[0, 1], [2, 3]])) == 0.5

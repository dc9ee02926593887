"""The worlds of the k-account probe attack through the multi-tenant service's noisy top-K
(§4.4, §A.3): :class:`TopKHarness` builds them (corpus, embedder, index, service) and
runs the attack in each; :func:`~ragprivacy.eval.experiments.collusion.topk_sweep` sweeps it.

Setting (collusion paper Figure 2(b)): the victim tenant's index holds ``background``
random unit documents in ``dim`` dimensions plus one *planted* slot, which holds the target
x* = q* (member world) or a unit vector x'* orthogonal to the probe q* (non-member world),
so the score gap is Δ = 1. Each of k accounts sends the probe n times; the user-observable
statistic is the number of the kn answers whose top-K contains the planted slot. The
instrumented statistic (§4.5: not visible to an attacker) is the pooled noisy score of the
planted slot.

Regimes (§2.3, Table 1):

* ``same-tenant`` — the k accounts belong to the victim tenant;
* ``external-m4`` — the accounts belong to another tenant and reach the victim's index
  through the M4 shared-backend misconfiguration (``shared_backend=True``);
* ``external`` — the accounts belong to another tenant and the service is correctly
  configured: their queries are scored against their own tenant's index, which does not
  hold the planted slot, so the statistic is 0 in both worlds (AUC ½).

Two ways to run a cell:

* ``mode="service"`` sends every query through :meth:`TenantRetriever.search` (noise on
  all |D_t| scores, then top-K; rate limits charged; one window per trial).
* ``mode="exact"`` uses that, for a fixed index and a fixed probe, the kn answers are
  i.i.d., so the hit count is exactly Binomial(kn, p_b) with
  p_b = P(planted slot in the noisy top-K). p_b is computed from the service's own scores
  and σ by Gauss–Hermite quadrature over the planted slot's noise and a Poisson-binomial
  recursion over the other slots' noises (truncated at K;
  :func:`ragprivacy.dp.hit_probability`). Tests check it against the service path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._validation import check_choice, check_positive, check_positive_int
from ragprivacy.corpus import Corpus
from ragprivacy.dp import AccountPolicy, hit_probability
from ragprivacy.embed import HashingEmbedder
from ragprivacy.errors import ConfigError
from ragprivacy.index import ExactIndex
from ragprivacy.retrieval import KnowledgeBase, TenantRetriever
from ragprivacy.types import Document

__all__ = ["TopKCellResult", "TopKHarness"]

PLANTED = "planted"
REGIMES = ("same-tenant", "external-m4", "external")


def _unit(rng: np.random.Generator, dim: int) -> np.ndarray:
    v = rng.standard_normal(dim)
    return v / np.linalg.norm(v)


@dataclass(frozen=True, slots=True)
class TopKCellResult:
    """One (k, ε_acc) cell: the statistic under each world, per trial."""

    k: int
    epsilon_acc: float
    hits_member: np.ndarray
    hits_nonmember: np.ndarray
    score_member: np.ndarray | None
    score_nonmember: np.ndarray | None
    p_member: float | None
    p_nonmember: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TopKHarness:
    """The probe attack of §4.4 through :class:`~ragprivacy.retrieval.TenantRetriever`.

    Args:
        epsilon_acc: per-account ε (σ by eq. 3.4 from ``n``, or ``calibration``).
        delta_acc: per-account δ.
        n: queries per account (= the rate limit of each account).
        top_k: K.
        background: background documents in the victim index.
        dim: embedding dimension.
        regime: ``same-tenant``, ``external-m4`` or ``external``.
        calibration: the :class:`~ragprivacy.dp.AccountPolicy` calibration.
        index_seed: seed of the index and probe (shared by both worlds and every trial).
        score_range: the accounts' clipping range (Δ = its width). ``None`` (default) is
            the paper's setting as printed: no clipping and Δ = 1, which is exact for
            this experiment's neighbouring pair (the planted slot's score moves from 1 to
            0) though not for every pair of indices; ``(0.0, 1.0)`` clips and keeps Δ = 1;
            ``(-1.0, 1.0)`` is the service default (Δ = 2, twice the σ).
    """

    epsilon_acc: float
    delta_acc: float = 1e-6
    n: int = 200
    top_k: int = 5
    background: int = 50
    dim: int = 32
    regime: str = "same-tenant"
    calibration: str = "paper"
    index_seed: int = 0
    score_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        check_positive("epsilon_acc", self.epsilon_acc)
        check_positive_int("n", self.n)
        check_positive_int("top_k", self.top_k)
        check_positive_int("background", self.background)
        if self.dim < 16:
            raise ConfigError(f"The 'dim' parameter must be >= 16; got {self.dim}.")
        check_choice("regime", self.regime, REGIMES)

    @property
    def policy(self) -> AccountPolicy:
        return AccountPolicy(
            rate_limit=self.n,
            epsilon=self.epsilon_acc,
            delta=self.delta_acc,
            calibration=self.calibration,
            score_range=self.score_range,
            sensitivity=1.0 if self.score_range is None else None,
        )

    def _vectors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.index_seed)
        bg = np.stack([_unit(rng, self.dim) for _ in range(self.background)])
        probe = _unit(rng, self.dim)
        other = _unit(rng, self.dim)
        decoy = other - (other @ probe) * probe
        decoy /= np.linalg.norm(decoy)
        outsider = np.stack([_unit(rng, self.dim) for _ in range(self.background)])
        return bg, probe, decoy, outsider

    def _kb(self, vectors: np.ndarray, names: list[str]) -> KnowledgeBase:
        docs = [Document(name, f"document {name}") for name in names]
        index = ExactIndex(self.dim)
        index.add(vectors.astype(np.float32), names)
        return KnowledgeBase(Corpus(docs, name="tenant"), HashingEmbedder(dim=self.dim), index)

    def service(
        self, *, member: bool, k: int, simulation: bool = False, rng: RngLike = None
    ) -> tuple[TenantRetriever, list[str], np.ndarray]:
        """The service of one world with k attacker accounts; returns (service, account
        ids, probe). The planted slot is the last position of the victim index.

        The service adds secure noise by default; ``simulation=True`` gives it float
        noise from the seedable ``rng`` (the experiments' setting; secure mode refuses a
        seed)."""
        bg, probe, decoy, outsider = self._vectors()
        planted = probe if member else decoy
        names = [f"bg-{i}" for i in range(self.background)] + [PLANTED]
        svc = TenantRetriever(
            k=self.top_k,
            shared_backend=self.regime == "external-m4",
            simulation=simulation,
            rng=rng,
        )
        svc.add_tenant("victim", self._kb(np.vstack([bg, planted]), names))
        attacker_tenant = "victim"
        if self.regime != "same-tenant":
            attacker_tenant = "outsider"
            svc.add_tenant(
                "outsider",
                self._kb(outsider, [f"out-{i}" for i in range(self.background)]),
            )
        accounts = [f"attacker-{i}" for i in range(k)]
        for a in accounts:
            svc.add_account(a, attacker_tenant, self.policy)
        return svc, accounts, probe

    def hit_probabilities(self) -> tuple[float, float]:
        """(p_member, p_nonmember): one probe query's chance to return the planted slot."""
        out = []
        for member in (True, False):
            svc, accounts, probe = self.service(member=member, k=1, simulation=True, rng=0)
            if self.regime == "external":
                out.append(0.0)
                continue
            scores = svc.knowledge_base("victim").index.scores(probe)[0]
            if self.score_range is not None:  # the service clips before noise
                scores = np.clip(scores, *self.score_range)
            out.append(hit_probability(scores, self.background, svc.sigma(accounts[0]), self.top_k))
        return out[0], out[1]

    def run(
        self,
        *,
        k: int,
        trials: int,
        mode: str = "exact",
        instrumented: bool = False,
        rng: RngLike = None,
    ) -> TopKCellResult:
        """Run ``trials`` attacks by k accounts in each world.

        ``instrumented`` (service mode) also records the pooled noisy score of the planted
        slot — an offline reference view of the score channel, only where the planted slot
        was selected (§4.5 reads it at the planted slot; here, the mean over the answers
        that returned it, 0 when none did).
        """
        k = check_positive_int("k", k)
        trials = check_positive_int("trials", trials)
        check_choice("mode", mode, ("exact", "service"))
        gen = make_rng(rng)
        if mode == "exact":
            p_in, p_out = self.hit_probabilities()
            return TopKCellResult(
                k=k,
                epsilon_acc=self.epsilon_acc,
                hits_member=gen.binomial(k * self.n, p_in, trials),
                hits_nonmember=gen.binomial(k * self.n, p_out, trials),
                score_member=None,
                score_nonmember=None,
                p_member=p_in,
                p_nonmember=p_out,
            )
        hits: dict[bool, np.ndarray] = {}
        score: dict[bool, np.ndarray] = {}
        for member in (True, False):
            svc, accounts, probe = self.service(member=member, k=k, simulation=True, rng=gen)
            planted = self.background
            queries = np.repeat(probe[None, :].astype(np.float32), self.n, axis=0)
            target = (
                None
                if self.regime == "same-tenant"
                else ("victim" if self.regime == "external-m4" else None)
            )
            h = np.zeros(trials, dtype=np.int64)
            sc = np.zeros(trials)
            for t in range(trials):
                svc.open_window()
                found = 0
                total = 0.0
                for a in accounts:
                    sel = svc.search(queries, account=a, tenant=target)
                    mask = (
                        sel.indices == planted
                        if sel.tenant == "victim"
                        else np.zeros(sel.indices.shape, dtype=bool)
                    )
                    found += int(mask.sum())
                    total += float(sel.noisy_scores[mask].sum())
                h[t] = found
                sc[t] = total / found if found else 0.0
            hits[member], score[member] = h, sc
        return TopKCellResult(
            k=k,
            epsilon_acc=self.epsilon_acc,
            hits_member=hits[True],
            hits_nonmember=hits[False],
            score_member=score[True] if instrumented else None,
            score_nonmember=score[False] if instrumented else None,
            p_member=None,
            p_nonmember=None,
        )

"""A provider that cheats, for testing and demonstrating the verifier (never for deployment).

:class:`CheatingWindow` is an :class:`~ragprivacy.audit.AuditWindow` that overrides the
small methods a query is routed, numbered, noised and selected by, in the ways a dishonest
provider holding its own keys would (:class:`Misbehaviour` says which); the honest window
has no switch for any of them. :func:`tamper_ledger_file` changes a published record after
the fact. The verifier must FAIL each case at a named check (:data:`TAMPER_HELP`), which
the tests and ``ragprivacy audit demo --tamper`` show. Not exported from
:mod:`ragprivacy.audit`: import it from here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._typing import FloatArray, IntArray
from ragprivacy.audit.commitments import fixed_point
from ragprivacy.audit.noise import QueryNoise, ScoreAt
from ragprivacy.audit.window import AuditWindow
from ragprivacy.dp import GaussianNoisyTopK, top_k_indices
from ragprivacy.errors import ConfigError

__all__ = [
    "TAMPER_CASES",
    "TAMPER_HELP",
    "CheatingWindow",
    "Misbehaviour",
    "tamper_ledger_file",
]

TAMPER_CASES = (
    "none",
    "changed-record",
    "dropped-record",
    "wrong-seed",
    "select-before-noise",
    "cross-tenant",
    "coalition",
    "low-sigma",
    "over-rate",
    "tenant-switch",
    "ground-noise",
    "decoy-vectors",
    "withheld-witnesses",
)
#: What each case does, as a provider holding its own keys would (it re-signs what it needs).
TAMPER_HELP = {
    "none": "an honest window",
    "changed-record": "rewrite one record's H(top-K) and re-sign the tree head",
    "dropped-record": "drop one receipted record and re-sign the tree head",
    "wrong-seed": "draw the noise from another seed than the committed one",
    "select-before-noise": "select the top-K on clean scores (footnote 1's bug)",
    "cross-tenant": "score one account against another tenant's index",
    "coalition": "k_max + 1 same-tenant accounts send one probe",
    "low-sigma": "commit and use sigma = 1e-3, far below eq. (3.4)",
    "over-rate": "serve one account four times its rate limit r",
    "tenant-switch": "record and serve one account under a second tenant half-way",
    "ground-noise": "shift one account's query numbers j to pick its noise",
    "decoy-vectors": "k_max + 1 colluders send one text; witness random decoy vectors",
    "withheld-witnesses": "k_max + 1 colluders; withhold their witnesses and claim c = 1",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Misbehaviour:
    """How a :class:`CheatingWindow` deviates.

    ``noise_seed``: noise from another seed; ``select_before_noise``: footnote 1's bug;
    ``skip_clipping``: noise on unclipped scores; ``cross_tenant``: account → the tenant
    index its queries are scored against (recorded under its own tenant);
    ``record_tenant``: account → another tenant it is recorded *and* served under (t(a)
    not as committed); ``ignore_rate_limit``: serve past r; ``seq_shift``: account → an
    offset added to its query numbers j (the provider choosing j to pick the noise);
    ``decoy_vectors``: account → a vector scored and witnessed instead of Emb(q) of its
    text queries.
    """

    noise_seed: bytes | None = None
    select_before_noise: bool = False
    skip_clipping: bool = False
    cross_tenant: Mapping[str, str] = field(default_factory=dict)
    record_tenant: Mapping[str, str] = field(default_factory=dict)
    ignore_rate_limit: bool = False
    seq_shift: Mapping[str, int] = field(default_factory=dict)
    decoy_vectors: Mapping[str, FloatArray] = field(default_factory=dict)


class CheatingWindow(AuditWindow):
    """An audit window that deviates as ``misbehaviour`` says (which may be changed
    half-way, as a provider switching behaviour mid-window would)."""

    def __init__(self, *, misbehaviour: Misbehaviour | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.misbehaviour = misbehaviour or Misbehaviour()

    # The hooks get an account's pseudonym; the misbehaviour names accounts and tenants.
    def _route(self, account: str) -> tuple[str, str]:
        bad, name = self.misbehaviour, self.names[account]
        own = self.accounts[account]
        tenant = self.tenant_id(bad.record_tenant[name]) if name in bad.record_tenant else own
        scored = self.tenant_id(bad.cross_tenant[name]) if name in bad.cross_tenant else tenant
        return tenant, scored

    def _query_number(self, account: str, used: int) -> int:
        shift = self.misbehaviour.seq_shift.get(self.names[account], 0)
        return super()._query_number(account, used) + shift

    def _noise_seed(self) -> bytes:
        return self.misbehaviour.noise_seed or super()._noise_seed()

    def _query_vector(self, account: str, text: str | None, q: np.ndarray) -> np.ndarray:
        decoys = self.misbehaviour.decoy_vectors
        name = self.names[account]
        if text is not None and name in decoys:
            decoy: np.ndarray = fixed_point(np.asarray(decoys[name], dtype=np.float64))[0]
            return decoy
        return q

    def _check_rate_limit(self, account: str, used: int) -> None:
        if not self.misbehaviour.ignore_rate_limit:
            super()._check_rate_limit(account, used)

    def _select(
        self, mechanism: GaussianNoisyTopK, noise: QueryNoise, score_at: ScoreAt
    ) -> IntArray:
        bad = self.misbehaviour
        if not (bad.select_before_noise or bad.skip_clipping):
            return super()._select(mechanism, noise, score_at)
        z = noise.dense()  # the honest derivation's values: only the rule is wrong
        everything = score_at(np.arange(z.shape[0], dtype=np.int64))
        if bad.select_before_noise:  # footnote 1's bug: select on clean scores
            return top_k_indices(mechanism.clip_units(everything), mechanism.k)
        return top_k_indices(everything + z, mechanism.k)  # Δ no longer bounded


def tamper_ledger_file(directory: str | Path, position: int) -> None:
    """Change one published record in place (the tree head is left as signed)."""
    path = Path(directory) / "ledger.jsonl"
    lines = path.read_text().splitlines()
    if not 0 <= position < len(lines):
        raise ConfigError(f"No record {position} in {path} ({len(lines)} records).")
    rec = json.loads(lines[position])
    rec["topk_commit"] = "f" * 64
    lines[position] = json.dumps(rec, sort_keys=True, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n")

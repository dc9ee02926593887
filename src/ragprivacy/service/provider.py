"""The service's provider: audit windows over the state directory, and private answers.

One audit window is open at a time. Opening it (:func:`open_window`, an admin step)
snapshots the tenants' documents, the accounts and their policies, draws the window seed
s_W and publishes the signed commitments (phase A) of an
:class:`ragprivacy.audit.AuditWindow` — the one serving core, built here by
:func:`audit_window` for every use (opening, serving, closing, exporting). Every query is
then that window's one step, :func:`ragprivacy.audit.answer_query`: noise derived from
(s_W, rec_q) for every committed slot of the account's tenant, exact scores of only the
slots that noise leaves in the race (the noise-first selection,
:func:`ragprivacy.audit.exact_selection`; the same output as scoring every slot), the
witness stored, the record appended to the window's durable ledger — whose guard is the
account's rate limit, so an account's spend *is* its records and nothing is charged for
a query without a record — and the receipt signed. An answer whose generation fails
after retrieval is charged all the same: its record is appended
(:mod:`ragprivacy.service.failures`). Closing the window (:func:`close_window`)
certifies the coalition claim (phase C).

Where the tenants' embeddings live decides only how the exact scores are read: from
memory (a SQLite state), or — a PostgreSQL state with pgvector — from each tenant's
pgvector table, fetched by position through the state's pool — the few rows a query's
noise selects, and the openings (:class:`ragprivacy.service.PgvectorTenantVectors`); a
replica then holds each tenant's Merkle tree of hashes (32 bytes a document), not its
vectors. The scores are computed in numpy from the stored float32 rows either way, so the
selection is the one the verifier re-executes bit for bit. Which rows a query reads is a
function of its noise (docs/pgvector.md says who sees that).

Several server workers (processes) — and, with the state on PostgreSQL, several replicas
on several machines — may serve one window: each holds an :class:`AuditWindow` over
the same ledger, witness table and stored commitments; the ledger's write lock (the
file's, or the window's head row in PostgreSQL) orders their appends, and a receipt is
returned only once its record committed.

The window policy states the largest per-account budget (ε_acc, δ_acc, r) and K of any
account, which ε_audit is computed from; each account's own, smaller policy is committed
beside it. Voting tenants answer through :mod:`ragprivacy.service.voting`: their accounts
are in the commitments, with the tenant's vote settings, and their answers are records of
the window (:mod:`ragprivacy.audit.votes`); a ``murag``/``murag_ada`` tenant's documents'
filter state is committed when the window opens and its charges are settled into the
tenant's lifetime filter store when it closes (:mod:`ragprivacy.audit.filters`). A window
opened by an earlier version, which kept its MURAG accounts outside the commitments, serves
them no more: they answer from the next window.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy.audit import (
    AUDITED_VOTING_MODES,
    AuditPolicy,
    AuditWindow,
    Commitments,
    LogSealedError,
    MerkleLog,
    SignedTreeHead,
    VoteSettings,
)
from ragprivacy.dp import composed_gaussian_mu, gaussian_epsilon
from ragprivacy.errors import ChargedFailureError, ConfigError, DataError, WindowClosedError
from ragprivacy.generate import Generator, Prompt, PromptBudget, Task, join_completions
from ragprivacy.rag import charged_failure
from ragprivacy.service.failures import record_failure
from ragprivacy.service.state import ServiceState, Window, check_id
from ragprivacy.service.voting import (
    VotedAnswer,
    VotingTenants,
    filter_start,
    settle_filters,
    vote_settings,
)
from ragprivacy.types import Completion

__all__ = [
    "ServedAnswer",
    "ServiceProvider",
    "WindowClosedError",
    "audit_window",
    "close_window",
    "export_auditor",
    "open_window",
]

_TEN_YEARS_NS = 10 * 365 * 24 * 3600 * 10**9
#: a record's public timestamp: the hour it was answered in (from the window's start)
STAMP_UNIT_NS = 3600 * 10**9


@dataclass(frozen=True, slots=True)
class ServedAnswer:
    """What an account gets for one query: the documents, its receipt, the privacy it
    spent and the budget it has left."""

    window_id: str
    documents: tuple[tuple[str, str], ...]
    receipt: dict[str, Any]
    privacy: dict[str, Any]
    budget: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_id": self.window_id,
            "documents": [{"id": i, "text": t} for i, t in self.documents],
            "receipt": self.receipt,
            "privacy": self.privacy,
            "budget": self.budget,
        }


def _audited(mode: str) -> bool:
    """Whether a tenant of ``mode`` is in the audited commitments."""
    return mode == "noisy_topk" or mode in AUDITED_VOTING_MODES


def _window_policy(
    state: ServiceState, window_id: str, start_ns: int
) -> tuple[AuditPolicy, dict[str, str], dict[str, dict[str, Any]], dict[str, int]]:
    everyone = state.accounts()
    tenants = state.tenants()
    if not everyone:
        raise ConfigError("Create at least one account ('account create') before opening a window.")
    empty = sorted(
        {a["tenant"] for a in everyone.values()} - {t for t in tenants if tenants[t]["documents"]}
    )
    if empty:
        raise ConfigError(
            f"Tenant(s) {', '.join(empty)} have accounts but no documents; add documents "
            "('docs add') before opening a window."
        )
    accounts = {n: a for n, a in everyone.items() if _audited(tenants[a["tenant"]]["mode"])}
    if not accounts:
        raise ConfigError(
            "A window needs at least one account of a noisy_topk or voting tenant (the "
            "audited part); create one ('tenant create T --mode noisy_topk', 'account "
            "create T A ...')."
        )
    used = sorted({a["tenant"] for a in accounts.values()})
    k_max = state.k_max
    delta = max(a["delta"] for a in accounts.values())
    policy = AuditPolicy(
        epsilon_acc=max(a["epsilon"] for a in accounts.values()),
        delta_acc=delta,
        rate_limit=max(a["rate_limit"] for a in accounts.values()),
        k_max=k_max,
        delta_policy=(k_max + 1) * delta,
        window_id=window_id,
        window_start=start_ns,
        window_end=start_ns + _TEN_YEARS_NS,
        stamp_unit=STAMP_UNIT_NS,
        top_k=max(tenants[t]["k"] for t in used),
    )
    overrides: dict[str, dict[str, Any]] = {}
    for name, a in accounts.items():
        differ = policy.overrides_for(
            epsilon_acc=a["epsilon"],
            delta_acc=a["delta"],
            rate_limit=a["rate_limit"],
            top_k=tenants[a["tenant"]]["k"],
        )
        if differ:
            overrides[name] = differ
    sizes = {t: int(tenants[t]["documents"]) for t in used}
    return policy, {n: a["tenant"] for n, a in accounts.items()}, overrides, sizes


def audit_window(
    state: ServiceState,
    window_id: str,
    tenants: dict[str, int],
    *,
    seed: bytes,
    commitments: Commitments | None = None,
    policy: AuditPolicy | None = None,
    accounts: dict[str, str] | None = None,
    account_policies: dict[str, dict[str, Any]] | None = None,
    texts: Mapping[str, Sequence[str]] | None = None,
    voting: Mapping[str, VoteSettings] | None = None,
    filters: Mapping[str, Sequence[float]] | None = None,
) -> AuditWindow:
    """The :class:`AuditWindow` of ``window_id`` over the state: its tenants' stored
    embeddings (the first ``tenants[t]`` of each; a pgvector table is read, not loaded),
    the service's embedder and signing key, the window's durable ledger and witness
    table; the SHA-256 of each document's text (``texts``: tenant → the texts in index
    order, read from the state when not given) is committed beside its embedding. With
    ``commitments`` (a published window) the policy, accounts and account policies are
    theirs; without, they must be given (a window being opened). Close it (``with``) when
    done: it holds the ledger's connection."""
    if commitments is not None:
        # resumed: the committed policy, each account's committed policy (with its σ) and
        # the vote settings come from the commitments, which name only pseudonyms; the
        # accounts' names come from the window's snapshot
        policy = AuditPolicy.from_dict(commitments.policy)
        account_policies, voting = None, None
    if policy is None or accounts is None:
        raise ConfigError("An audit window needs its commitments, or a policy and accounts.")
    contents: dict[str, Sequence[str]]
    if texts is None:  # hashed block by block as they are read
        contents = {t: state.content_hashes(t, count) for t, count in tenants.items()}
    else:
        contents = {
            t: [hashlib.sha256(x.encode("utf-8")).hexdigest() for x in texts[t]] for t in tenants
        }
    return AuditWindow(
        policy=policy,
        # read once, block by block, into each commitment's fixed-point rows (a pgvector
        # table is read when needed): no float32 copy of a tenant beside them
        tenants={t: state.embedding_source(t, count) for t, count in tenants.items()},
        contents=contents,
        accounts=accounts,
        account_policies=account_policies,
        embedder=state.embedder(),
        embedder_spec=state.setting("embedder"),
        key=state.identity(),
        seed=seed,
        ledger=state.ledger(window_id),
        witness_store=state.witness_store(window_id),
        commitments=commitments,
        voting=voting,
        filters={t: np.asarray(v, dtype=np.float64) for t, v in (filters or {}).items()},
    )


def _return_freed_memory() -> None:
    """Hand the heap pages freed after a window's build back to the system (glibc's
    ``malloc_trim``; nothing elsewhere). A build reads a tenant's rows, ids and content
    hashes through transient lists; freed, their pages stay in the allocator's arenas
    and count in the worker's resident set until the allocator trims them."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim this way
        pass


class StoredTexts(Mapping[str, str]):
    """A tenant's document texts by id, read from the state when asked (:meth:`many` for
    an answer's K at once): a worker keeps no copy of every text of the tenants it
    serves. A window's documents stay as committed while it is open (removals wait for
    it to close), so the texts read are the committed ones."""

    def __init__(self, state: ServiceState, tenant: str) -> None:
        self._state, self._tenant = state, tenant

    def many(self, ids: Sequence[str]) -> dict[str, str]:
        got = self._state.texts_of(self._tenant, ids)
        if len(got) != len(set(ids)):
            raise DataError(
                f"Tenant {self._tenant!r}: a selected document is no longer stored; its "
                "store changed while the window was open."
            )
        return got

    def __getitem__(self, doc_id: str) -> str:
        return self.many([doc_id])[doc_id]

    def __iter__(self) -> Iterator[str]:
        raise TypeError("A tenant's stored texts are read by id, not listed.")

    def __len__(self) -> int:
        raise TypeError("A tenant's stored texts are read by id, not counted.")


def _published(
    state: ServiceState, window: Window, texts: Mapping[str, Sequence[str]] | None = None
) -> AuditWindow:
    """The :class:`AuditWindow` of a window whose commitments are published."""
    return audit_window(
        state,
        window.window_id,
        window.snapshot["tenants"],
        seed=state.window_seed(window.window_id),
        accounts=window.snapshot["accounts"],
        commitments=Commitments.from_dict(window.commitments),
        texts=texts,
        filters=window.snapshot.get("filters"),
    )


def open_window(state: ServiceState, window_id: str | None = None) -> Window:
    """Open the next audit window: snapshot, seed, signed commitments (phase A)."""
    if state.open_windows():
        raise ConfigError("A window is already open; close it first ('window close').")
    state.apply_erasures()  # documents removed meanwhile are not in the next window
    # the id names the window's ledger file: one path component, never a way out
    window_id = check_id("window", window_id or f"W{state.next_window_number()}")
    start = time.time_ns()
    policy, accounts, overrides, sizes = _window_policy(state, window_id, start)
    tenant_modes = state.tenants()
    settings = {
        t: vote_settings(tenant_modes[t], policy.grid_bits)
        for t in sorted(set(accounts.values()))
        if tenant_modes[t]["mode"] in AUDITED_VOTING_MODES
    }
    # what each filtered tenant's documents have spent in earlier windows: committed
    filters = {t: filter_start(state, t, sizes[t]) for t, v in settings.items() if v.filtered}
    snapshot: dict[str, Any] = {
        "tenants": sizes,
        # the audited accounts by name (the commitments name their pseudonyms)
        "accounts": accounts,
        # every voting tenant's documents, which its system is built over
        "voting": {t: sizes[t] for t in settings},
        "filters": filters,
    }
    seed = os.urandom(32)
    with audit_window(
        state,
        window_id,
        sizes,
        seed=seed,
        policy=policy,
        accounts=accounts,
        account_policies=overrides,
        voting=settings,
        filters=filters,
    ) as window:
        commitments = window.commit(published_at=start)
    return state.insert_window(window_id, seed, snapshot, commitments.to_dict())


def close_window(state: ServiceState) -> Window:
    """Close the open window: certify ĉ over its queries (phase C) and freeze it."""
    open_ = state.open_windows()
    if not open_:
        raise ConfigError("No window is open ('window open' starts one).")
    window = open_[0]
    with _published(state, window) as audited:
        # Seal first: a worker's query still in flight then appends nothing (409, nothing
        # spent), so ĉ and the final head cover every record the window will ever hold.
        audited.ledger.seal()
        claim, head = audited.coalition_claim(), audited.tree_head()
        # the filtered tenants' charges go to their lifetime stores before the window is
        # closed: a crash in between leaves it open, and closing again settles nothing twice
        settle_filters(state, audited, window.window_id)
        state.finish_window(window.window_id, claim.to_dict(), head.to_dict())
    return state.window(window.window_id)


def rotate_window(
    state: ServiceState, export_to: str | Path | None = None
) -> tuple[Window | None, Path | None, Window]:
    """Close the open window (if one is), export its auditor package to
    ``export_to/<window id>`` (if given), and open the next: what a scheduler (cron, a
    systemd timer) runs once per period. Returns (the closed window or None, the package's
    directory or None, the new window). The next window opens only after the package was
    written, so a failed export leaves the service with no open window rather than a
    window nobody can audit."""
    closed = package = None
    if state.open_windows():
        closed = close_window(state)
        if export_to is not None:
            package = export_auditor(state, closed.window_id, Path(export_to) / closed.window_id)
    return closed, package, open_window(state)


def window_status(state: ServiceState) -> dict[str, Any]:
    """What an operator checks of the open window: its id, when it opened and its age,
    the records in its ledger, and each account's use (``noisy_topk``: queries of r;
    voting: answers). :class:`ConfigError` when no window is open."""
    open_ = state.open_windows()
    if not open_:
        raise ConfigError("No window is open ('window open' starts one).")
    window = open_[0]
    opened_ns = int(window.commitments["published_at"])
    accounts: dict[str, dict[str, Any]] = {}
    with _published(state, window) as audited:
        records = audited.ledger.size
        for account, tenant in audited.account_names.items():
            accounts[account] = {
                "tenant": tenant,
                "used": audited.used(account),
                "limit": audited.limit(account),
            }
    return {
        "window_id": window.window_id,
        "opened_at": opened_ns / 1e9,
        "age_s": max(0.0, time.time() - opened_ns / 1e9),
        "records": records,
        "accounts": accounts,
    }


def export_auditor(state: ServiceState, window_id: str, directory: str | Path) -> Path:
    """Write the trusted auditor's package (seed, witnesses, embeddings) of a window to
    ``directory/auditor.json`` (mode 0600). Only the admin does this."""
    from ragprivacy.audit import save_window

    try:
        audited = _published(state, state.window(window_id))
    except DataError:
        raise DataError(
            f"Window {window_id!r}'s documents were removed or changed since it was "
            "committed, so its auditor package can no longer be rebuilt; export each "
            "window's package when it closes (window close --export-auditor, window rotate)."
        ) from None
    with audited:
        return save_window(directory, audited.transcript(), [], audited.auditor_package())


def _cache_key(account: str) -> str:
    """An upstream generator's prompt/KV-cache key for ``account``: opaque, stable, and
    different for every account (a cache shared across accounts is a timing channel)."""
    return hashlib.sha256(b"ragprivacy/cache-key\0" + account.encode()).hexdigest()[:32]


class ServiceProvider:
    """Serves the open window's queries for authenticated accounts (thread-safe).

    ``prompt_budget`` fixes each retrieved document's share of an answer's prompt (cut and
    padded to it) and, with the generator's context, refuses before retrieval a query
    whose prompt could overflow (:class:`ragprivacy.generate.PromptBudget`); default
    :class:`PromptBudget()` with the generator's own ``context_tokens``.
    """

    def __init__(self, state: ServiceState, *, prompt_budget: PromptBudget | None = None) -> None:
        self.state = state
        self.prompt_budget = prompt_budget if prompt_budget is not None else PromptBudget()
        self._lock = threading.Lock()
        self._window_id: str | None = None
        self._window: Window | None = None
        self._provider: AuditWindow | None = None
        self._voting: VotingTenants | None = None
        self._closed: dict[str, MerkleLog] = {}  # closed windows' ledgers, read-only

    def _current(self) -> tuple[Window, AuditWindow]:
        """The open window and its provider. One indexed look-up of the open window's id
        per call; the window's row (its JSON snapshot and commitments), its provider and
        its texts are loaded only when that id changes."""
        window_id = self.state.open_window_id()
        if window_id is None:
            raise WindowClosedError("No audit window is open; the service answers only inside one.")
        with self._lock:
            if self._window_id != window_id or self._provider is None or self._window is None:
                # everything is loaded before anything is kept: a load that fails half-way
                # (a lost connection) leaves the cache as it was, for the next request
                window = self.state.window(window_id)
                voting = VotingTenants(
                    self.state,
                    window.window_id,
                    window.snapshot.get("voting", {}),
                    self.state.embedder(),
                    prompt_budget=self.prompt_budget,
                )
                provider = _published(self.state, window)
                _return_freed_memory()  # the build's transient lists, back to the system
                if self._provider is not None:
                    self._provider.close()
                self._provider, self._window_id, self._window = provider, window_id, window
                self._voting = voting
            return self._window, self._provider

    def close(self) -> None:
        """Close the ledgers this object opened (the open window's and closed ones')."""
        with self._lock:
            if self._provider is not None:
                self._provider.close()
                self._provider, self._window_id, self._window = None, None, None
            for log in self._closed.values():
                log.close()
            self._closed.clear()

    def window_id(self) -> str:
        """The open window's id."""
        return self._current()[0].window_id

    def window_gauge(self) -> tuple[int, float] | None:
        """The open window's ledger records (every worker's) and its age in seconds; None
        when no window is open (what ``/metrics`` reports)."""
        try:
            window, audited = self._current()
        except WindowClosedError:
            return None
        audited.ledger.refresh()
        age = time.time() - int(window.commitments["published_at"]) / 1e9
        return audited.ledger.size, max(0.0, age)

    def _voting_tenants(self) -> VotingTenants:
        self._current()
        assert self._voting is not None  # set with the provider
        return self._voting

    def tenant_of(self, account: str) -> str:
        window, provider = self._current()
        if account in window.snapshot.get("voting_accounts", {}):
            raise WindowClosedError(
                "The open window was opened by an earlier version, which kept MURAG accounts "
                "outside the audit; this account answers from the next window."
            )
        if not provider.holds(account):
            raise WindowClosedError(
                "This account joined after the open window was committed; it can query "
                "from the next window."
            )
        return provider.tenant_of(account)

    def votes(self, account: str) -> bool:
        """Whether ``account``'s tenant releases only DP-voted answers (no documents)."""
        self.tenant_of(account)  # an account the open window holds
        return self._current()[1].vote_settings(account) is not None

    def prompt_tokens(
        self, account: str, query: str, generator: Generator, k: int | None = None
    ) -> int:
        """The prompt size an answer's usage reports, from the query alone: its bytes
        with every document at the prompt budget (:meth:`PromptBudget.prompt_tokens`) —
        for a voting tenant, its voters' prompts and the non-RAG one, one document each.
        Never the documents' own tokens: they would tell the retrieved documents' lengths."""
        budget = self.prompt_budget.for_generator(generator)
        prompt = Prompt(Task.ANSWER, query, (), options={"cache_key": _cache_key(account)})
        if self.votes(account):
            voters = int(self.state.tenants()[self.tenant_of(account)]["k"])
            return (voters + 1) * budget.prompt_tokens(prompt, 1)
        _, provider = self._current()
        return budget.prompt_tokens(prompt, k or provider.policy_of(account).top_k)

    def logprobs_allowed(self, account: str) -> bool:
        """Whether ``account``'s tenant policy lets answers carry log-probabilities."""
        return bool(self.state.tenants()[self.tenant_of(account)].get("logprobs", False))

    def retrieve(
        self, account: str, query: str, *, k: int | None = None, nonce: str = ""
    ) -> ServedAnswer:
        """The account's private top-K for ``query`` in the open window."""
        if self.votes(account):
            mode = self.state.tenants()[self.tenant_of(account)]["mode"]
            raise ConfigError(
                f"This account's tenant runs {mode}: it releases only DP-voted answers "
                "(POST /v1/answer or /v1/chat/completions), never documents."
            )
        return self._serve(account, query, k, None, nonce)

    def answer_voted(
        self, account: str, query: str, generator: Generator, *, nonce: str = ""
    ) -> tuple[VotedAnswer, dict[str, Any]]:
        """A voting tenant's answer for ``account`` (see :mod:`ragprivacy.service.voting`)
        and its signed receipt."""
        if not isinstance(query, str) or not query.strip():
            raise ConfigError("The query must be a non-empty string.")
        _, provider = self._current()
        tenant = self.tenant_of(account)
        voting = self._voting_tenants()
        try:
            return voting.answer_audited(
                provider, account, query, generator, StoredTexts(self.state, tenant), nonce=nonce
            )
        except LogSealedError:
            raise WindowClosedError(
                "The audit window closed while this query ran; nothing was spent. Query "
                "again in the next window."
            ) from None

    def answer(
        self,
        account: str,
        query: str,
        generator: Generator,
        *,
        k: int | None = None,
        max_tokens: int | None = None,
        nonce: str = "",
    ) -> tuple[ServedAnswer, Completion]:
        """The RAG answer to ``query`` from the account's private top-K.

        The answer is generated before the query's record is appended. **A failure is an
        answer**: whether generation fails can depend on the documents it was given (a
        hosted model's context-length error depends on their lengths), so a failure after
        retrieval appends the record all the same — the account pays for the query — and
        the caller gets :func:`ragprivacy.rag.charged_failure` (the generator's message is
        withheld: it may describe the documents). Only a generator that was never reached
        (``GeneratorUnavailableError``) leaves nothing appended, and only for the first
        :data:`~ragprivacy.service.state.FREE_FAILURES` such failures of the account in
        the window. A prompt that could overflow the generator's context is refused before
        retrieval, for nothing. Every failure after retrieval is counted and logged."""
        served, pieces = self._answering(account, query, generator, k, max_tokens, nonce, False)
        return served, join_completions(pieces)

    def answer_stream(
        self,
        account: str,
        query: str,
        generator: Generator,
        *,
        k: int | None = None,
        max_tokens: int | None = None,
        nonce: str = "",
    ) -> tuple[ServedAnswer, Iterator[Completion]]:
        """:meth:`answer`, with the answer as the generator streams it
        (:meth:`~ragprivacy.generate.Generator.stream`).

        The generation starts before the record is appended and runs until its first
        piece, so a generator that cannot be reached is the same (free or charged)
        failure as in :meth:`answer`; then the record is appended — the query is paid for
        before the caller sees a byte — and the rest of the answer comes as the iterator
        is read. A failure after that is counted and logged as a charged failure and
        raised from the iterator as :func:`~ragprivacy.rag.charged_failure`, with the
        receipt; closing the iterator stops the generation."""
        return self._answering(account, query, generator, k, max_tokens, nonce, True)

    def _answering(
        self,
        account: str,
        query: str,
        generator: Generator,
        k: int | None,
        max_tokens: int | None,
        nonce: str,
        streaming: bool,
    ) -> tuple[ServedAnswer, Iterator[Completion]]:
        if not isinstance(query, str) or not query.strip():
            raise ConfigError("The query must be a non-empty string.")
        window, provider = self._current()
        tenant = self.tenant_of(account)
        docs = k or provider.policy_of(account).top_k
        budget = self.prompt_budget.for_generator(generator)
        options = {"cache_key": _cache_key(account)}
        budget.check(
            Prompt(Task.ANSWER, query, (), options=options),
            docs,
            max_tokens or int(getattr(generator, "max_tokens", 64)),
        )  # before anything private is read: a refusal costs nothing
        done: list[tuple[list[Completion], Iterator[Completion]]] = []
        failed: list[Exception] = []

        def generate(ids: tuple[str, ...]) -> None:
            # runs again when the query is derived again (another writer appended first):
            # only the attempt whose record is appended answers
            for _, stream in done:
                close_iterator(stream)
            done.clear()
            failed.clear()
            try:
                # the texts are read once the documents are chosen: a failure to read them
                # (a lost connection) is one after retrieval, charged like the generator's
                texts = StoredTexts(self.state, tenant).many(ids[:docs])
                prompt = Prompt(
                    Task.ANSWER, query, budget.fit([texts[i] for i in ids[:docs]]), options=options
                )
                if streaming:
                    stream = generator.stream(prompt, max_tokens=max_tokens)
                    done.append(([next(stream)], stream))  # the generator answers: reached
                else:
                    done.append(([generator.generate(prompt, max_tokens=max_tokens)], iter(())))
            except StopIteration:
                done.append(([], iter(())))  # an empty answer
            except Exception as exc:
                if not record_failure(self.state, window.window_id, account, exc):
                    raise  # nothing is appended: the record's noise is never released
                failed.append(exc)  # the record is appended: the query is paid for

        try:
            served = self._serve(account, query, k, generate, nonce)
        except BaseException:
            for _, stream in done:
                close_iterator(stream)
            raise
        if failed:  # the record is appended: the account keeps its receipt, as for an answer
            error = charged_failure(failed[-1])
            error.receipt = served.receipt
            raise error
        first, rest = done[-1]
        return served, self._rest(served, account, first, rest)

    def _rest(
        self,
        served: ServedAnswer,
        account: str,
        first: list[Completion],
        rest: Iterator[Completion],
    ) -> Iterator[Completion]:
        """The answer's pieces after the record was appended: a failure is charged."""
        try:
            yield from first
            yield from rest
        except Exception as exc:
            raise self.charged_after_append(served, account, exc) from None
        finally:
            close_iterator(rest)

    def charged_after_append(
        self, served: ServedAnswer, account: str, exc: BaseException
    ) -> ChargedFailureError:
        """The error for a failure after ``served``'s record was appended: counted and
        logged as a charged failure (under its own type), with the receipt; the
        backend's message withheld (:func:`~ragprivacy.rag.charged_failure`)."""
        if isinstance(exc, ChargedFailureError):
            return exc  # counted where it was made
        record_failure(self.state, served.window_id, account, exc, appended=True)
        error = charged_failure(exc)
        error.receipt = served.receipt
        return error

    def _serve(
        self,
        account: str,
        query: str,
        k: int | None,
        before_append: Callable[[tuple[str, ...]], None] | None,
        nonce: str = "",
    ) -> ServedAnswer:
        window, provider = self._current()
        tenant = self.tenant_of(account)
        if not isinstance(query, str) or not query.strip():
            raise ConfigError("The query must be a non-empty string.")
        policy = provider.policy_of(account)
        if k is not None and not 1 <= k <= policy.top_k:
            raise ConfigError(f"'k' must be between 1 and this tenant's K = {policy.top_k}.")
        try:
            answer = provider.query(account, query, before_append=before_append, nonce=nonce)
        except LogSealedError:
            raise WindowClosedError(
                "The audit window closed while this query ran; nothing was spent. Query "
                "again in the next window."
            ) from None
        keep = answer.ids[: k or len(answer.ids)]  # a shorter list is post-processing
        receipt = answer.receipt.to_dict()
        try:
            texts = StoredTexts(self.state, tenant).many(keep)
        except Exception as exc:  # after the append: charged like an answer, with its receipt
            paid = ServedAnswer(window.window_id, (), receipt, {}, {})
            raise self.charged_after_append(paid, account, exc) from None
        return ServedAnswer(
            window_id=window.window_id,
            documents=tuple((i, texts[i]) for i in keep),
            receipt=receipt,
            privacy=self._spent(account, provider),
            budget=self._budget(account, provider),
        )

    @staticmethod
    def _spent(account: str, provider: AuditWindow) -> dict[str, Any]:
        """This query's ε and the account's ε so far in the window (exact Gaussian DP of
        its records, each a Gaussian of σ and Δ), at the account's δ."""
        policy = provider.policy_of(account)
        sigma, sens = policy.noise_sigma, policy.sensitivity
        used = provider.used(account)
        per_query = gaussian_epsilon(composed_gaussian_mu(sigma, 1, sens), policy.delta_acc)
        total = gaussian_epsilon(composed_gaussian_mu(sigma, used, sens), policy.delta_acc)
        return {
            "mechanism": "gaussian-noisy-topk",
            "epsilon": per_query,
            "delta": policy.delta_acc,
            "cumulative_epsilon": total,
            "sigma": sigma,
            "sensitivity": sens,
            "scope": "retrieval",
        }

    @staticmethod
    def _budget(account: str, provider: AuditWindow) -> dict[str, Any]:
        policy = provider.policy_of(account)
        used = provider.used(account)
        return {
            "rate_limit": policy.rate_limit,
            "used": used,
            "remaining": max(policy.rate_limit - used, 0),
            "epsilon_acc": policy.epsilon_acc,
            "delta_acc": policy.delta_acc,
        }

    def budget(self, account: str) -> dict[str, Any]:
        window, provider = self._current()
        if self.votes(account):
            return self._voting_tenants().audited_budget(provider, account)
        return {
            **self._budget(account, provider),
            "failures": self.state.failures(window.window_id, account),
        }

    # ------------------------------------------------------------------ public audit
    def tree_head(self, window_id: str) -> SignedTreeHead:
        window = self.state.window(window_id)
        if window.tree_head is not None:
            return SignedTreeHead.from_dict(window.tree_head)
        _, provider = self._current()
        provider.ledger.refresh()  # the records other workers appended belong in the head
        return provider.tree_head()

    def _ledger(self, window_id: str) -> MerkleLog:
        """A window's ledger, caught up: the open window's provider's, or a closed one's
        file alone (sealed, so opened once; no index is loaded to read it)."""
        window = self.state.window(window_id)
        if window.status == "open":
            log = self._current()[1].ledger
        else:
            with self._lock:
                if window_id not in self._closed:
                    self._closed[window_id] = self.state.ledger(window_id)
                log = self._closed[window_id]
        log.refresh()
        return log

    def records(self, window_id: str, start: int, end: int | None) -> list[str]:
        log = self._ledger(window_id)
        size = log.size
        end = size if end is None else min(end, size)
        return [log.leaf(i).decode() for i in range(max(start, 0), max(end, 0))]

    def inclusion_proof(self, window_id: str, position: int, size: int) -> list[str]:
        return [h.hex() for h in self._ledger(window_id).inclusion_proof(position, size)]

    def consistency_proof(self, window_id: str, old: int, new: int) -> list[str]:
        return [h.hex() for h in self._ledger(window_id).consistency_proof(old, new)]


def close_iterator(stream: Iterator[Any]) -> None:
    """Close ``stream`` where it can be closed (a generator: its generation stops)."""
    close = getattr(stream, "close", None)
    if close is not None:
        close()

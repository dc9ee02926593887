"""An account's HTTP client (httpx) that checks and keeps every receipt it gets (collusion
paper M5).

An honest account saves the signed receipt of each answer — and of each answer that failed
after retrieval (HTTP 502: the record was appended and paid for) — in ``receipts_dir``, one
JSON line per receipt in ``receipts.jsonl``; at the end of a window it hands them all to the
verifier (``ragprivacy audit verify --url URL --receipts DIR``), which checks that each is in
the final ledger, unchanged, and that no record in the account's name lacks one.

Before keeping a receipt the client checks what only the account can check
(:meth:`Client.check_receipt`): the provider's signature (under the key in the window's
commitments, or a ``provider_key`` known in advance), that it names the commitments the
service publishes for its window (those of every open window are fetched, their signature
checked, before each request is sent, so the provider cannot choose them after seeing the
query), that the noise's nonce is the one it sent, that the served texts are the committed
ones, that
H(q) is the hash of the query the account sent (a provider that grinds H(q) with trailing
spaces is caught here), and that the account's query numbers j only grow. A receipt that
fails is not kept: it is written to ``rejected/receipts.jsonl`` as evidence and the call
raises :class:`~ragprivacy.errors.VerificationError` — and its record, which the account
holds no receipt for, FAILs the window's verification as a query it never asked for.
The client talks only to the ``base_url`` it was given.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import threading
from pathlib import Path
from typing import Any

import httpx

from ragprivacy.audit import Commitments, Receipt, query_hash, verify_signature
from ragprivacy.errors import (
    BackendError,
    BudgetExhaustedError,
    BusyError,
    ChargedFailureError,
    ConfigError,
    DataError,
    GeneratorUnavailableError,
    VerificationError,
)

_SALT = re.compile(r"[0-9a-f]{64}")  # a receipt's salt: 256 bits, lowercase hex

__all__ = ["Client", "load_receipts", "load_unanswered"]


class Client:
    """``Client(base_url, key).retrieve(query)``; ``receipts_dir`` keeps the receipts.

    ``provider_key``: the provider's Ed25519 public key (hex), known in advance; default:
    the key in each window's published commitments."""

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        receipts_dir: str | Path | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        provider_key: str | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"The service URL must start with http:// or https://; got {base_url!r}."
            )
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout,
            transport=transport,
        )
        self.receipts_dir = Path(receipts_dir) if receipts_dir is not None else None
        if self.receipts_dir is not None:
            self.receipts_dir.mkdir(parents=True, exist_ok=True)
        self.provider_key = provider_key
        self._commitments: dict[str, Commitments] = {}  # window id -> checked commitments
        self._account: str | None = None  # this key's account name, from its first receipt
        self._aliases: dict[str, str] = {}  # window id -> this key's pseudonym there
        self._window: str | None = None  # the window of the last receipt kept
        self._seqs: dict[tuple[str, str], set[int]] = {}  # (window id, account) -> j's kept
        self._nonces: dict[str, str] = {}  # idempotency key -> the nonce its request sent
        self._keyed: dict[str, str] = {}  # idempotency key -> its receipt's signature
        self._lock = threading.Lock()
        for r in self._kept():  # of every account that shares the folder
            self._note(r)

    def __repr__(self) -> str:  # never the key
        return f"Client({self.base_url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _post(
        self, path: str, body: dict[str, Any], query: str, key: str | None = None
    ) -> dict[str, Any]:
        # the noise input's n: the provider learns it only with the request, so it could
        # not have chosen its window seed to favour this query (a request sent again under
        # its idempotency key is the same request: the same n)
        nonce = (
            self._nonces.setdefault(key, secrets.token_hex(16)) if key else secrets.token_hex(16)
        )
        pinned = self._pin()
        headers = {"Idempotency-Key": key} if key else None
        try:
            r = self._http.post(path, json={**body, "nonce": nonce}, headers=headers)
        except httpx.TransportError:
            # sent, but no answer came back: a record may have been appended whose
            # receipt never arrived
            self._unanswered(query)
            raise
        if r.status_code == 429:
            raise BudgetExhaustedError(_detail(r))
        if r.status_code in (500, 502):  # failed after retrieval: charged like an answer
            paid = _json(r).get("receipt")
            if isinstance(paid, dict):  # its record was appended: keep its receipt
                self._keep(paid, query, nonce=nonce, pinned=pinned, key=key)
            else:  # a storage error may follow an append that took effect
                self._unanswered(query)
            if r.status_code == 500:
                raise BackendError(f"{path}: HTTP 500: {_detail(r)}")
            raise ChargedFailureError(f"{path}: HTTP 502: {_detail(r)}", receipt=paid)
        if r.status_code == 503 and "retry-after" in r.headers:  # busy: nothing spent
            raise BusyError(f"{path}: HTTP 503: {_detail(r)}")
        if r.status_code == 503:  # the service's generator was never reached: free
            raise GeneratorUnavailableError(f"{path}: HTTP 503: {_detail(r)}")
        if r.status_code >= 400:
            raise BackendError(f"{path}: HTTP {r.status_code}: {_detail(r)}")
        out: dict[str, Any] = r.json()
        receipt = out.get("receipt") or out.get("ragprivacy", {}).get("receipt")
        if receipt is not None:
            answer = out.get("answer")
            self._keep(
                receipt,
                query,
                out.get("documents"),
                nonce=nonce,
                pinned=pinned,
                answer=answer if isinstance(answer, str) else None,
                key=key,
            )
        return out

    # ------------------------------------------------------------------ receipts
    def check_receipt(
        self,
        receipt: dict[str, Any],
        query: str,
        documents: list[dict[str, Any]] | None = None,
        *,
        nonce: str | None = None,
        answer: str | None = None,
    ) -> Receipt:
        """``receipt`` checked as only the account can: signed by the provider, issued
        under the commitments its window publishes, H(q) of ``query``, a committed
        pseudonym that opens to the same account name as this key's earlier receipts (and
        is the same pseudonym within a window), a query number j that none of the account's
        receipts of the window kept before has (answers may arrive out of order, and
        the account may query from several clients; a record the provider put in its
        name FAILs verification, since no receipt names it), and the served
        ``documents`` ({id, text}, in order) those the receipt commits to: their ids, and
        their texts' SHA-256 where the index committed one (a text served under an id it
        was never committed with), and the ``nonce`` this client sent (the noise's n).
        A voting tenant's receipt names the ``answer`` the service sent, with no
        documents, and H(answer) under the account's committed tenant.
        Raises :class:`~ragprivacy.errors.VerificationError` naming what failed."""
        try:
            r = Receipt.from_dict(receipt)
        except DataError as exc:
            raise VerificationError(f"The service sent a malformed receipt: {exc}") from None
        com = self._window_commitments(r.window_id)
        key = self.provider_key or com.provider_key
        if not verify_signature(key, r.message(), r.signature):
            raise VerificationError("The receipt is not signed by the provider's key.")
        if r.commitments != com.digest():
            raise VerificationError(
                f"The receipt names other commitments than those window {r.window_id!r} "
                "publishes: the provider changed its commitments."
            )
        if not _SALT.fullmatch(r.salt):
            raise VerificationError(
                "The receipt carries no 256-bit salt: it cannot open its public record."
            )
        if r.query_hash != query_hash(query):
            raise VerificationError(
                "The receipt's H(q) is not the hash of the query this client sent: the "
                "provider answered (and recorded) another query text."
            )
        if not r.opens_holder() or r.account not in com.accounts:
            raise VerificationError(
                "The receipt's account is not its holder's committed pseudonym in window "
                f"{r.window_id!r}."
            )
        if (self._account is not None and r.holder != self._account) or r.account != (
            self._aliases.get(r.window_id, r.account)
        ):
            raise VerificationError(
                "The receipt names another account than this key's earlier receipts."
            )
        if r.seq < 1 or r.seq in self._seqs.get((r.window_id, r.account), set()):
            raise VerificationError(
                f"The receipt's query number j = {r.seq} is one the account's earlier "
                f"receipts of window {r.window_id!r} already have (a replay)."
            )
        if nonce is not None and r.nonce != nonce:
            raise VerificationError(
                "The receipt's nonce is not the one this client sent: the noise was not "
                "derived from the client's randomness."
            )
        if r.answer is not None or com.accounts.get(r.account) in com.voting:
            _check_voted(r, com, answer, documents)
        elif documents is not None:
            _check_documents(r, documents)
        return r

    def _pin(self) -> frozenset[str]:
        """Fetch (and check) the commitments of every open window before a request is
        sent, so that a receipt can only be checked against commitments published before
        the provider saw the query; returns the windows pinned so far."""
        r = self._http.get("/v1/audit/windows")
        if r.status_code < 400:
            for w in r.json():
                if isinstance(w, dict) and w.get("status") == "open":
                    self._window_commitments(str(w.get("window_id")))
        return frozenset(self._commitments)

    def _window_commitments(self, window_id: str) -> Commitments:
        """The published commitments of ``window_id``, fetched once and their signature
        checked (under ``provider_key`` when given)."""
        if window_id not in self._commitments:
            r = self._http.get(f"/v1/audit/windows/{window_id}/commitments")
            if r.status_code >= 400:
                raise BackendError(
                    f"/v1/audit/windows/{window_id}/commitments: HTTP {r.status_code}: {_detail(r)}"
                )
            try:
                com = Commitments.from_dict(r.json())
            except (DataError, ValueError, TypeError, KeyError):
                raise VerificationError(
                    f"Window {window_id!r}'s published commitments do not parse."
                ) from None
            if not com.verify(self.provider_key):
                raise VerificationError(
                    f"Window {window_id!r}'s commitments are not signed by the provider's key."
                )
            self._commitments[window_id] = com
        return self._commitments[window_id]

    def _keep(
        self,
        receipt: dict[str, Any],
        query: str,
        documents: list[dict[str, Any]] | None = None,
        *,
        nonce: str | None = None,
        pinned: frozenset[str] | None = None,
        answer: str | None = None,
        key: str | None = None,
    ) -> None:
        """Check ``receipt`` and keep it; a receipt that fails is kept apart as evidence
        (``rejected/``, which the verifier does not read) and the call raises. A check
        that could not run (the commitments could not be fetched) logs the request as
        unanswered, so that its record does not count as one the account never asked
        for, and raises."""
        with self._lock:  # one check and one append at a time: j's are compared in order
            if key is not None and self._keyed.get(key) == receipt.get("signature"):
                return  # the request sent again under its key: its receipt, kept already
            try:
                window = receipt.get("window_id")
                if pinned is not None and window not in pinned:
                    # its commitments were not published before the query was sent: the
                    # provider could have chosen them after seeing it (a window opened
                    # between the pin and the request is the honest case: retry)
                    self._unanswered(query, window)
                    raise VerificationError(
                        f"Window {window!r}'s commitments were not published before this "
                        "request was sent; its receipt cannot be bound to them. Retry."
                    )
                checked = self.check_receipt(receipt, query, documents, nonce=nonce, answer=answer)
            except VerificationError:
                self._append("rejected/receipts.jsonl", receipt)
                raise
            except Exception:
                self._unanswered(query, receipt.get("window_id"))
                raise
            self._account = checked.holder
            self._aliases[checked.window_id] = checked.account
            self._note(checked)
            if key is not None:
                self._keyed[key] = checked.signature
            self._append("receipts.jsonl", receipt)

    def _unanswered(self, query: str, window_id: object = None) -> None:
        """Log a request that may have left a record without a receipt in hand: (window,
        account, H(q)) as far as the client knows them (None: any)."""
        window = window_id if isinstance(window_id, str) else self._window
        self._append(
            "unanswered/requests.jsonl",
            {
                "window_id": window,
                "account": self._aliases.get(window) if isinstance(window, str) else None,
                "query_hash": query_hash(query),
            },
        )

    def _note(self, r: Receipt) -> None:
        self._seqs.setdefault((r.window_id, r.account), set()).add(r.seq)
        self._window = r.window_id

    def _kept(self) -> list[Receipt]:
        """The receipts this client kept before (a client restarted mid-window goes on
        checking j from there). Lines of an earlier format are skipped: they bind no
        commitments and no verifier of this version takes them."""
        if self.receipts_dir is None or not (self.receipts_dir / "receipts.jsonl").exists():
            return []
        out = []
        for row in load_receipts(self.receipts_dir):
            try:
                out.append(Receipt.from_dict(row))
            except DataError:
                continue
        return out

    def _append(self, name: str, receipt: dict[str, Any]) -> None:
        if self.receipts_dir is None:
            return
        path = self.receipts_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(receipt, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    # ------------------------------------------------------------------ calls
    def retrieve(
        self, query: str, *, k: int | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """The private top-K documents, privacy spent, budget left and the receipt. Call
        again with the same ``idempotency_key`` after a timeout or a lost connection: the
        service answers the request once, charges it once, and sends the same answer."""
        body = {"query": query, **({"k": k} if k else {})}
        return self._post("/v1/retrieve", body, query, idempotency_key)

    def answer(
        self, query: str, *, k: int | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """The RAG answer (``answer``) with the same fields (``idempotency_key`` as for
        :meth:`retrieve`)."""
        body = {"query": query, **({"k": k} if k else {})}
        return self._post("/v1/answer", body, query, idempotency_key)

    def budget(self) -> dict[str, Any]:
        r = self._http.get("/v1/budget")
        if r.status_code >= 400:
            raise BackendError(f"/v1/budget: HTTP {r.status_code}: {_detail(r)}")
        out: dict[str, Any] = r.json()
        return out


def _check_voted(
    r: Receipt, com: Commitments, answer: str | None, documents: list[dict[str, Any]] | None
) -> None:
    """A voted answer's receipt: for the account's committed voting tenant, no documents,
    the answer the service sent, and H(answer) of it."""
    tenant = com.accounts.get(r.account)
    if tenant not in com.voting or r.answer is None:
        raise VerificationError(
            "The receipt does not match the account's committed tenant: a voted answer's "
            "receipt for a retrieval tenant, or a retrieval's for a voting tenant."
        )
    if r.documents or documents:
        raise VerificationError("A voted answer's receipt or response names documents.")
    if answer is not None and r.answer != answer:
        raise VerificationError("The receipt names another answer than the one the service sent.")
    if r.topk_hash != r.opened_topk(tenant):
        raise VerificationError("The receipt's H(answer) is not the hash of its answer.")


def _check_documents(r: Receipt, documents: list[dict[str, Any]]) -> None:
    """The served documents are the receipt's first ones, with the committed texts."""
    if len(documents) > len(r.documents):
        raise VerificationError("The service sent more documents than its receipt names.")
    for served, (_, doc_id, content) in zip(documents, r.documents):
        if not isinstance(served, dict) or served.get("id") != doc_id:
            raise VerificationError(
                "A served document's id is not the one the receipt names at its place."
            )
        text = served.get("text")
        if content and (
            not isinstance(text, str) or hashlib.sha256(text.encode("utf-8")).hexdigest() != content
        ):
            raise VerificationError(
                f"The text served as document {doc_id!r} is not the text the window's "
                "index committed for it."
            )


def _json(r: httpx.Response) -> dict[str, Any]:
    try:
        body = r.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _detail(r: httpx.Response) -> str:
    try:
        return str(r.json().get("detail", r.text))
    except ValueError:
        return r.text[:200]


def load_unanswered(
    directory: str | Path, window_id: str | None = None
) -> list[tuple[str | None, str]]:
    """(account or None, H(q)) of the requests a :class:`Client` sent but got no answer to
    (``directory/unanswered/*.jsonl``; none when the folder is missing): the verifier's
    ``unanswered`` evidence, for window ``window_id`` (entries of other windows are left
    out; an entry that names no window counts for every window)."""
    d = Path(directory) / "unanswered"
    out: list[tuple[str | None, str]] = []
    for n, row in enumerate(load_receipts(d) if d.is_dir() else [], 1):
        if not isinstance(row.get("query_hash"), str):
            raise ConfigError(f"{d}: entry {n} has no query_hash.")
        window = row.get("window_id")
        if window_id is not None and isinstance(window, str) and window != window_id:
            continue
        account = row.get("account")
        out.append((account if isinstance(account, str) else None, row["query_hash"]))
    return out


def load_receipts(directory: str | Path) -> list[dict[str, Any]]:
    """The receipts saved in ``directory`` (every ``*.jsonl`` file, one receipt a line)."""
    d = Path(directory)
    if not d.is_dir():
        raise ConfigError(f"No receipts directory {d}.")
    out = []
    for path in sorted(d.glob("*.jsonl")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    raise ConfigError(f"{path}:{n} is not a JSON receipt.") from None
    return out

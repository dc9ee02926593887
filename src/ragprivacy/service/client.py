"""An account's HTTP client (httpx) that keeps every receipt it gets (collusion paper M5).

An honest account saves the signed receipt of each answer (``receipts_dir``, one JSON line
per receipt in ``receipts.jsonl``); at the end of a window it hands them to the verifier
(``ragprivacy audit verify --url URL --receipts DIR``), which checks that each is in the
final ledger, unchanged. The client talks only to the ``base_url`` it was given.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx

from ragprivacy.errors import (
    BackendError,
    BudgetExhaustedError,
    BusyError,
    ChargedFailureError,
    ConfigError,
    GeneratorUnavailableError,
)

__all__ = ["Client", "load_receipts"]


class Client:
    """``Client(base_url, key).retrieve(query)``; ``receipts_dir`` keeps the receipts."""

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        receipts_dir: str | Path | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
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

    def __repr__(self) -> str:  # never the key
        return f"Client({self.base_url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self._http.post(path, json=body)
        if r.status_code == 429:
            raise BudgetExhaustedError(_detail(r))
        if r.status_code == 502:  # failed after retrieval: charged like an answer
            raise ChargedFailureError(f"{path}: HTTP 502: {_detail(r)}")
        if r.status_code == 503 and "retry-after" in r.headers:  # busy: nothing spent
            raise BusyError(f"{path}: HTTP 503: {_detail(r)}")
        if r.status_code == 503:  # the service's generator was never reached: free
            raise GeneratorUnavailableError(f"{path}: HTTP 503: {_detail(r)}")
        if r.status_code >= 400:
            raise BackendError(f"{path}: HTTP {r.status_code}: {_detail(r)}")
        out: dict[str, Any] = r.json()
        receipt = out.get("receipt") or out.get("ragprivacy", {}).get("receipt")
        if receipt is not None:
            self._keep(receipt)
        return out

    def _keep(self, receipt: dict[str, Any]) -> None:
        if self.receipts_dir is None:
            return
        with open(self.receipts_dir / "receipts.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(receipt, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def retrieve(self, query: str, *, k: int | None = None) -> dict[str, Any]:
        """The private top-K documents, privacy spent, budget left and the receipt."""
        return self._post("/v1/retrieve", {"query": query, **({"k": k} if k else {})})

    def answer(self, query: str, *, k: int | None = None) -> dict[str, Any]:
        """The RAG answer (``answer``) with the same fields."""
        return self._post("/v1/answer", {"query": query, **({"k": k} if k else {})})

    def budget(self) -> dict[str, Any]:
        r = self._http.get("/v1/budget")
        if r.status_code >= 400:
            raise BackendError(f"/v1/budget: HTTP {r.status_code}: {_detail(r)}")
        out: dict[str, Any] = r.json()
        return out


def _detail(r: httpx.Response) -> str:
    try:
        return str(r.json().get("detail", r.text))
    except ValueError:
        return r.text[:200]


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

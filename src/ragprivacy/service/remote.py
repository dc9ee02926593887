"""Fetching a window from a running service, for a verifier outside it.

``fetch_window(url)`` reads the public audit endpoints — the signed commitments, every
ledger record, the signed tree head and the coalition claim — of the newest closed window
(or the one named) and returns the :class:`~ragprivacy.audit.PublicTranscript` the
verifier checks, with the receipts honest accounts saved (:class:`~ragprivacy.service.Client`)
and, for re-execution, the auditor package the admin exported. The verifier trusts none
of what the service says: it checks signatures, the Merkle root and every record.
"""

from __future__ import annotations

from typing import Any

import httpx

from ragprivacy.audit import CoalitionClaim, Commitments, PublicTranscript, SignedTreeHead
from ragprivacy.errors import BackendError, ConfigError

__all__ = ["fetch_window"]


def fetch_window(
    base_url: str,
    window_id: str | None = None,
    *,
    live: bool = False,
    transport: httpx.BaseTransport | None = None,
) -> PublicTranscript:
    """The public transcript of a closed window of the service at ``base_url`` (default:
    the newest); ``live=True`` fetches the open window as it stands, with no coalition
    claim (the verifier then runs the checks that need none)."""
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"--url must start with http:// or https://; got {base_url!r}.")
    with httpx.Client(base_url=base_url.rstrip("/"), timeout=60.0, transport=transport) as http:

        def get(path: str, **params: Any) -> Any:
            try:
                r = http.get(path, params=params or None)
            except httpx.HTTPError as exc:
                raise BackendError(f"Cannot reach {base_url}: {type(exc).__name__}.") from None
            if r.status_code == 404:
                raise ConfigError(f"{path}: not found on the service.")
            if r.status_code >= 400:
                raise BackendError(f"{path}: HTTP {r.status_code}.")
            return r.json()

        windows = get("/v1/audit/windows")
        wanted = "open" if live else "closed"
        if window_id is None:
            ids = [w["window_id"] for w in windows if w["status"] == wanted]
            if not ids:
                raise ConfigError(f"The service has no {wanted} window to verify.")
            window_id = ids[-1]
        status = {w["window_id"]: w["status"] for w in windows}.get(window_id)
        if status is None:
            raise ConfigError(f"The service has no window {window_id!r}.")
        if status == "open" and not live:
            raise ConfigError(
                f"Window {window_id!r} is still open: its coalition claim is certified at "
                "close ('ragprivacy admin window close'); verify it then, or check it as it "
                "stands with --live."
            )
        if status == "closed" and live:
            raise ConfigError(f"Window {window_id!r} is closed; verify it without --live.")
        base = f"/v1/audit/windows/{window_id}"
        # The tree head before the records: a live ledger may grow in between, and the
        # verifier checks the records up to the signed head's size.
        head = SignedTreeHead.from_dict(get(f"{base}/tree-head"))
        records = [r.encode() for r in get(f"{base}/records", end=head.size)]
        return PublicTranscript(
            commitments=Commitments.from_dict(get(f"{base}/commitments")),
            records=records,
            tree_head=head,
            coalition=None if live else CoalitionClaim.from_dict(get(f"{base}/coalition")),
        )

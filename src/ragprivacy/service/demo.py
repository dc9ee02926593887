"""The service section of ``make demo``: a real server on a loopback port, two accounts, an
outside verifier.

A fresh state (two tenants of synthetic documents, an account in each), a window opened,
``uvicorn`` serving the app on 127.0.0.1 (a free port) in a background thread, each
account querying over HTTP with the :class:`~ragprivacy.service.Client` (which keeps the
receipts), the window closed, and the verifier run on what the public endpoints serve, the
receipts and the exported auditor package. ``service.md`` in the output directory says
what happened.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["run_service_demo"]


def _bound_socket() -> socket.socket:
    """A socket bound to a free port of 127.0.0.1, handed to the server as it is (a port
    looked up and bound later could be taken in between by another process)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def run_service_demo(out: str | Path, *, queries: int = 5) -> dict[str, Any]:
    """Run the section in ``out/service`` and return its summary."""
    import uvicorn

    from ragprivacy.audit import Receipt, Verifier, load_window
    from ragprivacy.corpus import synthesize
    from ragprivacy.service.app import create_app
    from ragprivacy.service.client import Client, load_receipts
    from ragprivacy.service.provider import close_window, export_auditor, open_window
    from ragprivacy.service.remote import fetch_window
    from ragprivacy.service.state import ServiceState

    root = Path(out) / "service"
    root.mkdir(parents=True, exist_ok=True)
    state = ServiceState(root / f"state-{time.time_ns()}")
    for tenant, kind in (("clinic", "medical"), ("firm", "legal")):
        state.create_tenant(tenant, k=3)
        state.add_documents(tenant, list(synthesize(kind, n=200, seed=7)))
    state.create_account("clinic", "alice", epsilon=4.0, delta=1e-6, rate_limit=20)
    state.create_account("firm", "carol", epsilon=2.0, delta=1e-6, rate_limit=20)
    keys = {a: state.create_key(a).token for a in ("alice", "carol")}
    window = open_window(state)

    sock = _bound_socket()
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(create_app(state.directory), host="127.0.0.1", port=port, log_level="error")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    while not server.started:
        if not thread.is_alive() or time.monotonic() - started > 120:
            raise RuntimeError("the demo service did not start")
        time.sleep(0.05)
    asked = {
        "alice": ["who was prescribed metformin?", "which patient has asthma?"],
        "carol": ["termination clause", "who signed the lease?"],
    }
    seen: dict[str, Any] = {}
    try:
        for account, texts in asked.items():
            with Client(url, keys[account], receipts_dir=root / "receipts") as c:
                for i in range(queries):
                    got = c.retrieve(texts[i % len(texts)])
                seen[account] = {"budget": got["budget"], "privacy": got["privacy"]}
        close_window(state)
        auditor = export_auditor(state, window.window_id, root / "auditor")
        transcript = fetch_window(url, window.window_id)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    receipts = [Receipt.from_dict(r) for r in load_receipts(root / "receipts")]
    verdict = Verifier().verify(transcript, receipts, load_window(auditor)[2])
    summary = {
        "url": url,
        "window": window.window_id,
        "records": len(transcript.records),
        "receipts": len(receipts),
        "verdict": "PASS" if verdict.passed else "FAIL",
        "epsilon_audit": verdict.epsilon_audit,
        "failed_check": verdict.failed_check,
        "accounts": seen,
    }
    lines = [
        "# The service",
        "",
        f"A server on {url} (loopback) answered {len(transcript.records)} queries of two "
        f"accounts in window {window.window_id}; the accounts kept {len(receipts)} receipts.",
        "",
        "| account | used / r | ε so far (at δ) | ε_acc |",
        "|---|---|---|---|",
    ]
    for account, info in seen.items():
        b, p = info["budget"], info["privacy"]
        lines.append(
            f"| {account} | {b['used']} / {b['rate_limit']} | {p['cumulative_epsilon']:.3g} "
            f"(δ = {p['delta']:g}) | {b['epsilon_acc']:g} |"
        )
    outcome = (
        f"PASS, ε_audit = {verdict.epsilon_audit:.3g}"
        if verdict.passed
        else f"FAIL at {verdict.failed_check}"
    )
    lines += ["", f"The outside verifier: **{outcome}**."]
    (root / "service.md").write_text("\n".join(lines) + "\n")
    return summary

"""The operator's status page (``GET /operator``, with the operator key): one
self-contained, read-only HTML page — no script, nothing fetched — of what an operator
checks: the open window (its age, its ledger, the verifier's live check of it), each
tenant, each account's use against its limit, the window's records over time, failures
after retrieval and, with ``--metrics``, refusals by reason.

It shows account and tenant names, which the public endpoints do not need to: the key
that opens it is the operator's alone (``admin operator-key``), never an account's.
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ragprivacy.audit import PublicTranscript, QueryRecord, Verifier
from ragprivacy.errors import RagPrivacyError
from ragprivacy.service.provider import ServiceProvider, window_status

__all__ = ["render_operator_page"]

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#1c2833;line-height:1.45}h1{font-size:1.5em}h2{margin-top:1.6em;
border-bottom:1px solid #d5d8dc}table{border-collapse:collapse;width:100%;font-size:.9em}
th,td{border:1px solid #d5d8dc;padding:.3em .5em;text-align:left}th{background:#eaecee}
td.num{text-align:right}.ok{color:#1e8449;font-weight:600}.bad{color:#b03a2e;font-weight:600}
.bar{background:#d6eaf8;height:.8em;display:inline-block}.note{color:#566573;font-size:.9em}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _hours(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def _records_svg(stamps: Sequence[int], opened_ns: int, now: float) -> str:
    """Records per bucket since the window opened, as bars (up to 48 buckets)."""
    span = max(now - opened_ns / 1e9, 1.0)
    buckets = 48 if span >= 48 * 60 else max(1, int(span // 60) or 1)
    width = span / buckets
    counts = [0] * buckets
    for ts in stamps:
        i = int((ts / 1e9 - opened_ns / 1e9) / width)
        counts[min(max(i, 0), buckets - 1)] += 1
    top = max(counts) or 1
    w, h = 720, 160
    bw = w / buckets
    bars = "".join(
        f'<rect x="{i * bw + 1:.1f}" y="{h - 20 - c / top * (h - 40):.1f}" '
        f'width="{max(bw - 2, 1):.1f}" height="{c / top * (h - 40):.1f}" fill="#2e86c1">'
        f"<title>{c} records</title></rect>"
        for i, c in enumerate(counts)
    )
    axis = (
        f'<line x1="0" y1="{h - 20}" x2="{w}" y2="{h - 20}" stroke="#566573"/>'
        f'<text x="0" y="{h - 4}" font-size="11">opened</text>'
        f'<text x="{w}" y="{h - 4}" font-size="11" text-anchor="end">now</text>'
        f'<text x="0" y="12" font-size="11">{top} records</text>'
    )
    return (
        f'<figure id=records><svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
        f'role="img" aria-label="records over time">{axis}{bars}</svg><figcaption>Records '
        f"of the open window per {_hours(width)}, from their ledger timestamps."
        "</figcaption></figure>"
    )


def _live_check(provider: ServiceProvider) -> str:
    """The verifier's checks of the open window as it stands (commitments, ledger,
    account policies; no receipts, no seed): LIVE OK, or the checks that fail."""
    try:
        window_id = provider.window_id()
        window = provider.state.window(window_id)
        from ragprivacy.audit import Commitments

        head = provider.tree_head(window_id)
        records = [r.encode() for r in provider.records(window_id, 0, head.size)]
        transcript = PublicTranscript(
            Commitments.from_dict(window.commitments), records, head, None
        )
        verdict = Verifier().verify(transcript)
    except RagPrivacyError as exc:
        return f"<p class=bad>Not checked: {_e(str(exc).splitlines()[0])}</p>"
    if verdict.live_ok:
        return (
            "<p class=ok>LIVE OK</p><p class=note>Commitments, ledger and account policies "
            f"hold for all {verdict.records} records so far (receipts and re-execution come "
            "with the accounts and the auditor, at close).</p>"
        )
    failed = "".join(f"<li>{_e(f.check)}: {_e(f.detail)}</li>" for f in verdict.failures[:20])
    return f"<p class=bad>FAIL</p><ul>{failed}</ul>"


def render_operator_page(
    provider: ServiceProvider, refusals: Mapping[str, float] | None = None
) -> str:
    """The page (module docstring); ``refusals``: counts by reason, when metrics are on."""
    state = provider.state
    now = time.time()
    try:
        status: dict[str, Any] | None = window_status(state)
    except RagPrivacyError:
        status = None
    parts = [f"<h1>ragprivacy — operator status</h1><p class=note>{_e(state)} · generated "
             f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(now))}</p>"]  # fmt: skip
    if status is None:
        parts.append("<section id=window><h2>Window</h2><p class=bad>No window is open: "
                     "every account is refused until one opens.</p></section>")  # fmt: skip
    else:
        window = state.window(status["window_id"])
        opened = int(window.commitments["published_at"])
        stamps = [QueryRecord.from_bytes(r.encode()).ts
                  for r in provider.records(status["window_id"], 0, None)]  # fmt: skip
        parts.append(
            f"<section id=window><h2>Window {_e(status['window_id'])}</h2><p>Open for "
            f"{_hours(status['age_s'])}, {status['records']} records in its ledger.</p>"
            f"<h3>Live check</h3>{_live_check(provider)}"
            f"{_records_svg(stamps, opened, now)}</section>"
        )
        rows = []
        for account, use in status["accounts"].items():
            limit, used = int(use["limit"]), int(use["used"])
            share = used / limit if limit else 1.0
            failures = state.failures(status["window_id"], account)
            rows.append(
                f"<tr><th scope=row>{_e(account)}</th><td>{_e(use['tenant'])}</td>"
                f"<td class=num>{used} of {limit}</td><td><span class=bar style="
                f'"width:{share * 100:.0f}%"></span></td><td class=num>'
                f"{failures['charged']} charged, {failures['free']} free</td></tr>"
            )
        parts.append(
            "<section id=accounts><h2>Accounts</h2><table id=account-use><thead><tr>"
            "<th scope=col>account</th><th scope=col>tenant</th><th scope=col>used</th>"
            "<th scope=col>of its limit</th><th scope=col>failures after retrieval</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
        )
    tenants = "".join(
        f"<tr><th scope=row>{_e(t)}</th><td>{_e(info['mode'])}</td><td class=num>"
        f"{info['documents']}</td><td class=num>{info['k']}</td></tr>"
        for t, info in state.tenants().items()
    )
    parts.append(
        "<section id=tenants><h2>Tenants</h2><table id=tenant-list><thead><tr>"
        "<th scope=col>tenant</th><th scope=col>mode</th><th scope=col>documents</th>"
        f"<th scope=col>K</th></tr></thead><tbody>{tenants}</tbody></table></section>"
    )
    if refusals is not None:
        listed = (
            "".join(
                f"<tr><th scope=row>{_e(reason)}</th><td class=num>{count:.0f}</td></tr>"
                for reason, count in sorted(refusals.items())
            )
            or "<tr><th scope=row>none yet</th><td class=num>0</td></tr>"
        )
        parts.append(
            "<section id=refusals><h2>Refusals since this worker started</h2><table "
            "id=refusal-list><thead><tr><th scope=col>reason</th><th scope=col>count</th>"
            f"</tr></thead><tbody>{listed}</tbody></table></section>"
        )
    body = "".join(parts)
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><link rel=icon "
        'href="data:,"><meta name=viewport content="width=device-width,initial-scale=1">'
        "<title>ragprivacy operator status"
        f"</title><style>{_CSS}</style></head><body>{body}</body></html>"
    )

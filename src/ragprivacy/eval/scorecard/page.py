"""``index.html``: the scorecard as one self-contained page (inline CSS and SVG, no
script, no request at view time; it reads the same from disk as from a server).

Order: the verdict; the attacks × defenses matrix (ε spent, the AUC bound that ε implies,
utility and every AUC and extraction rate with its 95 % interval; colour repeats what
the text says, never replaces it); the privacy–utility frontier; ROC curves on log-FPR
axes; extraction examples with PII masked; the settings to reproduce the run.
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path
from typing import Any

import yaml

from ragprivacy.eval.scorecard.figures import frontier_svg, roc_svg
from ragprivacy.eval.scorecard.summary import Estimate, Scorecard, ScorecardRow

__all__ = ["render_page", "write_scorecard"]

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1180px;margin:2em auto;
padding:0 1em;color:#1c2833;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #d5d8dc}
.meta{color:#566573;font-size:.9em}.note{font-size:.9em;color:#424949}
.verdict{font-size:1.08em;background:#f4f6f7;border-left:5px solid #2c3e50;padding:.8em 1em}
.scroll{overflow-x:auto}table{border-collapse:collapse;margin:.6em 0;font-size:.88em}
#matrix{width:100%;font-size:.82em}#matrix td.num{white-space:normal}
#matrix th[scope=row]{position:sticky;left:0;background:#fff;z-index:1}
caption{caption-side:top;text-align:left;font-size:.92em;color:#424949;padding:.3em 0}
th,td{border:1px solid #d5d8dc;padding:.3em .5em;vertical-align:top}
th{background:#eaecee;text-align:left}td.num{text-align:right;white-space:nowrap}
td.high{background:#f5b7b1}td.mid{background:#fad7a0}td.low{background:#d5f5e3}
figure{margin:1em 0}figure svg{max-width:100%;height:auto}
figcaption{font-size:.88em;color:#424949}
pre{background:#f4f6f7;padding:.8em;overflow-x:auto;font-size:.82em}
.example{font-family:ui-monospace,monospace;font-size:.85em;white-space:pre-wrap}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _code(text: str) -> str:
    """``text`` escaped, its `backticked` names set as code (the verdict's names)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


def _severity(low: float | None, value: float) -> str:
    """The CSS class of an AUC: ``high`` (≥ 0.8), ``mid`` (interval above 0.5), ``low``."""
    above = (low if low is not None else value) > 0.5
    if above and value >= 0.8:
        return "high"
    return "mid" if above else "low"


def _auc_cell(row: ScorecardRow, attack: str) -> str:
    if attack in row.skipped:
        return f'<td title="{_e(row.skipped[attack])}">n/a</td>'
    est = row.auc.get(attack)
    if est is None:
        return "<td>–</td>"
    return f'<td class="num {_severity(est.low, est.value)}">{_e(est.text())}</td>'


def _rate_cell(row: ScorecardRow, mode: str) -> str:
    x = row.extraction.get(mode)
    if x is None:
        return "<td>–</td>"
    if x.total == 0:
        return "<td>– (no PII of the asked kinds found)</td>"
    r = x.rate
    cls = "high" if (r.low or 0.0) > 0.2 else ("mid" if (r.low or 0.0) > 0.0 else "low")
    return (
        f'<td class="num {cls}">{x.leaked}/{x.total} = {r.value:.0%} '
        f"({(r.low or 0):.0%}–{(r.high or 0):.0%})</td>"
    )


def _epsilon(row: ScorecardRow) -> str:
    if row.epsilon is None:
        return "–"
    if math.isinf(row.epsilon):
        return "∞ (no guarantee)"
    return f"{row.epsilon:.3g}" + (" per target" if row.per_target else "")


def _bound(row: ScorecardRow) -> str:
    if row.auc_bound is not None:
        return f"{row.auc_bound:.3f}"
    return _e(row.bound_note or "–")


def _utility(u: Estimate | None) -> str:
    return "–" if u is None else _e(u.text(3))


def _matrix(card: Scorecard) -> str:
    heads = [
        "system / defense",
        "ε spent",
        "AUC bound from ε",
        f"utility ({_e(card.utility_metric or '–')}, 95 % CI)",
        "answered",
        *[f"{_e(a)} AUC" for a in card.attacks],
        *[f"{_e(m)} extraction" for m in card.modes],
    ]
    body = []
    for r in card.rows:
        answered = "–" if r.answered is None else f"{r.answered:.0%}"
        cells = [
            f"<th scope=row>{_e(r.label)}</th>",
            f'<td class="num">{_e(_epsilon(r))}</td>',
            f"<td>{_bound(r)}</td>",
            f'<td class="num">{_utility(r.utility)}</td>',
            f'<td class="num">{answered}</td>',
            *[_auc_cell(r, a) for a in card.attacks],
            *[_rate_cell(r, m) for m in card.modes],
        ]
        body.append("<tr>" + "".join(cells) + "</tr>")
    base = card.baseline
    sample = (
        f"{base.members} members and {base.non_members} non-members per attack"
        if base is not None
        else ""
    )
    no_ret = (
        f" The generator alone, with no retrieval, scores {card.no_retrieval:.3f}."
        if card.no_retrieval is not None
        else ""
    )
    caption = (
        f"Membership AUC of each attack (columns) against each system (rows) on {sample}, "
        "95 % intervals; red: AUC ≥ 0.8 and above chance, orange: above chance, green: "
        "not distinguishable from 0.5. Extraction: PII items recovered (targeted), "
        "prompts answered with a copy of a stored document (untargeted, ROUGE-L > 0.5) and "
        "documents of the corpus an adaptive crawl of as many queries reproduces "
        "(ragcrawler), Wilson 95 % intervals. <em>ε spent</em>: what one target's test spent (each "
        "target meets a fresh account); <em>AUC bound</em>: the largest AUC any attack can "
        "reach at that ε (none where ε covers only the retrieval: the generated text is "
        "not covered, so no bound follows); <em>utility</em>: the system's score on benign "
        "queries; "
        f"<em>answered</em>: the share of attack queries answered with any text.{no_ret} "
        "A low AUC beside a utility no better than no retrieval is a system that "
        "released nothing, not a good defense."
    )
    return (
        f"<p class=note>{caption}</p><div class=scroll><table id=matrix><caption>Membership "
        "AUC, extraction rates, privacy spent and utility</caption><thead><tr>"
        + "".join(f"<th scope=col>{h}</th>" for h in heads)
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table></div>"
    )


def _examples(card: Scorecard) -> str:
    base = card.baseline
    rows = []
    for r in [base] if base is not None else []:
        for mode, x in r.extraction.items():
            for ex in x.examples:
                fact = (
                    f"{ex['kind']} recovered"
                    if "kind" in ex
                    else f"ROUGE-L {float(ex['rouge_l']):.2f}"
                    if "rouge_l" in ex
                    else "text found in one stored document only"
                )
                rows.append(
                    f"<tr><td>{_e(r.label)}</td><td>{_e(mode)}</td><td>{_e(fact)}</td>"
                    f"<td class=example>{_e(ex['prompt'])}</td>"
                    f"<td class=example>{_e(ex['answer'])}</td></tr>"
                )
    if not rows:
        return "<p>No extraction attack succeeded against the undefended system.</p>"
    return (
        "<table id=examples><caption>Leaking prompts and answers, with every annotated "
        "PII value and what the regex detector finds replaced by its kind ([NAME], "
        "[PHONE], …): the page shows that data leaked, not the data.</caption><thead><tr>"
        "<th scope=col>system</th><th scope=col>mode</th><th scope=col>what leaked</th>"
        "<th scope=col>prompt</th><th scope=col>answer</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _outcomes(card: Scorecard) -> str:
    remote = [r for r in card.rows if r.kind == "remote" and r.outcomes]
    if not remote:
        return ""
    heads = sorted({k for r in remote for k in r.outcomes})
    calls = card.endpoint_calls or {}
    cost = ""
    if calls:
        tokens = f"{calls.get('tokens', 0)} tokens" + (
            " (estimated from text length where the endpoint reported no usage)"
            if calls.get("tokens_estimated")
            else ""
        )
        usd = calls.get("cost_usd")
        money = f", about ${usd:.2f}" if isinstance(usd, (int, float)) else ""
        cost = (
            f"<p>Endpoint calls: {calls.get('new', 0)} sent, {calls.get('cached', 0)} "
            f"served from the run's cache, {calls.get('failed', 0)} failed; "
            f"{_e(tokens)}{_e(money)}.</p>"
        )
    return (
        f"<h2>What the endpoint returned</h2>{cost}<table id=outcomes><caption>Calls by "
        "outcome: refusals, empty answers, timeouts and errors are recorded as such, never "
        "as answers.</caption><thead><tr><th scope=col>system</th>"
        + "".join(f"<th scope=col>{_e(h)}</th>" for h in heads)
        + "</tr></thead><tbody>"
        + "".join(
            f"<tr><th scope=row>{_e(r.label)}</th>"
            + "".join(f'<td class="num">{r.outcomes.get(h, 0)}</td>' for h in heads)
            + "</tr>"
            for r in remote
        )
        + "</tbody></table>"
    )


def _figure(svg: str | None, caption: str, ident: str) -> str:
    if svg is None:
        return ""
    return f"<figure id={ident}>{svg}<figcaption>{caption}</figcaption></figure>"


def _roc_rows(card: Scorecard) -> list[ScorecardRow]:
    """The undefended system and the defense the verdict recommends."""
    return [r for r in (card.baseline, card.recommended) if r is not None]


def render_page(card: Scorecard, *, reproduce: str | None = None) -> str:
    """The scorecard page as one HTML string."""
    frontier = _figure(
        frontier_svg(card),
        "Privacy–utility frontier: each system's utility (x) against the AUC of the "
        "strongest attack on it (y), with 95 % intervals on both. Down and right is "
        "better; the dashed line joins the systems no other beats on both.",
        "frontier",
    )
    roc = _figure(
        roc_svg(card, _roc_rows(card)),
        "ROC curves of every attack, false-positive rate on a log scale (the regime "
        "where a membership claim is trusted); the axis starts at the smallest rate "
        "the sample resolves, 1 / non-members.",
        "roc",
    )
    settings = yaml.safe_dump(dict(card.settings), sort_keys=False, allow_unicode=True)
    versions = ", ".join(f"{k} {v}" for k, v in card.versions.items() if k != "platform")
    command = reproduce or "ragprivacy run settings.yaml --out DIR"
    noise = f"<li>Noise: {_e(card.noise)}.</li>" if card.noise else ""
    return f"""<!DOCTYPE html>
<html lang=en><head><meta charset=utf-8>
<meta name=viewport content="width=device-width,initial-scale=1">
<title>Privacy scorecard: {_e(card.corpus)}</title><style>{_CSS}</style></head>
<body>
<h1>Privacy scorecard: <code>{_e(card.corpus)}</code></h1>
<p class=meta>{_e(card.name)} · started {_e(card.started)} · {card.seconds:.0f} s ·
root seed {card.seed} · generator <code>{_e(card.generator)}</code></p>
<section id=verdict><h2>Verdict</h2><p class=verdict>{_code(card.verdict())}</p></section>
<section><h2>Attacks × defenses</h2>{_matrix(card)}</section>
<section><h2>Privacy and utility</h2>{frontier}</section>
<section><h2>ROC curves</h2>{roc}</section>
<section><h2>Extraction examples</h2>{_examples(card)}</section>
{_outcomes(card)}
<section id=settings><h2>Settings</h2>
<ul><li>Reproduce: <code>{_e(command)}</code> (results.json beside this page holds every
cell's seed and per-target records).</li>{noise}<li>Versions: {_e(versions)}.</li></ul>
<details><summary>The run's settings (YAML)</summary><pre>{_e(settings)}</pre></details>
</section>
</body></html>
"""


def write_scorecard(
    results: dict[str, Any], out_dir: Path, *, reproduce: str | None = None
) -> Path:
    """Write ``out_dir/index.html`` for a run's results; returns its path."""
    from ragprivacy.eval.scorecard.summary import summarize

    path = Path(out_dir) / "index.html"
    path.write_text(render_page(summarize(results), reproduce=reproduce), encoding="utf-8")
    return path

"""A human-readable audit report (Markdown) from a verdict and its transcript."""

from __future__ import annotations

from typing import Any

__all__ = ["render_report"]


def render_report(
    verdict: dict[str, Any], commitments: dict[str, Any], coalition: dict[str, Any]
) -> str:
    """Markdown: the verdict, ε_audit and its accounting, the checks, the commitments."""
    policy = commitments.get("policy", {})
    lines = [
        f"# Audit report — window {policy.get('window_id', '?')}",
        "",
        f"**Verdict: {verdict['verdict']}**"
        + (
            f" — ε_audit = {verdict['epsilon_audit']:.4g} at δ_policy = "
            f"{policy.get('delta_policy')}"
            if verdict.get("epsilon_audit") is not None
            else ""
        ),
        "",
        f"Mode: {verdict['mode']} ({verdict['records_checked']} of {verdict['records']} records "
        "checked"
        + (
            f"; a 1 % fraction of bad records is detected with probability "
            f"{verdict['detection_probability']:.6f}"
            if verdict.get("detection_probability")
            else ""
        )
        + ").",
        "",
        "## Policy (C_policy)",
        "",
        "| parameter | value |",
        "|---|---|",
    ]
    for k in (
        "epsilon_acc",
        "delta_acc",
        "sigma",
        "rate_limit",
        "k_max",
        "delta_policy",
        "top_k",
        "theta",
        "tau",
    ):
        lines.append(f"| {k} | {policy.get(k)} |")
    # how z_q is derived from its bits; a policy without the field predates the lazy one
    lines.append(f"| noise | {policy.get('noise', 'full')} |")
    lines += ["", "## Checks", ""]
    if verdict["failures"]:
        for f in verdict["failures"]:
            lines.append(f"- FAIL `{f['check']}`: {f['detail']}")
    elif verdict.get("skipped"):
        lines.append(
            "- the public checks (commitment_integrity, ledger_integrity, account_policy, "
            "receipt_consistency, the public half of policy_cap) passed"
        )
        lines += [
            f"- NOT RUN `{c}`: re-execution needs the auditor package" for c in verdict["skipped"]
        ]
    else:
        lines.append(
            "- all of commitment_integrity, ledger_integrity, receipt_consistency, "
            "per_record (A1–A4), policy_cap passed"
        )
    lines += [
        "",
        f"Coalition estimate ĉ = {coalition.get('size')} (θ = {coalition.get('theta')}); "
        f"cap k_max = {policy.get('k_max')}. ε_audit uses k_max, not ĉ (§5.5).",
        "",
    ]
    audit = verdict.get("audit") or {}
    if "eps_audit_leading" in audit:
        lines += [
            "## ε_audit (eq. 5.2)",
            "",
            "- leading term √k_max·ε_acc·√(log(1/δ_comp)/log(1/δ_acc)): "
            f"{audit['eps_audit_leading']:.4g}",
            f"- advanced-composition bound (Thm 3.5): {audit['eps_audit_bound']:.4g}",
            f"- RDP (Thm 3.9): {audit['eps_audit_rdp']:.4g}; "
            f"exact (GDP): {audit['eps_audit_exact']:.4g}",
            f"- δ_comp = δ_policy − k_max·δ_acc = {audit['delta_comp']:.3g}",
            "",
        ]
    lines += [
        "## Commitments",
        "",
        f"- C_emb: `{commitments['c_emb']}`",
        f"- C_seed: `{commitments['c_seed']}`",
        f"- C_policy: `{commitments['c_policy']}`",
        f"- C_ledger,0: `{commitments['c_ledger0']}`",
    ]
    for t, root in sorted(commitments["c_idx"].items()):
        lines.append(f"- C_D[{t}]: `{root}`")
    lines += [
        "",
        "Per-record attestation: auditor re-execution (a trusted auditor holding s_W "
        "re-derives the noise and the top-K); it does not provide the zero-knowledge "
        "property of Remark 5.1.",
        "",
    ]
    return "\n".join(lines)

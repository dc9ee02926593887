"""``ragprivacy attack --target`` against ragprivacy's own service: a tenant that gives no
log-probabilities refuses a request asking for them (400, nothing spent), so the attack
client asks once, goes on without them, and reports the attacks that need them as
skipped instead of failing the run; and the attack tells a tenant that leaks from one
that does not, beside the ε the service says each answer spent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests._chat_endpoint import Endpoint, Reply, chat_reply

from ragprivacy.attacks import split_membership
from ragprivacy.cli import main
from ragprivacy.corpus import synthesize, write_jsonl


def _write_split(tmp: Path, n: int, *, targets: int, seed: int, rng: int) -> None:
    """A synthetic medical corpus of ``n`` (candidates.jsonl), the members a tenant holds
    (members.jsonl) and their ids (members.txt), as an attacker gets them."""
    corpus = synthesize("medical", n, seed=seed)
    split = split_membership(corpus, targets=targets, rng=rng)
    write_jsonl(corpus, tmp / "candidates.jsonl")
    write_jsonl(split.members, tmp / "members.jsonl")
    (tmp / "members.txt").write_text("\n".join(split.members.ids) + "\n")


def test_an_attack_on_the_service_skips_what_needs_logprobs(
    tmp_path: Path, admin, server_factory
) -> None:  # type: ignore[no-untyped-def]
    _write_split(tmp_path, 60, targets=4, seed=5, rng=2)
    state = tmp_path / "state"
    admin(state, "tenant", "create", "clinic", "--k", "2")
    admin(state, "docs", "add", "clinic", str(tmp_path / "members.jsonl"))
    admin(state, "account", "create", "clinic", "auditor", "--eps", "8", "--delta", "1e-6",
          "--rate-limit", "500")  # fmt: skip
    key = admin(state, "key", "create", "auditor").strip().splitlines()[-1]
    admin(state, "window", "open")
    server = server_factory(state)
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragprivacy",
            "attack",
            "--target",
            f"openai:ragprivacy@{server.url}/v1",
            "--corpus",
            str(tmp_path / "candidates.jsonl"),
            "--members",
            str(tmp_path / "members.txt"),
            "--attack",
            "min-k,s2mia-s",
            "--targets",
            "8",
            "--calibration",
            "4",
            "--workers",
            "1",
            "--no-progress",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OPENAI_API_KEY": key},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    cells = json.loads((out / "results.json").read_text())["cells"]
    by_attack = {c["cell"]["attack"]: c["result"] for c in cells}
    assert by_attack["min-k"] == {"skipped": "the system exposes no log-probabilities"}
    s2mia = by_attack["s2mia-s"]
    assert s2mia["system"]["outcomes"]["answer"] == 12  # 8 evaluation + 4 calibration
    assert 0.0 <= s2mia["metrics"]["auc"] <= 1.0
    budget = httpx.get(
        f"{server.url}/v1/budget", headers={"Authorization": f"Bearer {key}"}, timeout=60
    ).json()
    # every call of the run (attack and utility queries) was answered and charged once;
    # the requests refused for asking log-probabilities (each cell's first, asked again
    # without them) spent nothing
    calls = next(c["calls"] for c in cells if c["cell"]["attack"] == "s2mia-s")
    assert budget["used"] == calls["new"] == 12 + s2mia["utility"]["queries"]


def _copying_llm(body: dict[str, Any]) -> Reply:
    """An upstream LLM that repeats the prompt it was given, the retrieved documents in
    it: the worst case of a model that follows an extraction prompt."""
    return chat_reply(" ".join(m["content"] for m in body["messages"] if m["role"] == "user"))


def _attack(url: str, key: str, tmp: Path, name: str) -> dict[str, Any]:
    out = tmp / name
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_API_KEY", key)
        code = main(
            ["attack", "--target", f"openai:ragprivacy@{url}/v1", "--corpus",
             str(tmp / "candidates.jsonl"), "--members", str(tmp / "members.txt"),
             "--attack", "s2mia-s", "--targets", "60", "--calibration", "4",
             "--workers", "1", "--no-progress", "--out", str(out)]
        )  # fmt: skip
    assert code == 0
    [cell] = json.loads((out / "results.json").read_text())["cells"]
    result: dict[str, Any] = cell["result"]
    return result


def test_the_attack_finds_the_plain_tenant_s_members_and_not_the_noisy_one_s(
    tmp_path: Path, admin, server_factory
) -> None:  # type: ignore[no-untyped-def]
    """The same members in two tenants of one service whose LLM repeats its prompt: a
    tenant whose account's budget makes the noise negligible leaks membership (AUC near
    1); noisy top-K at ε_acc = 1 over the same queries does not (the retrieved documents
    are nearly random). The ε each answer spent is the service's own statement, read from
    its responses."""
    _write_split(tmp_path, 160, targets=60, seed=11, rng=3)
    state = tmp_path / "state"
    keys = {}
    for tenant, eps in (("plain", "100000"), ("noisy", "1")):
        admin(state, "tenant", "create", tenant, "--k", "2")
        admin(state, "docs", "add", tenant, str(tmp_path / "members.jsonl"))
        admin(state, "account", "create", tenant, f"{tenant}-auditor", "--eps", eps,
              "--delta", "1e-6", "--rate-limit", "300")  # fmt: skip
        keys[tenant] = admin(state, "key", "create", f"{tenant}-auditor").strip().splitlines()[-1]
    admin(state, "window", "open")
    llm = Endpoint(_copying_llm)
    try:
        server = server_factory(state, extra=("--generator", f"openai:m@{llm.url}"))
        plain = _attack(server.url, keys["plain"], tmp_path, "plain")
        noisy = _attack(server.url, keys["noisy"], tmp_path, "noisy")
    finally:
        llm.close()
    assert plain["metrics"]["auc"] >= 0.9, plain["metrics"]
    assert noisy["metrics"]["auc"] <= 0.75, noisy["metrics"]  # 0.5 ± 0.08 by chance alone
    stated = {
        name: r["system"]["stated_privacy"] for name, r in (("plain", plain), ("noisy", noisy))
    }
    assert stated["plain"]["mechanisms"] == ["gaussian-noisy-topk"]
    assert stated["noisy"]["max_epsilon"] < 1 <= stated["plain"]["max_epsilon"]
    # the account's ε over the window, as the service states it: within its ε_acc
    assert stated["noisy"]["max_cumulative"] <= 1.0 + 1e-9
    budget = httpx.get(
        f"{server.url}/v1/budget", headers={"Authorization": f"Bearer {keys['noisy']}"}
    ).json()
    assert budget["used"] == stated["noisy"]["answers"]

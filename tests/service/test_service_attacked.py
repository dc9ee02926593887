"""``ragprivacy attack --target`` against ragprivacy's own service: a tenant that gives no
log-probabilities refuses a request asking for them (400, nothing spent), so the attack
client asks once, goes on without them, and reports the attacks that need them as
skipped instead of failing the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from ragprivacy.attacks import split_membership
from ragprivacy.corpus import synthesize, write_jsonl


def test_an_attack_on_the_service_skips_what_needs_logprobs(
    tmp_path: Path, admin, server_factory
) -> None:  # type: ignore[no-untyped-def]
    corpus = synthesize("medical", 60, seed=5)
    split = split_membership(corpus, targets=4, rng=2)
    write_jsonl(corpus, tmp_path / "candidates.jsonl")
    write_jsonl(split.members, tmp_path / "members.jsonl")
    (tmp_path / "members.txt").write_text("\n".join(split.members.ids) + "\n")
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

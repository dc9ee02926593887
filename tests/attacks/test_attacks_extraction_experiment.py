"""The ``extraction`` experiment end to end on a tiny corpus: targeted PII (10 attempts
per item), untargeted (ROUGE-L > 0.5) and the adversarial suffix, with the non-RAG floor
of 0 leaks, and a private system whose budget refuses queries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ragprivacy.eval import parse_config, run_config
from ragprivacy.eval.metrics import wilson_interval


def _config(**experiment: Any) -> dict[str, Any]:
    exp = {
        "type": "extraction",
        "corpus": "med",
        "k": 3,
        "systems": ["non-rag", "rag"],
        "modes": ["targeted", "untargeted", "adversarial"],
        "attempts": 10,
        "items": 6,
        "prompts": 12,
        "scale": 1.0,
        "questions": 8,
        "max_tokens": 48,
        **experiment,
    }
    return {
        "name": "extraction-test",
        "seed": 3,
        "workers": 1,
        "corpora": {"med": {"synthetic": "medical", "n": 60}},
        "models": {"background_n": 60, "embedder": "hashing"},
        "experiments": [exp],
    }


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    out = tmp_path_factory.mktemp("extraction")
    result = run_config(parse_config(_config()), out, progress=False)
    report = (out / "report.md").read_text()
    assert report.count("| targeted |") == 2
    # a rate of 0 leaks still reads with its interval (Wilson: 0 of 6 is up to 0.39)
    zero = f"| 0/6 | 0.000 (0.000–{wilson_interval(0, 6)[1]:.3f}) |"
    assert "rate (95% CI)" in report and zero in report
    return {(c["cell"]["system"], c["cell"]["mode"]): c["result"] for c in result.results["cells"]}


def test_targeted_pii_ten_attempts_per_item(cells: dict[tuple[str, str], Any]) -> None:
    rag = cells[("rag", "targeted")]
    m = rag["metrics"]
    assert m["items"] == 6
    assert rag["privacy"]["queries"] == 6 * 10  # 10 prompts per sensitive item
    assert sum(b for _, b in m["by_kind"].values()) == 6
    assert m["leaked"] >= 1  # the reader copies what it retrieves
    assert m["rate"] == pytest.approx(m["leaked"] / 6)
    assert rag["privacy"]["epsilon"] == float("inf")  # plain top-K: no guarantee
    floor = cells[("non-rag", "targeted")]
    assert floor["metrics"]["leaked"] == 0  # without retrieval nothing can leak
    assert floor["privacy"]["epsilon"] == 0.0


def test_untargeted_rouge_threshold(cells: dict[tuple[str, str], Any]) -> None:
    rag = cells[("rag", "untargeted")]
    assert rag["metrics"]["prompts"] == 12
    assert rag["metrics"]["leaks"] == sum(r > 0.5 for r in rag["rouge_l"]) >= 1
    floor = cells[("non-rag", "untargeted")]["metrics"]
    assert floor["leaks"] == 0
    assert floor["mean_rouge_l"] < rag["metrics"]["mean_rouge_l"]


def test_adversarial_suffix(cells: dict[tuple[str, str], Any]) -> None:
    rag = cells[("rag", "adversarial")]["metrics"]
    assert rag["prompts"] == 8 and rag["leaks"] >= 1
    floor = cells[("non-rag", "adversarial")]["metrics"]
    assert floor["leaks"] == 0 and floor["pii_values_reproduced"] == 0


def test_private_system_budget_and_refusals(tmp_path: Path) -> None:
    specs = [
        # budget sized for the run: every query answered, the run composes to ε_acc
        {"name": "rag", "retriever": "noisy_topk", "retriever_options": {"epsilon_acc": 2.0}},
        # a window of 25 queries: the rest of the 60 are refused, and recorded
        {
            "name": "rag",
            "retriever": "noisy_topk",
            "retriever_options": {"epsilon_acc": 2.0, "queries_per_account": 25},
            "label": "capped",
        },
        # one fresh account per item: each item's 10 queries compose to ε_acc
        {
            "name": "rag",
            "retriever": "noisy_topk",
            "retriever_options": {"epsilon_acc": 2.0},
            "budget": "target",
            "label": "per item",
        },
    ]
    cfg = _config(system_specs=specs, modes=["targeted"])
    result = run_config(parse_config(cfg), tmp_path, progress=False)
    got = {c["cell"]["system"]: c["result"]["privacy"] for c in result.results["cells"]}
    sized = got["rag+noisy_topk(epsilon_acc=2.0)"]
    assert sized["refused"] == 0 and sized["queries"] == 60
    assert sized["epsilon"] == pytest.approx(2.0, rel=1e-6)
    capped = got["capped"]
    assert capped["refused"] == 60 - 25
    per_item = got["per item"]
    assert per_item["accounts"] == 6 and per_item["refused"] == 0
    assert per_item["epsilon"] == pytest.approx(2.0, rel=1e-6)
    report = (tmp_path / "report.md").read_text()
    assert "| capped | none | targeted |" in report
    # what each system released sits beside its row: 35 of the 60 queries were refused
    release = {c["cell"]["system"]: c["result"]["release"] for c in result.results["cells"]}
    assert release["capped"]["answered"] <= 25 / 60 + 1e-9
    assert release["per item"]["documents_per_answer"] > 0
    assert "| answered | docs/answer | voted tokens/answer |" in report

"""What a scorecard runs: every attack against the undefended system and each defense at
the chosen budgets, on one corpus, as one experiment config (so the run has the
runner's checkpoints, generator-call cache, Ctrl-C handling and seeds).

Rows (systems under attack), on the user's documents or a synthetic corpus:

* ``rag`` — standard RAG, undefended;
* ``rag`` + ``prompt-modifying`` — the S-RAG prompt defense (an instruction not to
  reveal the context);
* ``PII redaction`` — the documents indexed with the regex PII detector's finds
  replaced by placeholders (what most teams do instead of DP);
* per ε of ``epsilons``: ``noisy top-K`` — Gaussian noise-then-select retrieval
  (collusion paper eq. 2.1) at ε_acc = ε per account, and ``MURAG`` — Private-RAG
  Alg. 1 at ε_q = ε per query (below ε = 2, one discovery of ε_0 = ε instead of the
  default ε_0 = 2: :attr:`ragprivacy.rag.SystemSpec.vote_epsilon_token`). Each target
  is attacked from a fresh account of a freshly built system (``budget: target``), so
  every membership test meets the full budget; ε is what one target's test spends.

Columns: the membership attacks (default :data:`SCORECARD_ATTACKS`, the ones that need
no shadow RAG) and the extraction modes (targeted PII, untargeted copying, and the
RAGCrawler crawl with as many queries as the untargeted prompts). Utility is
each system's score on the membership experiment's benign probe.

With ``target`` (``openai:MODEL@URL``), the one row is the endpoint as deployed
(:class:`~ragprivacy.rag.RemoteRAGSystem`): our defenses cannot wrap a system we do
not run, and only the attacks' own queries go to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragprivacy.errors import ConfigError
from ragprivacy.eval.config import ExperimentConfig, parse_config

__all__ = ["SCORECARD_ATTACKS", "SCORECARD_EPSILONS", "SCORECARD_MODES", "scorecard_config"]

#: Membership attacks a scorecard runs by default: those that need no shadow RAG
#: (S-RAG and S²MIA train on one and take minutes more; ask for them by name).
SCORECARD_ATTACKS = ("mba", "rag-mia", "min-k", "interrogation", "dcmi")
#: Budgets of the DP defenses by default: a strong and a weak one.
SCORECARD_EPSILONS = (1.0, 10.0)
#: Extraction modes of a scorecard.
SCORECARD_MODES = ("targeted", "untargeted", "ragcrawler")


def _dp_specs(epsilons: tuple[float, ...]) -> list[dict[str, Any]]:
    specs: list[dict[str, Any]] = []
    for eps in epsilons:
        shown = f"{eps:g}"
        specs += [
            {
                "name": "rag",
                "retriever": "noisy_topk",
                "retriever_options": {"epsilon_acc": eps},
                "budget": "target",
                "label": f"noisy top-K ε={shown}",
            },
            # below the vote's default ε_0 one discovery of all of ε_q
            # (ragprivacy.rag.SystemSpec.vote_epsilon_token)
            {"name": "murag", "epsilon_q": eps, "budget": "target", "label": f"MURAG ε={shown}"},
        ]
    return specs


def scorecard_config(
    *,
    corpus: str = "medical",
    n: int = 1000,
    attacks: tuple[str, ...] = SCORECARD_ATTACKS,
    epsilons: tuple[float, ...] = SCORECARD_EPSILONS,
    targets: int = 100,
    calibration: int = 40,
    items: int = 100,
    prompts: int = 100,
    seed: int = 7,
    workers: int = 2,
    generator: str = "reference",
    target: str | None = None,
    members: str | None = None,
    requests_per_second: float | None = None,
    price: str | None = None,
) -> ExperimentConfig:
    """The experiment config of a scorecard (see the module docstring).

    ``corpus`` is a synthetic kind (``n`` documents) or a JSONL/CSV file of the user's
    documents (``id`` and ``text``); ``targets`` evaluation and ``calibration`` threshold
    targets (half members each); ``items`` PII items and ``prompts`` untargeted prompts
    for extraction. ``target``/``members``/``requests_per_second``: audit an endpoint we
    do not run (``members`` is the file of the candidate ids it holds).
    """
    from ragprivacy.attacks import attack_names

    if not attacks:
        raise ConfigError("A scorecard needs at least one membership attack.")
    for a in attacks:
        if a not in attack_names():
            raise ConfigError(f"Unknown attack {a!r}; choose from: {', '.join(attack_names())}.")
    for eps in epsilons:
        if not eps > 0:
            raise ConfigError(f"Budgets must be positive; got ε = {eps:g}.")
    is_file = Path(corpus).is_file()
    if not is_file and ("/" in corpus or corpus.endswith((".jsonl", ".csv", ".json"))):
        raise ConfigError(f"--corpus {corpus}: no such file (JSONL or CSV with id and text).")
    # a file's PII ground truth comes from the regex detector (names need NER)
    source: dict[str, Any] = (
        {"path": corpus, "pii_detector": "regex"} if is_file else {"synthetic": corpus, "n": n}
    )
    name = Path(corpus).stem if is_file else corpus
    common: dict[str, Any] = {
        "type": "membership",
        "corpus": name,
        "k": 5,
        "attacks": list(attacks),
        "targets": targets,
        "calibration": calibration,
        "utility_queries": 40,
        "attack_options": {"interrogation": {"m": 10}},
    }
    extraction: dict[str, Any] = {
        "type": "extraction",
        "corpus": name,
        "k": 5,
        "modes": list(SCORECARD_MODES),
        "kinds": ["phone", "email", "date", "name"],
        "items": items,
        "attempts": 5,
        "prompts": prompts,
        "scale": 1.0,
        # answers long enough to copy a record's first lines; longer ones only make the
        # search for the closest stored document slower
        "max_tokens": 64,
    }
    models: dict[str, Any] = {
        "embedder": "lsa",
        "index": "exact",
        "generator": generator,
        "background_n": 1000,
        # the reference reader follows a defense instruction 90 % of the time
        "generator_options": {"compliance": 0.9} if generator == "reference" else {},
    }
    if target is not None:
        if not is_file:
            raise ConfigError(
                "--target needs --corpus FILE: the candidate documents (JSONL or CSV with "
                "'id' and 'text'), some of which the endpoint holds."
            )
        if members is None or not Path(members).is_file():
            raise ConfigError(
                "--target needs --members FILE: the ids of the candidates the endpoint "
                "holds, one per line."
            )
        remote: dict[str, Any] = {"name": "remote", "label": "endpoint as deployed"}
        if requests_per_second is not None:
            remote["requests_per_second"] = requests_per_second
        models = {**models, "generator": target, "generator_options": {}}
        experiments = [
            {
                **common,
                "defenses": ["none"],
                "system_specs": [remote],
                "members": members,
                "shadow_generator": generator,
            },
            {**extraction, "system_specs": [remote]},
        ]
    else:
        if members is not None:
            raise ConfigError("--members goes with --target (the endpoint's known members).")
        redaction = {"name": "rag", "redact_pii": "regex", "label": "PII redaction"}
        defended = [redaction, *_dp_specs(epsilons)]
        experiments = [
            {**common, "defenses": ["none", "prompt-modifying"], "system_specs": ["rag"]},
            {**common, "defenses": ["none"], "system_specs": defended},
            {**extraction, "defenses": ["none", "prompt-modifying"], "system_specs": ["rag"]},
            {**extraction, "system_specs": defended},
        ]
    settings: dict[str, Any] = {
        "name": f"privacy scorecard of {name}",
        "seed": seed,
        "workers": workers,
        "corpora": {name: source},
        "models": models,
        "experiments": experiments,
    }
    if price is not None:
        from ragprivacy.eval.calls import Price

        pair = Price.parse(price)
        settings["price"] = [pair.prompt, pair.completion]
    return parse_config(settings, source="ragprivacy scorecard")

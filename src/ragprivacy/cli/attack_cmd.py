"""``ragprivacy attack``: run membership and extraction attacks against defended RAG
systems, ours or a deployed endpoint's.

``ragprivacy attack --attack mba --corpus medical --defense none --out DIR`` builds a
``membership`` experiment (see :mod:`ragprivacy.eval.experiments.membership`) over a
synthetic corpus kind or a JSONL/CSV file and writes ``report.md`` (the attacks ×
defenses table and ROC plots) and ``results.json``. ``--attack all`` and ``--defense
all`` run every one; options repeat or take lists (``--attack mba --attack srag``,
``--attack mba,srag``). ``--generator`` names the target's reader (default the offline
reference reader; ``smollm2``, ``openai:MODEL@URL``, ``hf:PATH``, ``gguf:PATH``). ``--system`` picks
the systems under attack: a registered name (``rag``, ``dp_vote``, ...) or an inline
YAML mapping with options, e.g. ``--system "{name: murag, epsilon_q: 10, budget:
target}"`` (the keys of ``system_specs`` in
:mod:`ragprivacy.eval.experiments._systems`).

``--extraction targeted,untargeted,adversarial`` (or ``all``; repeatable like
``--attack``) adds an ``extraction`` experiment (see
:mod:`ragprivacy.eval.experiments.extraction`) over the same corpus, systems and defenses:
``--targets`` PII items (each asked ``--attempts`` times), untargeted prompts and
adversarial questions per mode. Membership attacks run when ``--attack`` is given, or by
default (``mba``) when ``--extraction`` is not: ``--extraction untargeted`` alone runs
extraction only, as does ``--attack none``. A file corpus's PII annotations (what
targeted extraction asks for) come from ``--pii-detector`` (default ``regex``).

``--target openai:MODEL@URL`` attacks a RAG endpoint we do not run
(:class:`~ragprivacy.rag.RemoteRAGSystem`) with ``--corpus FILE`` the candidate
documents: the membership attacks need ``--members FILE`` (the ids it holds); extraction
needs none, its leak test comparing the answers with every candidate. The endpoint's
calls go through the run's call cache (a rerun makes no call already answered; a cell
whose calls failed is run again, retrying only those), and the progress bar shows the
calls so far, new and cached, their tokens (the endpoint's ``usage``, else estimated from
the text length) and, with ``--price PROMPT_USD,COMPLETION_USD`` per million tokens, the
estimated cost; ``results.json`` (``endpoint_calls``) and the report record them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

__all__ = ["register"]


def build_config(
    *,
    attacks: list[str],
    corpus: str,
    defenses: list[str],
    n: int,
    targets: int,
    calibration: int,
    seed: int,
    k: int,
    compliance: float,
    workers: int,
    embedder: str = "lsa",
    background_n: int = 1000,
    systems: list[str] | None = None,
    generator: str = "reference",
    target: str | None = None,
    members: str | None = None,
    requests_per_second: float | None = None,
    extraction: list[str] | None = None,
    attempts: int = 10,
    pii_detector: str | None = None,
    price: str | None = None,
) -> Any:
    """The experiment config ``ragprivacy attack`` runs.

    With ``target`` (``openai:MODEL@URL``, a RAG endpoint we do not run) the system under
    attack is :class:`~ragprivacy.rag.RemoteRAGSystem` over that endpoint (its calls go
    through the run's generation cache, so a rerun resumes), ``corpus`` must be the file
    of candidate documents and ``members`` the file of the ids known to be in the
    endpoint's database (one per line). No defense of ours wraps it, and the shadow RAG of
    the learning attacks uses ``generator`` (default the offline reference reader): only
    the attack's own queries go to the endpoint.

    ``attacks`` may be ``["none"]`` (no membership experiment); ``extraction`` names the
    extraction modes to add (``all``: every one), ``price`` what the endpoint charges
    (``"PROMPT_USD,COMPLETION_USD"`` per million tokens).
    """
    from ragprivacy.attacks import attack_names
    from ragprivacy.cli._parsing import split_names
    from ragprivacy.errors import ConfigError
    from ragprivacy.eval import DEFAULT_ATTACKS, Price, parse_config
    from ragprivacy.eval import EXTRACTION_MODES as MODES
    from ragprivacy.rag import defense_names

    attacks = split_names(attacks, "--attack")
    defenses = split_names(defenses, "--defense")
    modes = split_names(extraction or [], "--extraction")
    mode_list = list(MODES) if "all" in modes else modes
    for m in mode_list:
        if m not in MODES:
            raise ConfigError(
                f"Unknown extraction mode {m!r}; choose one of: {', '.join(MODES)}, all."
            )
    if "none" in attacks and len(attacks) > 1:
        raise ConfigError(f"--attack none runs no membership attack; got it with {attacks}.")
    attack_list = (
        [] if attacks == ["none"] else list(DEFAULT_ATTACKS) if "all" in attacks else attacks
    )
    if not attack_list and not mode_list:
        raise ConfigError(
            "--attack none with no --extraction runs nothing; name an attack or an "
            "extraction mode (e.g. --extraction untargeted)."
        )
    price_pair = None if price is None else Price.parse(price)
    for a in attack_list:
        if a not in attack_names():
            raise ConfigError(
                f"Unknown attack {a!r}; choose one of: {', '.join(attack_names())}, all."
            )
    from ragprivacy.generate import generator_names

    if generator.partition(":")[0] not in generator_names():  # before any corpus is built
        raise ConfigError(
            f"Unknown --generator {generator!r}; give reference, smollm2, openai:MODEL@URL, "
            f"hf:PATH or gguf:PATH (registered: {', '.join(generator_names())})."
        )
    defense_list = defense_names() if "all" in defenses else defenses
    for d in defense_list:
        if d not in defense_names():
            raise ConfigError(
                f"Unknown defense {d!r}; choose one of: {', '.join(defense_names())}, all."
            )
    if not Path(corpus).is_file() and (Path(corpus).suffix or "/" in corpus):
        # a path, not a kind: say it is missing rather than "unknown synthetic kind"
        raise ConfigError(
            f"--corpus {corpus}: no such file (a JSONL, JSON or CSV file with id and text)."
        )
    source: dict[str, Any] = (
        {"path": corpus} if Path(corpus).is_file() else {"synthetic": corpus, "n": n}
    )
    if pii_detector is not None:
        source["pii_detector"] = pii_detector
    name = Path(corpus).stem if "path" in source else corpus
    specs: list[Any] = []
    for s in systems or ["rag"]:  # names may come as lists; a mapping is one system
        is_mapping = s.strip().startswith("{")
        specs += [_system_spec(s)] if is_mapping else split_names([s], "--system")
    # the reference reader's compliance with defense prompts; other readers follow them
    generator_options = (
        {"compliance": compliance} if generator.partition(":")[0] == "reference" else {}
    )
    models: dict[str, Any] = {
        "embedder": embedder,
        "generator": generator,
        "background_n": background_n,
        "generator_options": generator_options,
    }
    extra: dict[str, Any] = {}
    if target is not None:
        if "path" not in source:
            raise ConfigError(
                "--target needs --corpus FILE: the candidate documents (JSONL or CSV with "
                "'id' and 'text'), some of which the endpoint holds."
            )
        if members is not None and not Path(members).is_file():
            raise ConfigError(f"--members {members}: no such file (one member id per line).")
        if members is None and attack_list:
            raise ConfigError(
                "--target needs --members FILE: the ids of the candidates the endpoint holds "
                "(one per line), to score the attack against."
            )
        if defense_list != ["none"]:
            raise ConfigError(
                "--target attacks the endpoint as deployed: --defense must be 'none' (its "
                "defenses are its own)."
            )
        remote: dict[str, Any] = {"name": "remote"}
        if requests_per_second is not None:
            remote["requests_per_second"] = requests_per_second
        specs = [remote]
        models = {"generator": target, "background_n": background_n, "embedder": embedder}
        extra = {"members": members, "shadow_generator": generator}
    elif members is not None:
        raise ConfigError("--members goes with --target (the endpoint's known members).")
    experiments: list[dict[str, Any]] = []
    if attack_list:
        experiments.append(
            {
                "type": "membership",
                "corpus": name,
                "system_specs": specs,
                "k": k,
                "attacks": attack_list,
                "defenses": defense_list,
                "targets": targets,
                "calibration": calibration,
                **extra,
            }
        )
    if mode_list:
        experiments.append(
            {
                "type": "extraction",
                "corpus": name,
                "system_specs": specs,
                "k": k,
                "modes": mode_list,
                "defenses": defense_list,
                "items": targets,
                "attempts": attempts,
                "prompts": targets,
                "scale": 1.0,
                "questions": targets,
            }
        )
    what = [*attack_list, *(f"{m} extraction" for m in mode_list)]
    config: dict[str, Any] = {
        "name": f"attack {', '.join(what)} on {name}",
        "seed": seed,
        "workers": workers,
        "corpora": {name: source},
        "models": models,
        "experiments": experiments,
    }
    if price_pair is not None:
        config["price"] = [price_pair.prompt, price_pair.completion]
    return parse_config(config, source="ragprivacy attack")


def _system_spec(text: str) -> Any:
    """A ``--system`` value: a system name, or an inline YAML mapping of its spec."""
    if not text.strip().startswith("{"):
        return text.strip()
    import yaml

    from ragprivacy.errors import ConfigError

    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--system {text!r} is not a YAML mapping: {exc}.") from None
    if not isinstance(spec, dict) or "name" not in spec:
        raise ConfigError(
            f"--system {text!r} must be a system name or a mapping with a 'name', e.g. "
            '"{name: murag, epsilon_q: 10, budget: target}".'
        )
    return spec


def register(app: typer.Typer) -> None:
    """Add ``attack`` to the root command."""

    @app.command("attack")
    def attack(
        attack: list[str] | None = typer.Option(
            None,
            "--attack",
            help="Membership attack, all, or none (default mba unless --extraction is given).",
        ),
        extraction: list[str] | None = typer.Option(
            None,
            "--extraction",
            help="Extraction modes to run too: targeted, untargeted, adversarial, or all.",
        ),
        attempts: int = typer.Option(10, "--attempts", help="Targeted extraction: asks per item."),
        pii_detector: str | None = typer.Option(
            None,
            "--pii-detector",
            help="PII detector annotating a corpus file (regex, presidio, none; default regex).",
        ),
        price: str | None = typer.Option(
            None,
            "--price",
            help="With --target: PROMPT_USD,COMPLETION_USD per million tokens (the cost shown).",
        ),
        corpus: str = typer.Option("medical", "--corpus", help="Synthetic kind or a file."),
        defense: list[str] = typer.Option(["none"], "--defense", help="Defense, or all."),
        system: list[str] = typer.Option(
            ["rag"],
            "--system",
            help="System under attack: a name or a YAML mapping, e.g. "
            '"{name: dp_vote, epsilon: 10, budget: target}".',
        ),
        out: Path = typer.Option(Path("attack-out"), "--out", help="Output directory."),
        n: int = typer.Option(2000, "--n", help="Synthetic corpus size."),
        targets: int = typer.Option(200, "--targets", help="Evaluation targets."),
        calibration: int = typer.Option(100, "--calibration", help="Calibration targets."),
        seed: int = typer.Option(7, "--seed", help="Root seed."),
        k: int = typer.Option(5, "--k", help="Retrieved documents."),
        compliance: float = typer.Option(
            0.9, "--compliance", help="Reference reader's compliance with defense prompts."
        ),
        workers: int = typer.Option(2, "--workers", help="Processes."),
        embedder: str = typer.Option("lsa", "--embedder", help="Embedder of the RAG system."),
        generator: str = typer.Option(
            "reference",
            "--generator",
            help=(
                "Reader of the system under attack: reference, smollm2, openai:MODEL@URL, "
                "hf:PATH or gguf:PATH."
            ),
        ),
        background_n: int = typer.Option(
            1000, "--background-n", help="Public background texts (reader and proxy LM)."
        ),
        target: str | None = typer.Option(
            None,
            "--target",
            help="Attack a RAG endpoint we do not run: openai:MODEL@http://HOST:PORT/v1 "
            "(with --corpus FILE and --members FILE).",
        ),
        members: str | None = typer.Option(
            None, "--members", help="With --target: file of the member ids, one per line."
        ),
        rate: float | None = typer.Option(
            None, "--rate", help="With --target: at most this many requests per second."
        ),
        progress: bool = typer.Option(True, "--progress/--no-progress"),
    ) -> None:
        """Membership attacks (AUC, accuracy, F1, TPR@1%FPR, ROC) and extraction attacks
        against defended RAG, ours or a remote endpoint's."""
        from ragprivacy.eval import run_config

        config = build_config(
            attacks=attack if attack else ["none"] if extraction else ["mba"],
            corpus=corpus,
            defenses=defense,
            n=n,
            targets=targets,
            calibration=calibration,
            seed=seed,
            k=k,
            compliance=compliance,
            workers=workers,
            embedder=embedder,
            background_n=background_n,
            systems=system,
            generator=generator,
            target=target,
            members=members,
            requests_per_second=rate,
            extraction=extraction,
            attempts=attempts,
            pii_detector=pii_detector,
            price=price,
        )
        result = run_config(config, out, progress=progress, config_path="ragprivacy attack")
        typer.echo(f"wrote {result.report_path} and {result.results_path}")

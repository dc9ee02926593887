"""``membership``: every membership attack against every defense (and system), with the
papers' protocol (MBA 5.1, S-RAG 5.1).

The corpus is split 80/20 into members (the knowledge base) and non-members; balanced,
disjoint evaluation and calibration target sets are drawn by the experiment's seed (so
every cell sees the same targets). Each cell is one ``(system, attack, defense)`` and
optionally one parameter-study value; it reports ROC AUC ± DeLong SE, accuracy,
precision, recall and F1 at the threshold chosen on the calibration split, TPR at 1% and
0.1% FPR, the attack's own decision rule where it has one (MBA's γ·M), and retrieval
recall of the targets (evaluation-only view). Learning attacks (S-RAG, S²MIA_s&p) fit on
a shadow RAG the attacker builds from an auxiliary corpus (the same synthetic kind from
an independent seed, or any config corpus), split half in, half out.

Systems under attack: ``systems`` (registered names) or ``system_specs`` (names or
mappings with options: private retrievers, DP voting, MURAG; see
:mod:`ragprivacy.eval.experiments._systems` for the keys, the offline defaults and how
budgets are sized, :mod:`~ragprivacy.eval.experiments._budgeted` for budget scopes and
refusals, :mod:`~ragprivacy.eval.experiments._privacy_tally` for the privacy spent). Each
defense (prompt modifying, paraphrasing) wraps each of them, and every cell reports the
privacy the attacker's account(s) spent (ε at ``accounting_delta``, the AUC bound it
implies, refusals) next to the attack metrics.

Options (besides ``type``, ``corpus``, ``systems``, ``k``): see
:class:`MembershipOptions`. Parameter studies (MBA 5.7, S-RAG 5.4–5.5) are ``studies``
entries ``{param, values, attacks}``; ``param`` is an attack option
(``"mba.n_masks"``, ``"srag.intervals"``), ``"k"`` (retrieved documents),
``"shadow_kind"``, ``"shadow_embedder"`` or ``"shadow_generator_options.<key>"``. MBA's
γ is studied from the scores of every MBA cell (F1 for γ = 0.1 … 1.0).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._stats import mean_interval
from ragprivacy._validation import check_choice, check_positive_int, check_probability
from ragprivacy.attacks import (
    MembershipAttack,
    NGramProxy,
    ShadowData,
    attack_factory,
    attack_names,
    create_attack,
    score_targets,
    split_membership,
)
from ragprivacy.errors import ConfigError
from ragprivacy.eval.context import RunContext, derive_seed
from ragprivacy.eval.experiments._attacked import AttackedSystemsExperiment, memo, memo_key
from ragprivacy.eval.experiments._budgeted import BudgetedSystem
from ragprivacy.eval.experiments._membership_report import (
    membership_overview,
    membership_report,
)
from ragprivacy.eval.experiments._systems import (
    NO_LOGPROB_SYSTEMS,
    SystemEntry,
    parse_system_specs,
)
from ragprivacy.eval.experiments.base import Experiment, ReportSection, register_experiment
from ragprivacy.eval.metrics import match, rouge_l
from ragprivacy.eval.metrics.membership import binary_metrics, membership_metrics, roc_curve
from ragprivacy.generate import Generator, Task
from ragprivacy.rag import Query, SystemSpec, build_system, defense_names
from ragprivacy.retrieval import KnowledgeBase

__all__ = ["MembershipExperiment", "MembershipOptions"]

DEFAULT_ATTACKS = (
    "mba",
    "srag",
    "rag-mia",
    "s2mia-s",
    "s2mia-sp",
    "min-k",
    "interrogation",
    "dcmi",
)
_STUDY_KEYS = ("k", "shadow_kind", "shadow_embedder")


@dataclass(frozen=True, slots=True, kw_only=True)
class MembershipOptions:
    """Options of the ``membership`` experiment.

    Attributes:
        attacks: registered attack names.
        defenses: ``none``, ``prompt-modifying``, ``paraphrasing``.
        targets: evaluation targets (half members, half non-members).
        calibration: calibration targets for the thresholds (half and half).
        member_fraction: share of the corpus stored (0.8 as in the papers).
        members: a file of the member ids, one per line, where membership is known (a
            deployed endpoint under audit, system ``remote``): the split uses them
            instead of ``member_fraction``.
        attack_options: per attack name, its keyword options.
        defense_options: per defense name, its keyword options.
        generator_options: overrides of the config's generator options for the target
            system (e.g. the reference reader's ``compliance`` with defense prompts).
        shadow_corpus: a config corpus for the shadow (default: synthetic, see below).
        shadow_kind: synthetic kind of the auxiliary corpus (default: the target's).
        shadow_n: auxiliary corpus size (split half in, half out).
        shadow_targets: shadow members (and as many non-members) the classifiers see.
        shadow_generator: generator spec of the shadow (default: the config's).
        shadow_generator_options: its options (over the config's).
        shadow_embedder: embedder of the shadow (default: the config's).
        embedder: embedder of the target knowledge base (default: the config's).
        proxy: the attacker's proxy LM (``ngram`` or ``hf:PATH``).
        criterion: threshold criterion on the calibration split (accuracy or f1).
        batch_size: targets per batched system call.
        studies: parameter studies (see the module docstring).
        system_specs: systems under attack with options (replaces ``systems``).
        accounting_delta: δ at which Gaussian compositions of the privacy spent are
            reported.
        utility_queries: benign queries that measure each system's utility under each
            defense, reported beside every attack row (0: none). Medical records: the
            patient half of held-out records, ROUGE-L F of the reply against the
            doctor's; QA corpora: questions whose supporting documents are stored, match
            accuracy.
    """

    attacks: tuple[str, ...] = DEFAULT_ATTACKS
    defenses: tuple[str, ...] = ("none", "prompt-modifying", "paraphrasing")
    targets: int = 200
    calibration: int = 100
    member_fraction: float = 0.8
    members: str | None = None
    attack_options: Mapping[str, Any] = field(default_factory=dict)
    defense_options: Mapping[str, Any] = field(default_factory=dict)
    generator_options: Mapping[str, Any] = field(default_factory=dict)
    shadow_corpus: str | None = None
    shadow_kind: str | None = None
    shadow_n: int = 400
    shadow_targets: int = 100
    shadow_generator: str | None = None
    shadow_generator_options: Mapping[str, Any] = field(default_factory=dict)
    shadow_embedder: str | None = None
    embedder: str | None = None
    proxy: str = "ngram"
    criterion: str = "accuracy"
    batch_size: int = 64
    studies: tuple[Mapping[str, Any], ...] = ()
    system_specs: tuple[Any, ...] = ()
    accounting_delta: float = 1e-6
    utility_queries: int = 50

    def __post_init__(self) -> None:
        parse_system_specs(self.system_specs, "system_specs")
        check_probability("accounting_delta", self.accounting_delta, open_interval=True)
        for a in self.attacks:
            check_choice("attacks", a, attack_names())
        for d in self.defenses:
            check_choice("defenses", d, defense_names())
        for name in ("targets", "shadow_n", "shadow_targets", "batch_size"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("calibration", self.calibration, allow_zero=True)
        check_positive_int("utility_queries", self.utility_queries, allow_zero=True)
        check_probability("member_fraction", self.member_fraction, open_interval=True)
        if self.members is not None and not Path(str(self.members)).is_file():
            raise ConfigError(
                f"members: {self.members}: no such file; give a file of member ids, one per line."
            )
        check_choice("criterion", self.criterion, ("accuracy", "f1"))
        for i, s in enumerate(self.studies):
            if not isinstance(s, Mapping) or "param" not in s or "values" not in s:
                raise ConfigError(
                    f"studies[{i}] must be a mapping with 'param' and 'values'; got {s!r}."
                )
            param = str(s["param"])
            ok = (
                param in _STUDY_KEYS
                or param.startswith("shadow_generator_options.")
                or param.partition(".")[0] in attack_names()
            )
            if not ok:
                raise ConfigError(
                    f"studies[{i}].param {param!r} is not studied; use an attack option such "
                    "as 'mba.n_masks', 'k', 'shadow_kind', 'shadow_embedder' or "
                    "'shadow_generator_options.KEY'."
                )


def _member_ids(path: str) -> list[str]:
    """The ids in a members file: one per line; blank lines and ``#`` comments skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    ids = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not ids:
        raise ConfigError(f"members: {path} lists no id; give one member id per line.")
    return ids


def _cache_path(ctx: RunContext) -> str | None:
    """The run's call cache (part of a memo key: each run directory fills its own)."""
    return str(ctx.cache.path) if ctx.cache is not None else None


class MembershipExperiment(AttackedSystemsExperiment):
    """Membership attacks × defenses (see the module docstring)."""

    type = "membership"
    options_type = MembershipOptions
    options: MembershipOptions

    # ------------------------------------------------------------------ cells

    def cells(self) -> list[dict[str, Any]]:
        o = self.options
        out: list[dict[str, Any]] = [
            {"system": s, "attack": a, "defense": d}
            for s in self.systems
            for a in o.attacks
            for d in o.defenses
        ]
        for i, study in enumerate(o.studies):
            param = str(study["param"])
            owner = param.partition(".")[0]
            default = [owner] if owner in attack_names() else list(o.attacks)
            attacks = list(study.get("attacks") or default)
            for a in attacks:
                check_choice(f"studies[{i}].attacks", a, attack_names())
            for v in study["values"]:
                for a in attacks:
                    out.append(
                        {
                            "system": next(iter(self.systems)),
                            "attack": a,
                            "defense": str(study.get("defense", "none")),
                            "study": i,
                            "param": param,
                            "value": v,
                        }
                    )
        return out

    def cell_units(self, cell: dict[str, Any]) -> int:
        """Targets the cell scores (evaluation and calibration), for the progress bar."""
        o = self.options
        needs_logprobs = getattr(attack_factory(cell["attack"]), "requires_logprobs", False)
        if needs_logprobs and self.systems[cell["system"]].name in NO_LOGPROB_SYSTEMS:
            return 0
        return 2 * (o.targets // 2) + 2 * (o.calibration // 2)

    # ------------------------------------------------------------------ builders

    def _split(self, ctx: RunContext) -> Any:
        o = self.options
        return memo(
            memo_key("split", self._config_key()),
            lambda: split_membership(
                ctx.corpus(self.corpus_name),
                targets=o.targets,
                calibration=o.calibration,
                member_fraction=o.member_fraction,
                rng=self.seed,
                members=None if o.members is None else _member_ids(o.members),
            ),
        )

    def _kind(self) -> str:
        spec = self.config.corpora[self.corpus_name]
        return spec.synthetic or "knowledge"

    def _texts(self, label: str) -> list[str]:
        from ragprivacy.corpus import background_texts

        seed = derive_seed(self.config.seed, label, self.corpus_name)
        n = self.config.models.background_n
        return memo(
            memo_key("texts", label, self._kind(), n, seed),
            lambda: background_texts(self._kind(), n, seed=seed),
        )

    def _target_kb(self, ctx: RunContext) -> KnowledgeBase:
        split = self._split(ctx)
        models = self.config.models
        return memo(
            memo_key("kb", self._config_key(), "target"),
            lambda: KnowledgeBase.build(
                split.members,
                embedder=self.options.embedder or models.embedder,
                index=models.index,
            ),
        )

    def _system(
        self, ctx: RunContext, label: str, k: int, defense: str, seed: int
    ) -> tuple[BudgetedSystem, Generator, SystemEntry]:
        """The system ``label`` under ``defense`` over the members, built per budget
        scope."""
        spec = self.systems[label]
        kb = self._target_kb(ctx) if spec.uses_data else None
        system = self._budgeted(ctx, label, defense, seed, k=k, kb=kb)
        return system, self._generator(ctx), spec

    def _shadow(self, ctx: RunContext, overrides: Mapping[str, Any]) -> ShadowData:
        o = self.options
        kind = overrides.get("shadow_kind", o.shadow_kind)
        embedder = overrides.get("shadow_embedder", o.shadow_embedder)
        gen_opts = {**o.shadow_generator_options, **overrides.get("shadow_generator_options", {})}

        def build() -> ShadowData:
            from ragprivacy.corpus import synthesize

            if o.shadow_corpus is not None and kind is None:
                aux = ctx.corpus(o.shadow_corpus)
            else:
                seed = derive_seed(self.config.seed, "shadow", self.corpus_name, str(kind))
                aux = synthesize(kind or self._kind(), o.shadow_n, seed=seed)
            inside, outside = aux.split(0.5, rng=derive_seed(self.seed, "shadow-split"))
            models = self.config.models
            kb = KnowledgeBase.build(
                inside, embedder=embedder or o.embedder or models.embedder, index=models.index
            )
            gen = self._generator(ctx, o.shadow_generator, gen_opts)
            system = build_system(SystemSpec(system="rag", k=self.spec.k), kb=kb, generator=gen)
            n = min(o.shadow_targets, len(inside), len(outside))
            return ShadowData(system, tuple(inside)[:n], tuple(outside)[:n])

        return memo(memo_key("shadow", self._config_key(), kind, embedder, gen_opts), build)

    def _attack(self, name: str, overrides: Mapping[str, Any]) -> MembershipAttack:
        o = self.options
        opts = dict(o.attack_options.get(name, {}) or {})
        opts.update(overrides)
        factory = attack_factory(name)
        params = inspect.signature(factory).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        if "proxy" in params and "proxy" not in opts:
            if o.proxy == "ngram":
                texts = self._texts("attacker-background")
                opts["proxy"] = memo(
                    memo_key("proxy", texts[:3], len(texts)), lambda: NGramProxy(texts)
                )
            else:
                opts["proxy"] = o.proxy
        if ("seed" in params or takes_any) and "seed" not in opts:
            opts["seed"] = derive_seed(self.seed, "attack", name)
        return create_attack(name, **opts)

    # ------------------------------------------------------------------ utility

    def _utility_items(self, ctx: RunContext) -> tuple[str, list[tuple[Query, tuple[str, ...]]]]:
        """The benign probe: ``(metric, [(query, references)])`` from documents the
        attack does not target (see :class:`MembershipOptions`), or ``("", [])``."""
        n = self.options.utility_queries
        if n == 0:
            return "", []
        split = self._split(ctx)
        members = {d.id for d in split.members}
        targets = {d.id for d in (*split.evaluation, *split.calibration)}
        corpus = ctx.corpus(self.corpus_name)
        qa = [
            q
            for q in corpus.questions
            if q.hops == 1 and q.support_ids and set(q.support_ids) <= members
        ]
        if qa:
            pick = np.random.default_rng(derive_seed(self.seed, "utility")).permutation(len(qa))
            chosen = [qa[int(i)] for i in sorted(pick[:n].tolist())]
            return "match", [(Query(q.question), tuple(q.answers)) for q in chosen]
        held = [
            d for d in split.non_members if d.id not in targets and "doctor_offset" in d.metadata
        ]
        items: list[tuple[Query, tuple[str, ...]]] = []
        for d in held[:n]:
            cut = int(d.metadata["doctor_offset"])
            patient = d.text[:cut].rstrip() + "\nDoctor:"
            reply = d.text[cut:].removeprefix("Doctor:").strip()
            query = Query(
                patient, task=Task.CONTINUE, retrieval_text=patient, options={"max_tokens": 48}
            )
            items.append((query, (reply,)))
        return ("rouge_l", items) if items else ("", [])

    def _utility(self, ctx: RunContext, label: str, k: int, defense: str) -> dict[str, Any]:
        """The system ``label`` under ``defense`` on the benign probe (memoised per
        process): its utility, the share answered and the documents released per
        answer. Budgets as for the attack: one account for the probe (``budget: run``)
        or a fresh account and system per query (``budget: target``)."""

        def measure() -> dict[str, Any]:
            metric, items = self._utility_items(ctx)
            if not items:
                return {"metric": None}
            seed = derive_seed(self.seed, "utility", label, defense, str(k))
            system, _, spec = self._system(ctx, label, k, defense, seed)
            system.run_queries = len(items)
            scores: list[float] = []
            for i, (query, refs) in enumerate(items):
                account = "user" if spec.budget == "run" else f"user-{i}"
                reply = system.answer(query, account=account).text
                if metric == "match":
                    scores.append(float(match(reply, refs)))
                else:
                    scores.append(max(rouge_l(reply, ref) for ref in refs))
            low, high = mean_interval(scores, unit=True)
            return {
                "metric": metric,
                "value": float(np.mean(scores)),
                "low": low,
                "high": high,
                "queries": len(items),
                "no_retrieval": self._utility_baseline(ctx, metric, items),
                **system.release_summary(),
            }

        key = memo_key("utility", self._config_key(), label, defense, k, _cache_path(ctx))
        return memo(key, measure)

    def _utility_baseline(
        self, ctx: RunContext, metric: str, items: list[tuple[Query, tuple[str, ...]]]
    ) -> float:
        """The generator alone (no retrieval) on the probe: the utility a system that
        releases nothing still has, so a private system's utility reads against it."""

        def measure() -> float:
            base = build_system(SystemSpec(system="non-rag"), generator=self._generator(ctx))
            replies = [r.text for r in base.answer_batch([q for q, _ in items])]
            if metric == "match":
                return float(np.mean([match(t, refs) for t, (_, refs) in zip(replies, items)]))
            return float(
                np.mean([max(rouge_l(t, r) for r in refs) for t, (_, refs) in zip(replies, items)])
            )

        return memo(memo_key("utility-baseline", self._config_key(), _cache_path(ctx)), measure)

    # ------------------------------------------------------------------ run

    def run_cell(
        self, cell: dict[str, Any], ctx: RunContext, rng: np.random.Generator
    ) -> dict[str, Any]:
        o = self.options
        param, value = cell.get("param"), cell.get("value")
        attack_over: dict[str, Any] = {}
        shadow_over: dict[str, Any] = {}
        k = self.spec.k
        if param == "k":
            k = check_positive_int("k", value)  # type: ignore[arg-type]
        elif param in ("shadow_kind", "shadow_embedder"):
            shadow_over[param] = value
        elif param is not None and param.startswith("shadow_generator_options."):
            shadow_over["shadow_generator_options"] = {param.partition(".")[2]: value}
        elif param is not None:
            attack_over[param.partition(".")[2]] = value
        split = self._split(ctx)
        seed = int(rng.integers(2**31 - 1))
        defended, gen, spec = self._system(ctx, cell["system"], k, cell["defense"], seed)
        attack = self._attack(cell["attack"], attack_over)
        if attack.requires_logprobs and (
            not gen.exposes_logprobs or spec.name in NO_LOGPROB_SYSTEMS
        ):
            return {"skipped": "the system exposes no log-probabilities"}
        if attack.learns:
            attack.fit(self._shadow(ctx, shadow_over))
        if spec.budget == "run":  # one account; budgets sized for the cell's queries
            account: Any = "attacker"
            defended.run_queries = sum(
                len(attack.queries(t)) for t in (*split.evaluation, *split.calibration)
            )
        else:  # a fresh system and account per target
            account = lambda i, doc: f"target-{doc.id}"  # noqa: E731
        progress = getattr(ctx, "progress", None)
        ev = score_targets(
            attack,
            defended,
            split.evaluation,
            split.evaluation_labels,
            batch_size=o.batch_size,
            account=account,
            progress=progress,
        )
        cal = None
        if split.calibration:
            cal = score_targets(
                attack,
                defended,
                split.calibration,
                split.calibration_labels,
                batch_size=o.batch_size,
                account=account,
                progress=progress,
            )
        metrics = membership_metrics(
            ev.scores,
            ev.labels,
            calibration_scores=cal.scores if cal else None,
            calibration_labels=cal.labels if cal else None,
            criterion=o.criterion,
        ).to_dict()
        # A remote endpoint shows us nothing of what it retrieved: no recall to report.
        metrics["retrieval_recall"] = None if spec.name == "remote" else ev.retrieval_recall()
        metrics["queries_per_target"] = ev.queries / max(1, len(ev.scores))
        own = [attack.predict(s) for s in ev.scores]
        if all(p is not None for p in own):
            y = np.asarray(ev.labels, dtype=bool)
            pred = np.asarray(own, dtype=bool)
            metrics["own_rule_accuracy"] = float((pred == y).mean())
            tp = float((pred & y).sum())
            prec = tp / max(1.0, float(pred.sum()))
            rec = tp / max(1.0, float(y.sum()))
            metrics["own_rule_f1"] = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        fpr, tpr, _ = roc_curve(ev.scores, ev.labels)
        keep = np.unique(np.linspace(0, len(fpr) - 1, min(len(fpr), 200)).astype(int))
        result: dict[str, Any] = {
            "attack": attack.config(),
            "system": defended.describe(),
            "privacy": {"budget": spec.budget, **defended.tally.summary()},
            "release": defended.release_summary(),
            "utility": self._utility(ctx, cell["system"], k, cell["defense"]),
            "metrics": metrics,
            "roc": {"fpr": fpr[keep].tolist(), "tpr": tpr[keep].tolist()},
            "records": ev.records(),
        }
        if cell["attack"] == "mba":
            result["gamma_f1"] = {
                f"{g:.1f}": binary_metrics(ev.scores, ev.labels, g - 1e-9).f1
                for g in np.round(np.arange(0.1, 1.01, 0.1), 1)
            }
        return result

    def report(self, results: list[dict[str, Any]], out_dir: Path) -> ReportSection:
        return membership_report(self, results, out_dir)

    @classmethod
    def overview(
        cls, parts: list[tuple[Experiment, list[dict[str, Any]]]], out_dir: Path
    ) -> ReportSection | None:
        return membership_overview(parts, out_dir)


register_experiment("membership", MembershipExperiment)

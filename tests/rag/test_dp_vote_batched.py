"""Token voting's batched voters on a tiny random GPT-2 (``hf:``): one forward pass per
step with the key/value cache kept gives the votes that asking each voter alone gives, so
DP voting (Private-RAG Alg. 4) releases the same tokens with the same noise either way."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from ragprivacy.generate import (
    Generator,
    GreedySteps,
    HFGenerator,
    Prompt,
    Task,
    TokenDistribution,
    create_generator,
)
from ragprivacy.rag import DPVoteConfig, dp_vote_generate
from ragprivacy.types import Completion

DOCS = [
    "Marta Olsen was born in Velmora.",
    "The weather was mild for most of the week.",
    "Jon Berg works at Halden Clinic and lives in Tarsk.",
    "Velmora is a small town by the sea.",
    "Halden Clinic opened in the spring.",
    "Tarsk has a long bridge over the river.",
]


def _build(path: Path) -> Path:
    import torch  # here, not at import: collecting the suite need not load torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(DOCS * 3, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(path)
    torch.manual_seed(1)  # the test builds its own fixture model; library code never seeds
    config = GPT2Config(
        vocab_size=len(fast),
        n_layer=2,
        n_head=2,
        n_embd=32,
        n_positions=256,
        initializer_range=0.5,
        bos_token_id=fast.eos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory) -> HFGenerator:
    g = create_generator(f"hf:{_build(tmp_path_factory.mktemp('tiny-gpt2'))}", threads=1)
    assert isinstance(g, HFGenerator)
    return g


class Unbatched(Generator):
    """``inner`` without its batched steps: DP voting takes its one-voter-at-a-time path."""

    def __init__(self, inner: Generator) -> None:
        self.inner = inner
        self.asked = 0

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        return self.inner.generate(prompt, max_tokens=max_tokens)

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        return self.inner.generate_batch(prompts, max_tokens=max_tokens)

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        return self.inner.next_token_distribution(prompt, prefix)

    def next_token(self, prompt: Prompt, prefix: Sequence[str] | str = ()) -> str:
        self.asked += 1
        return self.inner.next_token(prompt, prefix)

    def score(self, prompt: Prompt, continuation: str) -> Completion:
        return self.inner.score(prompt, continuation)


def _prompts(question: str = "Where was Marta Olsen born?") -> list[Prompt]:
    base = Prompt(Task.ANSWER, question)
    return [base] + [base.with_context((d,)) for d in DOCS]


def test_next_token_is_the_first_maximum_of_the_distribution(gen: HFGenerator) -> None:
    for prompt in _prompts():
        for prefix in ([], ["ĠVel", "mora"]):
            dist = gen.next_token_distribution(prompt, prefix)
            best = dist.tokens[max(range(len(dist.probs)), key=dist.probs.__getitem__)]
            expected = "</s>" if best == "<|endoftext|>" else best
            assert gen.next_token(prompt, prefix) == expected


def test_batched_steps_give_each_prompt_its_own_greedy_token(gen: HFGenerator) -> None:
    prompts = _prompts()
    pieces = [p for p in gen.next_token_distribution(prompts[0]).tokens if p[0] != "<"]
    slow = GreedySteps(gen, prompts)  # the default: next_token prompt by prompt
    with gen.greedy_steps(prompts) as fast:
        assert fast.batched and not slow.batched
        prefix: list[str] = []
        for t in range(8):
            expected = slow.next_tokens(prefix)
            assert fast.next_tokens(prefix) == expected
            assert fast.next_tokens(prefix, [3, 0]) == [expected[3], expected[0]]
            # grow the prefix by one token, or by two at once (fed as one pass)
            prefix += [pieces[(7 * t) % len(pieces)]] * (1 + t % 2)
        # a prefix that does not extend the cached one starts over
        assert fast.next_tokens(prefix[:2]) == slow.next_tokens(prefix[:2])
        assert fast.next_tokens([]) == slow.next_tokens([])


def test_batched_steps_past_the_model_positions_cut_like_next_token(gen: HFGenerator) -> None:
    prompts = _prompts()
    prefix = ["Ġthe"] * (gen._max_len - 20)  # prompt + prefix pass the 256 positions
    with gen.greedy_steps(prompts) as fast:
        assert fast.next_tokens(prefix) == GreedySteps(gen, prompts).next_tokens(prefix)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_dp_vote_releases_the_same_tokens_batched_or_not(gen: HFGenerator, seed: int) -> None:
    prompt = Prompt(Task.ANSWER, "Where does Jon Berg live?")
    voters = [(d,) for d in DOCS] + [("",), (DOCS[0],)]  # padding, and a repeated context
    config = DPVoteConfig(epsilon_token=1.0, max_tokens=8, simulation=True)
    slow_gen = Unbatched(gen)
    fast = dp_vote_generate(gen, prompt, voters, 6.0, config, rng=seed)
    slow = dp_vote_generate(slow_gen, prompt, voters, 6.0, config, rng=seed)
    assert fast.completion.tokens == slow.completion.tokens
    assert fast.discoveries == slow.discoveries and fast.event == slow.event
    # batched: the vocabulary, then one call per step for every voter together
    assert fast.calls <= 1 + config.max_tokens
    assert len(fast.completion.tokens) >= 1


def test_dp_vote_paths_agree_through_discoveries_and_non_rag_tokens(gen: HFGenerator) -> None:
    """Across seeds, both the non-RAG token and the exponential mechanism are released
    (the threshold is crossed both ways), identically on both paths."""
    prompt = Prompt(Task.ANSWER, "Where was Marta Olsen born?")
    voters = [(d,) for d in DOCS] * 2
    vocab = tuple(gen.next_token_distribution(prompt).tokens)
    discoveries, asked = [], 0
    for seed in range(10):
        config = DPVoteConfig(epsilon_token=0.5, theta=6, max_tokens=6, simulation=True)
        slow_gen = Unbatched(gen)
        fast = dp_vote_generate(gen, prompt, voters, 3.0, config, vocabulary=vocab, rng=seed)
        slow = dp_vote_generate(slow_gen, prompt, voters, 3.0, config, vocabulary=vocab, rng=seed)
        assert fast.completion.tokens == slow.completion.tokens
        assert fast.discoveries == slow.discoveries
        discoveries.append(fast.discoveries)
        asked += slow_gen.asked
    assert 0 < sum(discoveries) < 10 * 6
    assert asked > 0  # the unbatched path asked voters that left their own answers


class Joined(Unbatched):
    """A generator whose own token join is recognisable."""

    def tokens_to_text(self, tokens: Sequence[str]) -> str:
        return "|".join(tokens)


def test_dp_vote_text_is_the_generator_s_own_detokenisation(gen: HFGenerator) -> None:
    """Released sub-word pieces read as the model's text (byte-level "Ġthe" is " the"),
    not as words joined by spaces: the answer a user reads and a QA match scores."""
    prompt = Prompt(Task.ANSWER, "Where was Marta Olsen born?")
    voters = [(d,) for d in DOCS] * 2
    config = DPVoteConfig(epsilon_token=1.0, max_tokens=8, simulation=True)
    out = dp_vote_generate(gen, prompt, voters, 6.0, config, rng=0).completion
    assert out.text == gen.tokens_to_text(out.tokens)
    joined = dp_vote_generate(Joined(gen), prompt, voters, 6.0, config, rng=0).completion
    assert len(joined.tokens) >= 2 and joined.text == "|".join(joined.tokens)
    piece = next(t for t in gen.next_token_distribution(prompt).tokens if t.startswith("Ġ"))
    assert gen.tokens_to_text([piece, piece]) == (" " + piece[1:]) * 2

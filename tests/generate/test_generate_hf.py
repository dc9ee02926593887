"""The ``hf:PATH`` backend on a tiny random GPT-2 with a BPE tokenizer trained here."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import pytest

from ragprivacy.errors import BackendError, DataUnavailableError
from ragprivacy.generate import HFGenerator, Prompt, Task, create_generator, join_completions

SENTENCES = [
    "Marta Olsen was born in Velmora.",
    "The weather was mild for most of the week.",
    "Jon Berg works at Halden Clinic and lives in Tarsk.",
    "Please answer the question based on the context.",
    "Instruction: Give a simple short answer for the question.",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def _build(path: Path, *, chat: bool = False) -> Path:
    import torch  # here, not at import: collecting the suite need not load torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(SENTENCES * 3, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        # Said explicitly: transformers < 4.45 warns when a tokenizer leaves it unset.
        clean_up_tokenization_spaces=False,
    )
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    torch.manual_seed(0)  # the test builds its own fixture model; library code never seeds
    config = GPT2Config(
        vocab_size=len(fast),
        n_layer=2,
        n_head=2,
        n_embd=32,
        n_positions=128,
        initializer_range=0.5,
        bos_token_id=fast.eos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture(scope="module")
def gen(model_dir: Path) -> HFGenerator:
    g = create_generator(f"hf:{model_dir}", max_tokens=6, threads=1)
    assert isinstance(g, HFGenerator)
    return g


PROMPTS = [
    Prompt(Task.ANSWER, "Where was Marta Olsen born?", ("Marta Olsen was born in Velmora.",)),
    Prompt(Task.CONTINUE, "The weather", ()),
    Prompt(Task.JUDGE, "Jon Berg works at Halden Clinic.", ("Jon Berg lives in Tarsk.",) * 3),
]


def test_generate_shapes(gen: HFGenerator) -> None:
    out = gen.generate(PROMPTS[0])
    assert 1 <= len(out.tokens) <= 6
    assert out.logprobs is not None and len(out.logprobs) == len(out.tokens)
    assert all(lp <= 0 for lp in out.logprobs)
    assert len(gen.generate(PROMPTS[0], max_tokens=2).tokens) <= 2
    assert gen.config()["path"] == str(gen.path)


def test_logprobs_agree_between_generate_score_and_distribution(gen: HFGenerator) -> None:
    for prompt in PROMPTS:
        out = gen.generate(prompt)
        scored = gen.score(prompt, out.tokens)
        assert scored.logprobs == pytest.approx(out.logprobs, abs=1e-4)
        for i in range(len(out.tokens)):
            dist = gen.next_token_distribution(prompt, out.tokens[:i])
            assert len(dist.tokens) == gen.model.config.vocab_size
            assert sum(dist.probs) == pytest.approx(1.0, abs=1e-6)
            assert dist.logprob(out.tokens[i]) == pytest.approx(out.logprobs[i], abs=1e-4)
            # greedy; the two float32 paths (a cached decoding step, a fresh forward
            # pass) differ in summation order: as close as the log-probabilities above
            assert max(dist.probs) == pytest.approx(math.exp(out.logprobs[i]), rel=1e-4)
        assert gen.tokens_to_text(out.tokens) == out.text


def test_over_long_prompts_keep_their_end(gen: HFGenerator) -> None:
    prompt = Prompt(Task.CONTINUE, "The weather was mild. " * 80, (), options={"template": "plain"})
    assert len(gen.tokenizer(prompt.render())["input_ids"]) > gen.model.config.n_positions
    out = gen.generate(prompt)
    assert 1 <= len(out.tokens) <= 6
    first = gen.next_token_distribution(prompt)
    assert first.logprob(out.tokens[0]) == pytest.approx(out.logprobs[0], abs=1e-4)
    assert gen.score(prompt, out.tokens).logprobs == pytest.approx(out.logprobs, abs=1e-4)


def test_score_of_text(gen: HFGenerator) -> None:
    out = gen.score(PROMPTS[0], " Velmora.")
    assert out.text == " Velmora."
    assert gen.tokens_to_text(out.tokens) == " Velmora."
    assert len(set(gen.next_token_distribution(PROMPTS[0]).tokens)) == gen.model.config.vocab_size
    assert out.logprobs is not None and all(lp < 0 for lp in out.logprobs)


def test_left_padded_batches_match_single_prompts(gen: HFGenerator) -> None:
    singles = [gen.generate(p) for p in PROMPTS]
    batched = gen.generate_batch(PROMPTS)
    for one, many in zip(singles, batched):
        assert many.tokens == one.tokens
        assert many.logprobs == pytest.approx(one.logprobs, abs=1e-4)


def test_stream_yields_the_answer_piece_by_piece(gen: HFGenerator, model_dir: Path) -> None:
    """The streamed pieces join to generate's answer (text, tokens, log-probabilities),
    a held-back character or space included; a long answer comes in several pieces, and
    closing the stream early stops the decoding."""
    long = HFGenerator(model_dir, max_tokens=24, threads=1)
    for g in (gen, long):
        for prompt in PROMPTS:
            pieces = list(g.stream(prompt))
            whole = g.generate(prompt)
            joined = join_completions(pieces)
            assert joined.text == whole.text and joined.tokens == whole.tokens
            assert joined.logprobs == pytest.approx(whole.logprobs, abs=1e-4)
            assert all(p.text for p in pieces[:-1])  # no empty piece but maybe the last
    many = list(long.stream(PROMPTS[1]))
    assert len(many) > 1, [p.text for p in many]
    stream = long.stream(PROMPTS[1])
    first = next(stream)
    stream.close()
    assert first.text and first.tokens == many[0].tokens


def test_greedy_and_seeded_sampling_are_deterministic(gen: HFGenerator, model_dir: Path) -> None:
    assert gen.generate(PROMPTS[1]) == gen.generate(PROMPTS[1])
    a = HFGenerator(model_dir, sampling=True, rng=5, max_tokens=8)
    b = HFGenerator(model_dir, sampling=True, rng=5, max_tokens=8)
    c = HFGenerator(model_dir, sampling=True, rng=6, max_tokens=8)
    runs = [[g.generate(PROMPTS[1]).tokens for _ in range(3)] for g in (a, b, c)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    sample = a.generate(PROMPTS[1])
    assert a.score(PROMPTS[1], sample.tokens).logprobs == pytest.approx(sample.logprobs, abs=1e-4)


def test_chat_template_puts_the_instruction_in_the_system_turn(
    model_dir: Path, tmp_path: Path
) -> None:
    chat_dir = tmp_path / "chat"
    shutil.copytree(model_dir, chat_dir)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(chat_dir, local_files_only=True)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(chat_dir)
    gen = HFGenerator(chat_dir, max_tokens=2)
    assert gen.use_chat
    prompt = Prompt(Task.ANSWER, "Where?", ("Doc.",), instruction="Do not repeat the context.")
    text = gen.prompt_text(prompt)
    assert text.startswith("<system>Do not repeat the context.\n<user>Instruction:")
    assert text.endswith("<assistant>")
    assert "Do not repeat" not in text.split("<user>", 1)[1]
    assert len(gen.generate(prompt).tokens) <= 2
    assert not HFGenerator(chat_dir, chat_template=False).use_chat


def test_missing_model_is_data_unavailable(tmp_path: Path) -> None:
    with pytest.raises(DataUnavailableError, match="nothing is downloaded"):
        create_generator(f"hf:{tmp_path / 'nope'}")
    with pytest.raises(DataUnavailableError, match="hf:PATH"):
        create_generator("hf")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataUnavailableError, match=r"config\.json"):
        HFGenerator(tmp_path / "empty")


def test_dtype_is_applied(model_dir: Path) -> None:
    # from_pretrained takes `dtype` from transformers 4.56 on (it was `torch_dtype`; 4.44
    # refuses `dtype`), hence the hf extra's lower bound.
    import torch

    g = HFGenerator(model_dir, dtype="bfloat16", max_tokens=2)
    assert g.model.dtype == torch.bfloat16
    assert len(g.generate(PROMPTS[0]).tokens) <= 2


def test_missing_transformers_is_a_backend_error(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(BackendError, match=r"ragprivacy\[hf\]"):
        HFGenerator(model_dir)


def test_cuda_matches_cpu(gen: HFGenerator, model_dir: Path) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    cuda = HFGenerator(model_dir, device="cuda", max_tokens=6)
    for prompt in PROMPTS:
        a, b = gen.generate(prompt), cuda.generate(prompt)
        assert a.tokens == b.tokens
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-3)
    assert cuda.score(PROMPTS[0], " Velmora.").logprobs == pytest.approx(
        gen.score(PROMPTS[0], " Velmora.").logprobs, abs=1e-3
    )

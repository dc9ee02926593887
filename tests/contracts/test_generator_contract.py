"""The contract every generator meets, parametrised over every registered generator that
runs offline: ``reference`` (the weight-free reader), ``hf`` (a tiny random GPT-2 with a
BPE tokenizer trained here; nothing is downloaded), ``openai`` (the HTTP client
against an in-process ``httpx.MockTransport``; no socket, no network), and ``smollm2`` and
``gguf`` (SmolLM2-135M-Instruct from ``make realmodel``; each check loads it, twice for
the determinism check, so these run with ``-m slow``, e.g. ``make test-all``: the default
suite checks the same behaviour once in tests/generate/test_generate_gguf.py).

``generate_batch`` answers each prompt as ``generate`` does, in order; an empty batch
is empty; a generator documented as deterministic gives the same completion for the same
prompt, call after call and instance after instance; completions and next-token
distributions are well formed.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from ragprivacy.generate import Generator, Prompt, Task, create_generator, generator_names
from ragprivacy.types import Completion

# ------------------------------------------------------------------ offline backends


def _tiny_gpt2(path: Path) -> Path:
    """A 2-layer random GPT-2 and a BPE tokenizer trained on a few sentences."""
    torch = pytest.importorskip("torch")
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    sentences = [
        "Patient Ana was treated for asthma and holds an access code.",
        "Who was treated for migraine? Answer the question from the context.",
        "The weather was mild for most of the week.",
    ]
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(sentences * 3, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(path)
    torch.manual_seed(0)  # the fixture model's weights; library code never seeds
    config = transformers.GPT2Config(
        vocab_size=len(fast),
        n_layer=2,
        n_head=2,
        n_embd=32,
        n_positions=256,
        initializer_range=0.5,
        bos_token_id=fast.eos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    transformers.GPT2LMHeadModel(config).save_pretrained(path)
    return path


def _mock_server(request: object) -> object:
    """An OpenAI-compatible server as a pure function of the request: the answer (and its
    log-probabilities) is a hash of the prompt, so a batch answered out of order shows."""
    import httpx

    assert isinstance(request, httpx.Request)
    body = json.loads(request.content)
    seed = zlib.crc32(json.dumps(body.get("messages") or body.get("prompt")).encode())
    n = min(int(body["max_tokens"]), 3)
    words = [f" w{(seed >> (4 * i)) % 16}" for i in range(n)]
    lps = [-((seed >> i) % 7 + 1) / 10 for i in range(n)]
    top = {f" w{(seed + j) % 16}": -(j + 1) / 4 for j in range(int(body.get("top_logprobs") or 3))}
    if request.url.path.endswith("/chat/completions"):
        content = [
            {
                "token": w,
                "logprob": lp,
                "top_logprobs": [{"token": t, "logprob": v} for t, v in top.items()],
            }
            for w, lp in zip(words, lps)
        ]
        choice = {"message": {"role": "assistant", "content": "".join(words)}}
        choice["logprobs"] = {"content": content}
        return httpx.Response(200, json={"choices": [choice]})
    lp = {
        "tokens": words,
        "token_logprobs": lps,
        "top_logprobs": [top],
        "text_offset": [0] * n,
    }
    return httpx.Response(200, json={"choices": [{"text": "".join(words), "logprobs": lp}]})


@dataclass(frozen=True)
class GeneratorSpec:
    """``build(workdir)`` → a generator. ``deterministic``: documented to give the same
    completion for the same prompt (across calls and instances built alike)."""

    build: Callable[[Path], Generator]
    deterministic: bool


def _hf(workdir: Path) -> Generator:
    path = workdir / "tiny-gpt2"
    if not (path / "config.json").exists():
        _tiny_gpt2(path)
    return create_generator(f"hf:{path}", max_tokens=4, threads=1, batch_size=2)


def _openai(workdir: Path) -> Generator:
    import httpx

    return create_generator(
        "openai:mock-model@http://127.0.0.1:9/v1",
        transport=httpx.MockTransport(_mock_server),  # type: ignore[arg-type]
        max_tokens=4,
        top_logprobs=3,
        concurrency=3,
        max_retries=0,
    )


def _http_server(request: object) -> object:
    """An API of its own shape: ``{"question"}`` → ``{"data": {"text"}}``, the answer a
    hash of the question."""
    import httpx

    assert isinstance(request, httpx.Request)
    seed = zlib.crc32(request.content)
    words = " ".join(f"w{(seed >> (4 * i)) % 16}" for i in range(3))
    return httpx.Response(200, json={"data": {"text": words}})


def _http(_: Path) -> Generator:
    import httpx

    from ragprivacy.generate import HTTPTemplateGenerator

    template = {
        "url": "http://127.0.0.1:9/ask",
        "method": "POST",
        "headers": {},
        "body": {"question": "{{query}}"},
        "answer": "data.text",
        "timeout": 5.0,
    }
    client = httpx.Client(transport=httpx.MockTransport(_http_server))  # type: ignore[arg-type]
    return HTTPTemplateGenerator(template, client=client)


def _smollm2(_: Path) -> Generator:
    return create_generator("smollm2", max_tokens=4, threads=1, batch_size=2)


def _gguf(_: Path) -> Generator:
    from ragprivacy.generate import smollm2_path

    path = smollm2_path()
    assert path is not None  # the realmodel marker skips the test without it
    return create_generator(f"gguf:{path}", max_tokens=4, threads=1, batch_size=2)


GENERATORS: dict[str, GeneratorSpec] = {
    # "rng=None means seed 0: the reader is deterministic by default"
    "reference": GeneratorSpec(lambda _: create_generator("reference"), deterministic=True),
    # greedy decoding by default
    "hf": GeneratorSpec(_hf, deterministic=True),
    # whatever the server does (temperature 0 is not a promise of determinism)
    "openai": GeneratorSpec(_openai, deterministic=False),
    # whatever the API answers
    "http": GeneratorSpec(_http, deterministic=False),
    # greedy decoding by default (the hf backend on a GGUF file)
    "smollm2": GeneratorSpec(_smollm2, deterministic=True),
    "gguf": GeneratorSpec(_gguf, deterministic=True),
}
#: Generators that load a real model: slow, and skipped without it.
REAL_MODELS = {"smollm2", "gguf"}


def _params(names: list[str]) -> list[object]:
    marks = [pytest.mark.realmodel, pytest.mark.slow]
    return [pytest.param(n, marks=marks) if n in REAL_MODELS else n for n in names]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("generators")


#: The generators documented as deterministic (and those without an entry, to fail).
DETERMINISTIC = [n for n in generator_names() if n not in GENERATORS or GENERATORS[n].deterministic]


@pytest.fixture(scope="module")
def built(workdir: Path) -> Iterator[dict[str, Generator]]:
    """Each backend, built once per module (and closed after it)."""
    cache: dict[str, Generator] = {}
    yield cache
    for gen in cache.values():
        close = getattr(gen, "close", None)
        if callable(close):
            close()


def _backend(name: str, built: dict[str, Generator], workdir: Path) -> tuple[str, Generator]:
    spec = GENERATORS.get(name)
    if spec is None:
        pytest.fail(
            f"Generator {name!r} is registered but has no factory entry: add an offline way "
            "to build it to GENERATORS in tests/contracts/test_generator_contract.py."
        )
    if name not in built:
        built[name] = spec.build(workdir)
    return name, built[name]


@pytest.fixture(params=_params(generator_names()))
def backend(
    request: pytest.FixtureRequest, built: dict[str, Generator], workdir: Path
) -> tuple[str, Generator]:
    return _backend(request.param, built, workdir)


@pytest.fixture(params=_params(DETERMINISTIC))
def deterministic_backend(
    request: pytest.FixtureRequest, built: dict[str, Generator], workdir: Path
) -> tuple[str, Generator]:
    return _backend(request.param, built, workdir)


@pytest.fixture
def prompts(contract: SimpleNamespace) -> list[Prompt]:
    docs = contract.DOCS
    return [
        Prompt(Task.ANSWER, "Who was treated for asthma?", (docs[0].text, docs[5].text)),
        Prompt(
            Task.CONTINUE, "Patient Boris was treated", (docs[1].text,), options={"max_tokens": 3}
        ),
        Prompt(Task.CONTINUE, "The weather was", (), options={"max_tokens": 2}),
        Prompt(Task.JUDGE, docs[2].text, (docs[2].text,), options={"template": "rag-mia"}),
        Prompt(Task.FILL_MASKS, "Patient [Mask_1] was treated for asthma.", (docs[0].text,)),
    ]


def _same(a: Completion, b: Completion) -> None:
    assert a.text == b.text and a.tokens == b.tokens
    if a.logprobs is None or b.logprobs is None:
        assert a.logprobs is None and b.logprobs is None
    else:
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_every_registered_generator_has_a_factory_entry() -> None:
    missing = sorted(set(generator_names()) - set(GENERATORS))
    assert not missing, f"Add offline factory entries to GENERATORS for: {missing}"


def test_generate_batch_answers_each_prompt_as_generate_does(
    backend: tuple[str, Generator], prompts: list[Prompt]
) -> None:
    _, gen = backend
    batch = gen.generate_batch(prompts)
    assert len(batch) == len(prompts)
    for prompt, got in zip(prompts, batch):
        assert isinstance(got, Completion)
        _same(got, gen.generate(prompt))
    reordered = gen.generate_batch(prompts[::-1])
    for got, want in zip(reordered, batch[::-1]):
        _same(got, want)
    assert len({c.text for c in batch}) > 1  # answers depend on the prompt
    capped = gen.generate_batch(prompts[1:3], max_tokens=1)
    for prompt, got in zip(prompts[1:3], capped):
        _same(got, gen.generate(prompt, max_tokens=1))


def test_an_empty_batch_is_empty(backend: tuple[str, Generator]) -> None:
    _, gen = backend
    assert gen.generate_batch([]) == []
    assert gen.generate_batch([], max_tokens=3) == []


def test_deterministic_generators_repeat_themselves(
    deterministic_backend: tuple[str, Generator], prompts: list[Prompt], workdir: Path
) -> None:
    name, gen = deterministic_backend
    twin = GENERATORS[name].build(workdir)
    first = gen.generate_batch(prompts)
    for prompt, want in zip(prompts, first):
        _same(gen.generate(prompt), want)
        _same(twin.generate(prompt), want)
        assert gen.next_token(prompt) == twin.next_token(prompt)


def test_completions_are_well_formed(backend: tuple[str, Generator], prompts: list[Prompt]) -> None:
    _, gen = backend
    for prompt, got in zip(prompts, gen.generate_batch(prompts)):
        limit = prompt.options.get("max_tokens")
        if prompt.task is Task.CONTINUE and limit is not None:
            assert len(got.tokens) <= limit
            assert len(gen.generate(prompt, max_tokens=1).tokens) <= 1
        if gen.exposes_logprobs and got.tokens:
            assert got.logprobs is not None and len(got.logprobs) == len(got.tokens)
        for lp in got.logprobs or ():
            assert math.isfinite(lp) and lp <= 1e-9


def test_next_token_is_the_first_maximum_of_a_distribution(
    backend: tuple[str, Generator], prompts: list[Prompt]
) -> None:
    _, gen = backend
    for prompt in prompts[:3]:
        dist = gen.next_token_distribution(prompt)
        assert len(dist.tokens) == len(dist.probs) > 0
        assert all(p >= 0 for p in dist.probs)
        assert sum(dist.probs) == pytest.approx(1.0, abs=1e-6)
        best = max(range(len(dist.probs)), key=dist.probs.__getitem__)
        assert gen.next_token(prompt) == dist.tokens[best]

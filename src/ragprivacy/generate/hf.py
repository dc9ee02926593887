"""``hf:PATH`` — a Hugging Face ``transformers`` causal LM loaded from a local directory.

Nothing is downloaded: the model and tokenizer load with ``local_files_only=True`` (and
``HF_HUB_OFFLINE=1`` is set unless the environment already says otherwise). ``torch`` and
``transformers`` are imported only when a model is built, so the package imports without
them.

* Prompt text: with a chat template (when the tokenizer has one and ``chat_template`` is
  not ``False``) the defense/system instruction becomes the system message and the rest
  of :func:`~ragprivacy.generate.templates.render_prompt` the user message; otherwise
  ``prompt.render()``. Over-long prompts keep their last tokens (leaving room for
  ``max_tokens`` new ones).
* Generation: our own batched decoding loop with the key/value cache, left padding and
  explicit position ids, greedy by default, seeded sampling (a ``torch.Generator``, no
  global seeding) with ``temperature`` on request. The cache travels under the name the
  installed ``transformers`` uses (``cache`` from 5.24 on, ``past_key_values`` before; see
  :func:`_cache_keyword`). Log-probabilities are those of the model's own distribution
  (``log_softmax`` of the logits, before temperature), so
  ``generate``, ``score`` and ``next_token_distribution`` agree.
* Token strings are the tokenizer's own vocabulary entries (``"Ġworld"`` for byte-level
  BPE), one per id, so they map back to ids exactly: ``score`` and
  ``next_token_distribution`` accept a prefix/continuation as such a sequence (token
  voting feeds chosen tokens back this way) or as text; :meth:`HFGenerator.tokens_to_text`
  turns them into text. ``Completion.text`` is the decoded text.
* ``next_token_distribution`` covers the whole vocabulary of the output layer;
  ``next_token`` is its first maximum, with an end-of-text id read as ``"</s>"`` (where
  ``generate`` stops).
* ``greedy_steps`` (token voting's voters, Private-RAG Alg. 4 lines 6–8): every prompt in
  one left-padded forward pass, then one batched single-token pass per step of the shared
  prefix, the key/value cache kept across steps (:class:`_HFGreedySteps`); it gives the
  tokens ``next_token`` gives prompt by prompt.
* Passes whose logits are read only at the last position ask the model for that position
  alone (``logits_to_keep=1`` where the model's ``forward`` takes it): the output layer
  over every prompt position is most of a prefill's memory for a 50k-token vocabulary.
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ragprivacy._random import RngLike, make_rng
from ragprivacy._validation import check_choice, check_positive, check_positive_int
from ragprivacy.errors import BackendError, DataUnavailableError
from ragprivacy.generate.base import (
    Generator,
    GreedySteps,
    TokenDistribution,
    register_generator,
)
from ragprivacy.generate.prompt import Prompt
from ragprivacy.types import Completion

__all__ = ["HFGenerator"]

_DTYPES = ("auto", "float32", "float16", "bfloat16")
_EOS = "</s>"


def _import_backend(generator: str = "hf", extra: str = "hf") -> tuple[Any, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise BackendError(
            f"The {generator!r} generator needs torch and transformers, which could not be "
            f"imported ({exc}); install the {extra} extra: pip install 'ragprivacy[{extra}]'."
        ) from exc
    return torch, transformers


def _cache_keyword(model: Any) -> str:
    """The name under which ``model.forward`` takes and returns its key/value cache.

    transformers 5.24 renamed the argument and the output field ``past_key_values`` to
    ``cache``; the old name still works there but warns that it is deprecated, and
    releases before 5.24 (back to the minimum we test, see ``requirements/lowest.txt``)
    know only ``past_key_values``. Asking the signature rather than the version number
    also covers models whose code (``trust_remote_code``) kept the old name.
    """
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


class HFGenerator(Generator):
    """A local causal LM (see the module docstring).

    Args:
        path: directory holding the model and tokenizer (``save_pretrained`` layout).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"`` or ``"auto"``.
        dtype: ``"float32"``, ``"float16"``, ``"bfloat16"`` or ``"auto"`` (the checkpoint's).
        threads: torch intra-op threads (process-wide; ``None`` leaves torch's default).
        max_tokens: default number of new tokens.
        sampling: sample instead of greedy decoding.
        temperature: sampling temperature (> 0).
        batch_size: prompts per forward pass in :meth:`generate_batch`.
        chat_template: use the tokenizer's chat template (``None``: when it has one).
        trust_remote_code: passed to ``from_pretrained`` (off by default).
        rng: seed for sampling (``None`` = seed 0).
    """

    name = "hf"

    def __init__(
        self,
        path: str | Path,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        threads: int | None = None,
        max_tokens: int = 64,
        sampling: bool = False,
        temperature: float = 1.0,
        batch_size: int = 8,
        chat_template: bool | None = None,
        trust_remote_code: bool = False,
        rng: RngLike = None,
    ) -> None:
        self.path = Path(path).expanduser()
        self.dtype = check_choice("dtype", dtype, _DTYPES)
        self.max_tokens = check_positive_int("max_tokens", max_tokens)
        self.sampling = bool(sampling)
        self.temperature = check_positive("temperature", temperature)
        self.batch_size = check_positive_int("batch_size", batch_size)
        if threads is not None:
            threads = check_positive_int("threads", threads)
        self._check_files()
        torch, transformers = self._import_backend()
        self._torch = torch
        if threads is not None:
            torch.set_num_threads(threads)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        kwargs: dict[str, Any] = {
            "local_files_only": True,
            "trust_remote_code": trust_remote_code,
            "dtype": "auto" if self.dtype == "auto" else getattr(torch, self.dtype),
        }
        self.tokenizer, self.model = self._load(transformers, kwargs)
        self.model.to(device)
        self.model.eval()
        self._cache_kw = _cache_keyword(self.model)
        self._last_only: dict[str, int] = (
            {"logits_to_keep": 1}
            if "logits_to_keep" in inspect.signature(self.model.forward).parameters
            else {}
        )
        tok = self.tokenizer
        eos: set[int] = set()
        for value in (
            tok.eos_token_id,
            getattr(self.model.generation_config, "eos_token_id", None),
        ):
            if isinstance(value, int):
                eos.add(value)
            elif isinstance(value, (list, tuple)):
                eos.update(int(v) for v in value)
        self._eos = eos
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self._pad = int(pad) if pad is not None else 0
        self._bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        self.use_chat = bool(getattr(tok, "chat_template", None)) and chat_template is not False
        cfg = self.model.config
        self._max_len = int(
            getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", 0) or 0
        )
        if rng is None:
            self._seed = 0
        elif isinstance(rng, int) and not isinstance(rng, bool):
            make_rng(rng)  # validates the seed
            self._seed = int(rng)
        else:
            self._seed = int(make_rng(rng).integers(2**62))
        # Sampling draws on the CPU from this stream, whatever the device.
        self._generator = torch.Generator().manual_seed(self._seed)
        self._pieces: list[str] | None = None
        self._piece_ids: dict[str, int] = {}
        self._digest = self._files_digest()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={str(self.path)!r}, device={self.device!r}, "
            f"dtype={self.dtype!r})"
        )

    # ----------------------------------------------------------------- loading
    # What a subclass that reads another checkpoint format (GGUFGenerator) overrides;
    # decoding, scoring and token distributions below are shared.

    def _check_files(self) -> None:
        """Refuse a missing or incomplete ``self.path`` before importing torch."""
        if not self.path.exists():
            raise DataUnavailableError(
                f"No model directory at {str(self.path)!r}; 'hf:PATH' loads a local model "
                "(nothing is downloaded). Save one there with save_pretrained or point to a "
                "local snapshot."
            )
        if not (self.path / "config.json").is_file():
            # Checked here: given a directory without one, transformers may fail on an
            # optional tokenizer converter (protobuf, tiktoken) instead of saying so.
            raise DataUnavailableError(
                f"No config.json in {str(self.path)!r}; the directory needs config.json, the "
                "weights and the tokenizer files (the save_pretrained layout)."
            )

    def _import_backend(self) -> tuple[Any, Any]:
        return _import_backend()

    def _load(self, transformers: Any, kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """``(tokenizer, model)`` from ``self.path``; ``kwargs`` go to ``from_pretrained``
        (the dtype only to the model's)."""
        tok_kwargs = {k: v for k, v in kwargs.items() if k != "dtype"}
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(self.path, **tok_kwargs)
            model = transformers.AutoModelForCausalLM.from_pretrained(self.path, **kwargs)
        except (OSError, ValueError) as exc:
            raise DataUnavailableError(
                f"Could not load a causal LM and tokenizer from {str(self.path)!r} ({exc}); "
                "the directory needs config.json, the weights and the tokenizer files."
            ) from exc
        return tokenizer, model

    def _files_digest(self) -> str:
        h = hashlib.sha256()
        for name in sorted(p.name for p in self.path.iterdir() if p.is_file()):
            f = self.path / name
            if f.suffix in {".json", ".txt", ".model", ".jinja"}:
                h.update(name.encode() + b"\0" + f.read_bytes())
            else:
                h.update(f"{name}\0{f.stat().st_size}".encode())
        return h.hexdigest()

    def config(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "dtype": self.dtype,
            "max_tokens": self.max_tokens,
            "sampling": self.sampling,
            "temperature": self.temperature,
            "chat_template": self.use_chat,
            "seed": self._seed,
            "files": self._digest,
        }

    # ----------------------------------------------------------------- encoding

    def prompt_text(self, prompt: Prompt) -> str:
        """The exact text the model sees for ``prompt``."""
        if not self.use_chat:
            return prompt.render()
        user = replace(prompt, instruction=None).render() if prompt.instruction else None
        messages: list[dict[str, str]] = []
        if prompt.instruction and user is not None:
            messages = [
                {"role": "system", "content": prompt.instruction},
                {"role": "user", "content": user},
            ]
        else:
            messages = [{"role": "user", "content": prompt.render()}]
        try:
            return str(
                self.tokenizer.apply_chat_template(
                    messages, add_generation_prompt=True, tokenize=False
                )
            )
        except Exception:  # a template without a system role: fold it into the user turn
            merged = [{"role": "user", "content": prompt.render()}]
            return str(
                self.tokenizer.apply_chat_template(
                    merged, add_generation_prompt=True, tokenize=False
                )
            )

    def _prompt_ids(self, prompt: Prompt, reserve: int = 0) -> list[int]:
        ids = list(
            self.tokenizer(self.prompt_text(prompt), add_special_tokens=not self.use_chat)[
                "input_ids"
            ]
        )
        if not ids:
            if self._bos is None:
                raise BackendError(
                    "The prompt encodes to no tokens and the tokenizer has no BOS/EOS token to "
                    "start from; give the prompt some text."
                )
            ids = [int(self._bos)]
        if self._max_len:
            # The same cut for every call whose output fits in max_tokens, so generate,
            # score and next_token_distribution condition on the same prompt tokens.
            keep = self._max_len - max(self.max_tokens, reserve)
            if keep < 1:
                keep = max(self._max_len - reserve, 1)
            ids = ids[-keep:]
        return ids

    def _vocab_pieces(self) -> list[str]:
        """The tokenizer's own string for every id of the model's output layer."""
        if self._pieces is None:
            n = int(self.model.get_output_embeddings().weight.shape[0])
            raw = self.tokenizer.convert_ids_to_tokens(list(range(min(n, len(self.tokenizer)))))
            pieces = [t if isinstance(t, str) else f"<id:{i}>" for i, t in enumerate(raw)]
            pieces += [f"<id:{i}>" for i in range(len(pieces), n)]
            self._piece_ids = {p: i for i, p in enumerate(pieces)}
            self._pieces = pieces
        return self._pieces

    def _continuation_ids(self, continuation: str | Sequence[str]) -> list[int]:
        if isinstance(continuation, str):
            return list(self.tokenizer(continuation, add_special_tokens=False)["input_ids"])
        self._vocab_pieces()
        out: list[int] = []
        for piece in continuation:
            i = self._piece_ids.get(piece)
            if i is not None:
                out.append(i)
            else:  # not a vocabulary entry: treat it as text
                out.extend(self.tokenizer(piece, add_special_tokens=False)["input_ids"])
        return out

    def tokens_to_text(self, tokens: Sequence[str]) -> str:
        """Text of token strings as returned by this generator."""
        return str(self.tokenizer.decode(self._continuation_ids(tokens), skip_special_tokens=True))

    # ----------------------------------------------------------------- model calls

    def _forward(self, batch: list[list[int]], *, last_only: bool = False) -> tuple[Any, Any, Any]:
        """Left-padded forward pass; returns (logits, attention mask, cache). With
        ``last_only`` the logits may hold the last position alone (read ``[:, -1]``)."""
        torch = self._torch
        width = max(len(x) for x in batch)
        ids = torch.full((len(batch), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, x in enumerate(batch):
            ids[r, width - len(x) :] = torch.tensor(x, dtype=torch.long)
            mask[r, width - len(x) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        extra = self._last_only if last_only else {}
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **extra
        )
        return out.logits, mask, getattr(out, self._cache_kw)

    def _decode(
        self, prompts: Sequence[Prompt], limit: int
    ) -> Iterator[list[tuple[int, float] | None]]:
        """The batched decoding loop, one step at a time: each step yields, per prompt,
        its new token id and log-probability (``None`` once the prompt has ended). Closing
        the iterator stops decoding."""
        torch = self._torch
        batch = [self._prompt_ids(p, reserve=limit) for p in prompts]
        n = len(batch)
        done = [False] * n
        with torch.no_grad():  # not across a yield: grad mode is per thread
            logits, mask, past = self._forward(batch, last_only=True)
        last = logits[:, -1, :]
        pos = mask.sum(-1, keepdim=True) - 1
        for _ in range(limit):
            logp = torch.log_softmax(last.double(), dim=-1)
            if self.sampling:
                probs = torch.softmax(last.double() / self.temperature, dim=-1)
                nxt = torch.multinomial(probs.cpu(), 1, generator=self._generator)
                nxt = nxt.squeeze(-1).to(logp.device)
            else:
                nxt = logp.argmax(dim=-1)
            chosen = logp.gather(-1, nxt[:, None]).squeeze(-1).tolist()
            step: list[tuple[int, float] | None] = []
            for r, (t, lp) in enumerate(zip(nxt.tolist(), chosen)):
                done[r] = done[r] or t in self._eos
                step.append(None if done[r] else (t, float(lp)))
            if all(done):
                break
            yield step
            mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=mask.device)], 1)
            pos = pos + 1
            with torch.no_grad():
                out = self.model(
                    input_ids=nxt[:, None],
                    attention_mask=mask,
                    position_ids=pos,
                    use_cache=True,
                    **{self._cache_kw: past},
                )
            past, last = getattr(out, self._cache_kw), out.logits[:, -1, :]

    def _generate_chunk(self, prompts: Sequence[Prompt], limit: int) -> list[Completion]:
        new_ids: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        for step in self._decode(prompts, limit):
            for r, got in enumerate(step):
                if got is not None:
                    new_ids[r].append(got[0])
                    logprobs[r].append(got[1])
        pieces = self._vocab_pieces()
        return [
            Completion(
                self.tokenizer.decode(ids, skip_special_tokens=True),
                tuple(pieces[i] for i in ids),
                tuple(lps),
            )
            for ids, lps in zip(new_ids, logprobs)
        ]

    # ----------------------------------------------------------------- Generator API

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        return self.generate_batch([prompt], max_tokens=max_tokens)[0]

    def _limit(self, prompt: Prompt, max_tokens: int | None) -> int:
        value = max_tokens if max_tokens is not None else prompt.options.get("max_tokens")
        return self.max_tokens if value is None else check_positive_int("max_tokens", value)

    def stream(self, prompt: Prompt, *, max_tokens: int | None = None) -> Iterator[Completion]:
        """The answer token by token, from the same decoding loop as :meth:`generate`.

        Each piece's text is what the decoded answer so far adds to the text already
        yielded. A piece is held back while the decoded text ends in an incomplete UTF-8
        character (a byte-level token may carry half of one) or in whitespace (a
        tokenizer's clean-up may still join it to the next token); so the pieces' texts
        join to :meth:`generate`'s text, and a piece may carry several tokens."""
        pieces = self._vocab_pieces()
        ids: list[int] = []
        sent = ""
        tokens: list[str] = []
        lps: list[float] = []
        for step in self._decode([prompt], self._limit(prompt, max_tokens)):
            got = step[0]
            if got is None:
                break
            ids.append(got[0])
            tokens.append(pieces[got[0]])
            lps.append(got[1])
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            ready = text.rstrip()
            if ready.endswith("\ufffd") or not ready.startswith(sent) or len(ready) == len(sent):
                continue
            yield Completion(ready[len(sent) :], tuple(tokens), tuple(lps))
            sent, tokens, lps = ready, [], []
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        # the text not yet yielded: after ``sent``, unless a clean-up changed what was sent
        common = next(
            (i for i, (a, b) in enumerate(zip(text, sent)) if a != b), min(len(text), len(sent))
        )
        if common < len(text) or tokens:
            yield Completion(text[common:], tuple(tokens), tuple(lps))

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        """Answer ``prompts`` in left-padded batches of ``batch_size`` (prompts with
        different ``max_tokens`` options are batched separately)."""
        out: list[Completion | None] = [None] * len(prompts)
        groups: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            groups.setdefault(self._limit(p, max_tokens), []).append(i)
        for limit, members in groups.items():
            for s in range(0, len(members), self.batch_size):
                chunk = members[s : s + self.batch_size]
                for i, c in zip(chunk, self._generate_chunk([prompts[i] for i in chunk], limit)):
                    out[i] = c
        return [c for c in out if c is not None]

    def _next_ids(self, prompt: Prompt, prefix: Sequence[str] | str) -> list[int]:
        """The ids a next-token call conditions on: the prompt (cut as for one new token)
        and the prefix, keeping the last ``max_position_embeddings`` of them."""
        ids = self._prompt_ids(prompt, reserve=1)
        ids = ids + (self._continuation_ids(prefix) if prefix else [])
        if self._max_len and len(ids) > self._max_len:
            ids = ids[-self._max_len :]
        return ids

    def _piece_or_eos(self, token_id: int) -> str:
        return _EOS if token_id in self._eos else self._vocab_pieces()[token_id]

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        torch = self._torch
        with torch.no_grad():
            logits, _, _ = self._forward([self._next_ids(prompt, prefix)], last_only=True)
            probs = torch.softmax(logits[0, -1].double(), dim=-1).cpu().tolist()
        return TokenDistribution(tuple(self._vocab_pieces()), tuple(probs))

    def next_token(self, prompt: Prompt, prefix: Sequence[str] | str = ()) -> str:
        """The first maximum of :meth:`next_token_distribution` (the argmax of the
        logits, without building the distribution); an end-of-text id reads ``"</s>"``."""
        torch = self._torch
        with torch.no_grad():
            logits, _, _ = self._forward([self._next_ids(prompt, prefix)], last_only=True)
            return self._piece_or_eos(int(logits[0, -1].argmax()))

    def greedy_steps(self, prompts: Sequence[Prompt]) -> GreedySteps:
        """Batched greedy steps with the key/value cache kept (:class:`_HFGreedySteps`)."""
        return _HFGreedySteps(self, prompts)

    def score(self, prompt: Prompt, continuation: str | Sequence[str]) -> Completion:
        """Teacher-forced log-probabilities of ``continuation`` (a text, or the token
        strings ``generate`` returned)."""
        torch = self._torch
        cont = self._continuation_ids(continuation)
        ids = self._prompt_ids(prompt, reserve=len(cont))
        pieces = self._vocab_pieces()
        if not cont:
            text = continuation if isinstance(continuation, str) else ""
            return Completion(text, (), ())
        with torch.no_grad():
            logits, _, _ = self._forward([ids + cont])
            logp = torch.log_softmax(logits[0].double(), dim=-1)
            start = len(ids) - 1
            rows = torch.arange(start, start + len(cont), device=logp.device)
            target = torch.tensor(cont, device=logp.device)
            lps = logp[rows, target].cpu().tolist()
        text = (
            continuation
            if isinstance(continuation, str)
            else self.tokenizer.decode(cont, skip_special_tokens=True)
        )
        return Completion(text, tuple(pieces[i] for i in cont), tuple(float(x) for x in lps))


class _HFGreedySteps(GreedySteps):
    """:class:`GreedySteps` in one forward pass per step (Private-RAG Alg. 4 lines 6–8).

    The first call runs every prompt (and the prefix so far) in one left-padded pass —
    the same padding, attention mask and position ids as ``generate_batch`` — and keeps
    the key/value cache; each later call whose prefix extends the last one feeds only the
    new prefix tokens, the same ones to every row, as one batched pass. Each row's token
    is the argmax of its last logits, as :meth:`HFGenerator.next_token` gives it for that
    prompt alone (up to floating-point differences between a padded batch and a single
    sequence, which decide only exact near-ties). A prefix that does not extend the last
    one starts over; once prompt and prefix would pass the model's positions (where the
    single-prompt path cuts the prompt's start) the rows are asked one by one.
    """

    batched = True

    def __init__(self, generator: HFGenerator, prompts: Sequence[Prompt]) -> None:
        super().__init__(generator, prompts)
        self._hf = generator
        self._ids = [generator._prompt_ids(p, reserve=1) for p in self.prompts]
        self._fed: list[int] | None = None  # the prefix ids the cache holds
        self._past: Any = None
        self._mask: Any = None
        self._pos: Any = None
        self._last: Any = None

    def next_tokens(self, prefix: Sequence[str], rows: Sequence[int] | None = None) -> list[str]:
        hf, torch = self._hf, self._hf._torch
        ids = hf._continuation_ids(prefix) if prefix else []
        longest = max((len(x) for x in self._ids), default=0)
        if not self._ids or (hf._max_len and longest + len(ids) > hf._max_len):
            self.close()
            return super().next_tokens(prefix, rows)
        with torch.no_grad():
            fed = self._fed
            if fed is None or ids[: len(fed)] != fed:
                logits, self._mask, self._past = hf._forward(
                    [x + ids for x in self._ids], last_only=True
                )
                self._pos = self._mask.sum(-1, keepdim=True) - 1
                self._last = logits[:, -1, :]
            elif len(ids) > len(fed):
                new = ids[len(fed) :]
                n, k = len(self._ids), len(new)
                step = torch.tensor([new] * n, dtype=torch.long, device=self._mask.device)
                ones = torch.ones((n, k), dtype=self._mask.dtype, device=self._mask.device)
                self._mask = torch.cat([self._mask, ones], 1)
                pos = self._pos + torch.arange(1, k + 1, device=self._pos.device)[None, :]
                out = hf.model(
                    input_ids=step,
                    attention_mask=self._mask,
                    position_ids=pos,
                    use_cache=True,
                    **{hf._cache_kw: self._past},
                    **hf._last_only,
                )
                self._past = getattr(out, hf._cache_kw)
                self._pos = pos[:, -1:]
                self._last = out.logits[:, -1, :]
            self._fed = ids
            best = self._last.argmax(dim=-1).tolist()
        picked = range(len(self._ids)) if rows is None else rows
        return [hf._piece_or_eos(int(best[i])) for i in picked]

    def close(self) -> None:
        self._past = self._mask = self._pos = self._last = None
        self._fed = None


def _create(path: str = "", **kwargs: Any) -> HFGenerator:
    if not path:
        raise DataUnavailableError(
            "The 'hf' generator needs a local model directory: use 'hf:PATH'."
        )
    return HFGenerator(path, **kwargs)


register_generator("hf", _create)

"""The attacker's own language tools: a proxy language model (tokenizer pieces, rank
scores, probabilities) and a pluggable spelling corrector.

MBA (Section 4.3, Alg. 1–4) and S-RAG (Alg. 1) rank words by how hard a *proxy* LM finds
them to predict; the papers used GPT-2 XL and a Hugging Face spelling-correction model.
Offline, the defaults are:

* :class:`NGramProxy` — the word-level Kneser–Ney background model
  (:class:`~ragprivacy.generate.BackgroundModel`) for ranks and probabilities, with a
  BPE tokenizer trained deterministically with ``tokenizers`` on the same public,
  non-member text for the fragmented-word test (a word is *fragmented* when the tokenizer
  splits it into more than one piece). A word the background model never saw gets the
  worst rank, ``|V| + 1``. Since the model is word-level, every piece of a fragmented
  word is ranked as the whole word (a deviation from Alg. 3, which ranks pieces with a
  subword LM; :class:`HFProxy` does that).
* :class:`HFProxy` — a local Hugging Face causal LM and its tokenizer (``hf:PATH``).
* :class:`PySpellCorrector` — ``pyspellchecker`` (Norvig edit distance over a word
  frequency list) behind the :class:`SpellCorrector` interface; it looks at the last
  word of the three-word window of Alg. 1 only, and leaves capitalised words and words
  with digits alone (a frequency list would "correct" names). Its edit distance is 1 by
  default: human typos are mostly one edit, and distance 2 costs seconds per word. A
  real spelling-correction model plugs in by implementing :meth:`SpellCorrector.correct`.
"""

from __future__ import annotations

import hashlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragprivacy._validation import check_positive_int
from ragprivacy.errors import ConfigError, DataUnavailableError
from ragprivacy.generate import BackgroundModel, build_background, detokenize, normalize

__all__ = [
    "HFProxy",
    "NGramProxy",
    "NoCorrector",
    "ProxyLM",
    "PySpellCorrector",
    "SpellCorrector",
    "create_proxy",
    "create_spell_corrector",
]


class ProxyLM(ABC):
    """A proxy language model over word units (the shared word tokenizer's tokens)."""

    name = "proxy"

    @abstractmethod
    def pieces(self, word: str) -> list[str]:
        """The proxy tokenizer's pieces of ``word`` (more than one: a fragmented word)."""

    @abstractmethod
    def word_prob(self, prefix: Sequence[str], word: str) -> float:
        """P(word | prefix) under the proxy."""

    @abstractmethod
    def word_rank(self, prefix: Sequence[str], word: str) -> int:
        """1 + the number of candidates the proxy finds more probable than ``word``."""

    def piece_ranks(self, prefix: Sequence[str], word: str) -> list[int]:
        """Ranks of each piece of ``word`` given ``prefix`` and the pieces before it."""
        return [self.word_rank(prefix, word)] * len(self.pieces(word))

    def fragmented(self, word: str) -> bool:
        return len(self.pieces(word)) > 1

    def config(self) -> dict[str, Any]:
        return {"name": self.name}


def _train_bpe(texts: Sequence[str], vocab_size: int) -> Any:
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    except ImportError:  # pragma: no cover - tokenizers ships with the hf extra
        return None
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=["[UNK]"], show_progress=False
    )
    tok.train_from_iterator(list(texts), trainer)
    return tok


class NGramProxy(ProxyLM):
    """Ranks from the background n-gram model; pieces from a BPE tokenizer trained on the
    same public texts (see the module docstring).

    Args:
        background: a fitted background model, or public non-member texts to fit one on.
        texts: texts to train the BPE tokenizer on (default: ``background`` when it is a
            list of texts; required otherwise).
        vocab_size: BPE vocabulary size.

    >>> proxy = NGramProxy(["the doctor said the pain was mild"] * 3, vocab_size=60)
    >>> proxy.word_rank(["the"], "doctor") < proxy.word_rank(["the"], "zebra")
    True
    """

    name = "ngram"

    def __init__(
        self,
        background: BackgroundModel | Sequence[str],
        *,
        texts: Sequence[str] | None = None,
        vocab_size: int = 4000,
    ) -> None:
        if isinstance(background, BackgroundModel):
            self.background = background
            fit_texts = list(texts) if texts is not None else None
        else:
            fit_texts = list(background) if texts is None else list(texts)
            self.background = build_background(list(background))
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self._tokenizer = _train_bpe(fit_texts, self.vocab_size) if fit_texts else None
        self._pieces: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        digest = hashlib.sha256(self.background.state_digest().encode())
        digest.update(str(self.vocab_size).encode())
        self._digest = digest.hexdigest()[:16]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def pieces(self, word: str) -> list[str]:
        with self._lock:
            hit = self._pieces.get(word)
        if hit is not None:
            return hit
        if self._tokenizer is not None:
            out = list(self._tokenizer.encode(word).tokens) or [word]
        else:  # no tokenizer: a word the background never saw counts as fragmented
            out = [word] if self.background.lookup(word) is not None else list(word)
        with self._lock:
            self._pieces[word] = out
        return out

    def word_prob(self, prefix: Sequence[str], word: str) -> float:
        if self.background.lookup(word) is None:
            return 0.0
        return self.background.prob(word, list(prefix))

    def word_rank(self, prefix: Sequence[str], word: str) -> int:
        bid = self.background.lookup(word)
        dist = self.background.distribution(list(prefix))
        if bid is None:
            return len(dist) + 1
        return 1 + int(np.count_nonzero(dist > dist[bid]))

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "vocab_size": self.vocab_size, "digest": self._digest}


class HFProxy(ProxyLM):
    """A local Hugging Face causal LM as the proxy (MBA used GPT-2 XL), loaded offline.

    Ranks are of the model's next-token distribution (Alg. 3 ranks each piece of a
    fragmented word with the pieces before it in the prefix).
    """

    name = "hf"

    def __init__(self, path: str, *, device: str = "cpu") -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - hf extra missing
            raise DataUnavailableError(
                f"The hf proxy needs torch and transformers ({exc}); install the 'hf' extra."
            ) from None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        except OSError as exc:
            raise DataUnavailableError(
                f"No Hugging Face model at {path!r} ({exc}); give a local model directory."
            ) from None
        self.model.eval().to(device)
        self._torch = torch
        self.path = path
        self.device = device

    def pieces(self, word: str) -> list[str]:
        return list(self.tokenizer.tokenize(" " + word))

    def _logits(self, prefix: Sequence[str], extra: Sequence[int]) -> Any:
        text = detokenize(list(prefix))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
        if not ids:
            bos = self.tokenizer.bos_token_id
            ids = [bos if bos is not None else 0]
        ids = list(ids) + list(extra)
        with self._torch.no_grad():
            out = self.model(self._torch.tensor([ids], device=self.device))
        return out.logits[0, len(ids) - len(extra) - 1 :].float().cpu().numpy()

    def _word_ids(self, word: str) -> list[int]:
        return list(self.tokenizer(" " + word, add_special_tokens=False)["input_ids"])

    def piece_ranks(self, prefix: Sequence[str], word: str) -> list[int]:
        ids = self._word_ids(word)
        logits = self._logits(prefix, ids[:-1])
        return [1 + int(np.count_nonzero(logits[k] > logits[k][t])) for k, t in enumerate(ids)]

    def word_rank(self, prefix: Sequence[str], word: str) -> int:
        return max(self.piece_ranks(prefix, word))

    def word_prob(self, prefix: Sequence[str], word: str) -> float:
        ids = self._word_ids(word)
        logits = self._logits(prefix, ids[:-1])
        logp = 0.0
        for k, t in enumerate(ids):
            row = logits[k] - logits[k].max()
            logp += float(row[t] - np.log(np.exp(row).sum()))
        return float(np.exp(logp))

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path}


def create_proxy(spec: str | ProxyLM, *, background_texts: Sequence[str] = ()) -> ProxyLM:
    """``"ngram"`` (fitted on ``background_texts``), ``"hf:PATH"``, or a proxy as is."""
    if isinstance(spec, ProxyLM):
        return spec
    name, _, arg = str(spec).partition(":")
    if name == "ngram":
        if not background_texts:
            raise ConfigError(
                "The 'ngram' proxy needs public non-member background texts; pass "
                "background_texts (e.g. ragprivacy.corpus.background_texts(...))."
            )
        return NGramProxy(list(background_texts))
    if name == "hf" and arg:
        return HFProxy(arg)
    raise ConfigError(f"The 'proxy' parameter must be 'ngram' or 'hf:PATH'; got {spec!r}.")


class SpellCorrector(ABC):
    """Alg. 1's spelling-correction model: given the three-word window ending at a word,
    return the corrected third word (the word itself when it is spelled right)."""

    name = "corrector"

    @abstractmethod
    def correct(self, window: Sequence[str]) -> str:
        """The corrected form of ``window[-1]``."""

    def config(self) -> dict[str, Any]:
        return {"name": self.name}


class NoCorrector(SpellCorrector):
    """Corrects nothing (MBA's "w/o SC" ablation)."""

    name = "none"

    def correct(self, window: Sequence[str]) -> str:
        return window[-1]


class PySpellCorrector(SpellCorrector):
    """``pyspellchecker`` behind :class:`SpellCorrector` (see the module docstring).

    >>> PySpellCorrector().correct(["it", "was", "nearlt"])
    'nearly'
    """

    name = "pyspellchecker"

    def __init__(self, *, distance: int = 1) -> None:
        try:
            from spellchecker import SpellChecker
        except ImportError as exc:  # pragma: no cover - spell extra missing
            raise DataUnavailableError(
                f"pyspellchecker is not installed ({exc}); install the 'spell' extra or pass "
                "another SpellCorrector."
            ) from None
        self.distance = check_positive_int("distance", distance)
        self._checker = SpellChecker(distance=self.distance)
        self._memo: dict[str, str] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"distance": self.distance, "_memo": self._memo}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(distance=state["distance"])  # type: ignore[misc]
        self._memo = state["_memo"]

    def correct(self, window: Sequence[str]) -> str:
        word = window[-1]
        if not word.isalpha() or word[:1].isupper() or len(word) < 3:
            return word
        key = normalize(word)
        hit = self._memo.get(key)
        if hit is None:
            known = self._checker.known([key])
            hit = key if known else (self._checker.correction(key) or key)
            self._memo[key] = hit
        return word if hit == key else hit

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "distance": self.distance}


def create_spell_corrector(spec: str | SpellCorrector | None) -> SpellCorrector:
    """``"pyspellchecker"`` (default), ``"none"``, or a corrector as is."""
    if isinstance(spec, SpellCorrector):
        return spec
    if spec in (None, "pyspellchecker", "default"):
        return PySpellCorrector()
    if spec == "none":
        return NoCorrector()
    raise ConfigError(
        f"The 'corrector' parameter must be 'pyspellchecker' or 'none'; got {spec!r}."
    )

"""The background language model of the reference reader: interpolated Kneser–Ney n-grams.

:class:`BackgroundModel` is an interpolated Kneser–Ney model (Chen & Goodman 1999,
"interpolated KN" with one absolute discount per order) of order ``n`` ≤ 3 over the
shared word tokenizer (:func:`ragprivacy.generate.tokens.tokenize`), matching on
:func:`~ragprivacy.generate.tokens.normalize`\\ d (case-folded) tokens. Kneser–Ney is chosen
over Witten–Bell because its continuation counts give better lower-order estimates for
the word-level, small-corpus setting here.

Every document is padded with ``n − 1`` start symbols ``<s>`` and one end symbol ``</s>``.
The vocabulary is every type seen in fitting, plus ``</s>`` and ``<unk>``; ``<s>`` is a
context-only symbol with probability 0. With ``h`` the last ``k − 1`` tokens, ``c_k`` the
raw counts at the highest order and the continuation counts ``N1+(• h w)`` below it::

    P_1(w)   = max(c_1(w) − D_1, 0) / C_1 + D_1 · T_1 / C_1 · 1 / |V|
    P_k(w|h) = max(c_k(h w) − D_k, 0) / C_k(h) + D_k · T_k(h) / C_k(h) · P_{k−1}(w|h')

where ``C_k(h) = Σ_w c_k(h w)``, ``T_k(h) = |{w : c_k(h w) > 0}|``, ``h'`` drops the
oldest token of ``h``, ``|V|`` counts every predictable symbol (``<unk>`` and ``</s>``
included), and a history never seen (``C_k(h) = 0``) backs off to ``P_{k−1}`` unchanged.
``<unk>`` receives the uniform share ``D_1 · T_1 / (C_1 · |V|)``: the mass of every
unknown word together. Discounts default to Ney's estimate ``D = n1 / (n1 + 2 n2)`` from
the count-of-counts of each order (clipped to [0.1, 0.9]; 0.75 when undefined).

Fitting is vectorised (n-grams are int64 keys, counted with ``numpy.unique``); queries
are ``searchsorted`` lookups, and dense next-token vectors are cached per history.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._typing import FloatArray
from ragprivacy._validation import check_in_range, check_positive_int
from ragprivacy.errors import ConfigError, DataError
from ragprivacy.generate.tokens import normalize, tokenize

__all__ = [
    "BOS",
    "BackgroundModel",
    "EOS",
    "UNK",
    "build_background",
    "default_background",
]

UNK, EOS, BOS = "<unk>", "</s>", "<s>"
UNK_ID, EOS_ID, BOS_ID = 0, 1, 2
_N_SPECIAL = 3
_DEFAULT_DISCOUNT = 0.75


@dataclass(frozen=True, slots=True)
class _Level:
    """The counts of one order ``k`` ≥ 2, keyed by int64 n-gram codes, sorted."""

    keys: np.ndarray  # codes of (h, w), sorted; the history code is key // V
    counts: np.ndarray  # c_k(h w), float64
    ctx_keys: np.ndarray  # distinct history codes, sorted
    ctx_start: np.ndarray  # keys[ctx_start[i]:ctx_start[i + 1]] share ctx_keys[i]
    ctx_total: np.ndarray  # C_k(h)
    ctx_types: np.ndarray  # T_k(h)
    discount: float


def _discount(counts: np.ndarray) -> float:
    n1 = int(np.count_nonzero(counts == 1))
    n2 = int(np.count_nonzero(counts == 2))
    if n1 == 0 or n2 == 0:
        return _DEFAULT_DISCOUNT
    return float(min(max(n1 / (n1 + 2.0 * n2), 0.1), 0.9))


def _make_level(keys: np.ndarray, counts: np.ndarray, base: int, discount: float | None) -> _Level:
    ctx = keys // base
    ctx_keys, ctx_start, ctx_types = np.unique(ctx, return_index=True, return_counts=True)
    ctx_total = np.add.reduceat(counts, ctx_start) if len(counts) else counts[:0]
    return _Level(
        keys=keys,
        counts=counts.astype(np.float64),
        ctx_keys=ctx_keys,
        ctx_start=np.append(ctx_start, len(keys)).astype(np.int64),
        ctx_total=ctx_total.astype(np.float64),
        ctx_types=ctx_types.astype(np.float64),
        discount=_discount(counts) if discount is None else discount,
    )


def _find(sorted_keys: np.ndarray, key: int) -> int:
    i = int(np.searchsorted(sorted_keys, key))
    return i if i < len(sorted_keys) and int(sorted_keys[i]) == key else -1


class BackgroundModel:
    """An interpolated Kneser–Ney n-gram model (see the module docstring).

    Build one with :meth:`fit` (token lists) or :meth:`from_texts` (raw texts).

    >>> bg = BackgroundModel.from_texts(["the cat sat", "the dog sat"], order=2, discount=0.5)
    >>> round(float(bg.distribution(["the"]).sum()), 12)
    1.0
    >>> bg.prob("cat", ["the"]) == bg.prob("dog", ["the"])
    True
    """

    def __init__(
        self,
        vocab: Sequence[str],
        surfaces: Sequence[str],
        order: int,
        unigram_counts: np.ndarray,
        levels: Sequence[_Level],
        unigram_discount: float,
        *,
        cache_size: int = 128,
    ) -> None:
        self._vocab = tuple(vocab)
        self._surfaces = tuple(surfaces)
        self._ids = {t: i for i, t in enumerate(self._vocab)}
        self.order = order
        self._c1 = np.asarray(unigram_counts, dtype=np.float64)
        self._levels = tuple(levels)
        self._d1 = float(unigram_discount)
        self._cache: OrderedDict[tuple[int, ...], FloatArray] = OrderedDict()
        self._cache_size = check_positive_int("cache_size", cache_size)
        self._lock = threading.Lock()
        self._digest: str | None = None
        size = len(self._vocab)
        n_pred = size - 1  # every symbol but <s>
        total = float(self._c1.sum())
        p1 = np.zeros(size, dtype=np.float64)
        if total > 0:
            types = float(np.count_nonzero(self._c1))
            p1 = np.maximum(self._c1 - self._d1, 0.0) / total
            p1 += self._d1 * types / total / n_pred
        else:
            p1[:] = 1.0 / n_pred
        p1[BOS_ID] = 0.0
        p1.setflags(write=False)
        self._p1 = p1

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        state["_cache"] = OrderedDict()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- fitting

    @classmethod
    def fit(
        cls,
        documents: Iterable[Sequence[str]],
        *,
        order: int = 3,
        discount: float | None = None,
        cache_size: int = 128,
    ) -> BackgroundModel:
        """Fit on token lists (tokens of :func:`~ragprivacy.generate.tokens.tokenize`).

        Args:
            documents: one token list per document.
            order: n-gram order, 1 to 3.
            discount: one absolute discount for every order in (0, 1); ``None`` estimates
                one per order (``n1 / (n1 + 2 n2)``).
            cache_size: dense next-token vectors kept per history.
        """
        order = check_positive_int("order", order)
        if order > 3:
            raise ConfigError(f"The 'order' parameter must be in [1, 3]; got {order}.")
        if discount is not None:
            discount = check_in_range("discount", discount, 0.0, 1.0, low_open=True, high_open=True)
        if isinstance(documents, str):
            raise ConfigError("fit needs token lists; use BackgroundModel.from_texts for texts.")
        docs = []
        for d in documents:
            if isinstance(d, str):
                raise ConfigError(
                    f"fit needs token lists, got a string ({d[:40]!r}); use "
                    "BackgroundModel.from_texts for raw texts."
                )
            docs.append(list(d))
        surface_counts: Counter[str] = Counter()
        for d in docs:
            surface_counts.update(d)
        best: dict[str, tuple[int, str]] = {}
        for tok, cnt in surface_counts.items():
            n = normalize(tok)
            old = best.get(n)
            if old is None or cnt > old[0] or (cnt == old[0] and tok < old[1]):
                best[n] = (cnt, tok)
        types = sorted(t for t in best if t not in (UNK, EOS, BOS))
        vocab = [UNK, EOS, BOS, *types]
        surfaces = [UNK, EOS, BOS, *(best[t][1] for t in types)]
        ids = {t: i for i, t in enumerate(vocab)}
        base = len(vocab)
        if base**order >= 2**62:
            raise DataError(
                f"The background vocabulary is too large for order {order} ({base} types); "
                "fit a lower order or fewer documents."
            )
        pad = [BOS_ID] * (order - 1)
        seq_parts: list[int] = []
        for d in docs:
            seq_parts.extend(pad)
            seq_parts.extend(ids[normalize(t)] for t in d)
            seq_parts.append(EOS_ID)
        seq = np.asarray(seq_parts, dtype=np.int64)
        targets = np.flatnonzero(seq != BOS_ID)
        if len(targets) == 0:
            raise DataError("The background model needs at least one document; got none.")
        # Raw counts of the highest order.
        keys = np.zeros(len(targets), dtype=np.int64)
        for j in range(order - 1, -1, -1):
            keys = keys * base + seq[targets - j]
        top_keys, top_counts = np.unique(keys, return_counts=True)
        levels: list[_Level] = []
        level_keys, level_counts = top_keys, top_counts
        for k in range(order, 1, -1):
            levels.append(_make_level(level_keys, level_counts, base, discount))
            # Continuation counts of order k − 1: distinct left extensions of each (k−1)-gram.
            suffix = level_keys % (base ** (k - 1))
            level_keys, level_counts = np.unique(suffix, return_counts=True)
        levels.reverse()
        c1 = np.zeros(base, dtype=np.float64)
        np.add.at(c1, level_keys, level_counts)
        d1 = _discount(level_counts) if discount is None else discount
        return cls(vocab, surfaces, order, c1, levels, d1, cache_size=cache_size)

    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        *,
        order: int = 3,
        discount: float | None = None,
        cache_size: int = 128,
    ) -> BackgroundModel:
        """Tokenize ``texts`` with the shared tokenizer and :meth:`fit`."""
        if isinstance(texts, str):
            raise ConfigError(
                "from_texts needs a sequence of texts, not one string; wrap it in a list."
            )
        return cls.fit(
            (tokenize(t) for t in texts), order=order, discount=discount, cache_size=cache_size
        )

    # ----------------------------------------------------------------- vocabulary

    @property
    def vocab(self) -> tuple[str, ...]:
        """Normalised symbols by id (``<unk>``, ``</s>``, ``<s>`` first)."""
        return self._vocab

    @property
    def surfaces(self) -> tuple[str, ...]:
        """The most frequent surface form of each symbol, by id."""
        return self._surfaces

    @property
    def discounts(self) -> tuple[float, ...]:
        """The absolute discount of each order, lowest first."""
        return (self._d1, *(lv.discount for lv in self._levels))

    def __len__(self) -> int:
        return len(self._vocab)

    def lookup(self, token: str) -> int | None:
        """The id of ``token`` (matched after normalisation), or ``None`` if unseen."""
        return self._ids.get(normalize(token))

    def lookup_normalized(self, norm: str) -> int | None:
        """The id of an already normalised token, or ``None``."""
        return self._ids.get(norm)

    def token_id(self, token: str) -> int:
        """The id of ``token``; unseen tokens map to ``<unk>``."""
        return self._ids.get(normalize(token), UNK_ID)

    def context_ids(self, history: Sequence[str]) -> tuple[int, ...]:
        """The last ``order − 1`` ids of ``history``, padded with ``<s>`` at the start."""
        k = self.order - 1
        if k == 0:
            return ()
        tail = [self.token_id(t) for t in list(history)[-k:]]
        return (BOS_ID,) * (k - len(tail)) + tuple(tail)

    # ----------------------------------------------------------------- queries

    def _fit_context(self, context: Sequence[int]) -> tuple[int, ...]:
        k = self.order - 1
        if k == 0:
            return ()
        tail = tuple(int(t) for t in context)[-k:]
        return (BOS_ID,) * (k - len(tail)) + tail

    def distribution(self, history: Sequence[str] = ()) -> FloatArray:
        """P(· | history) over :attr:`vocab` (read-only; ``<s>`` has 0; sums to 1)."""
        return self.distribution_ids(self.context_ids(history))

    def distribution_ids(self, context: tuple[int, ...]) -> FloatArray:
        """P(· | context ids), ``context`` as from :meth:`context_ids` (cached)."""
        context = self._fit_context(context)
        with self._lock:
            hit = self._cache.get(context)
            if hit is not None:
                self._cache.move_to_end(context)
                return hit
        p = self._p1
        base = len(self._vocab)
        for k, level in enumerate(self._levels, start=2):
            code = 0
            for t in context[len(context) - (k - 1) :]:
                code = code * base + t
            i = _find(level.ctx_keys, code)
            if i < 0:
                continue
            lo, hi = int(level.ctx_start[i]), int(level.ctx_start[i + 1])
            total, d = level.ctx_total[i], level.discount
            p = p * (d * level.ctx_types[i] / total)
            p[level.keys[lo:hi] % base] += (level.counts[lo:hi] - d) / total
        if p is not self._p1:
            p.setflags(write=False)
        with self._lock:
            self._cache[context] = p
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return p

    def prob_id(self, token_id: int, context: tuple[int, ...]) -> float:
        """P(token id | context ids) by the scalar recursion (no dense vector)."""
        if token_id == BOS_ID:
            return 0.0
        context = self._fit_context(context)
        p = float(self._p1[token_id])
        base = len(self._vocab)
        for k, level in enumerate(self._levels, start=2):
            code = 0
            for t in context[len(context) - (k - 1) :]:
                code = code * base + t
            i = _find(level.ctx_keys, code)
            if i < 0:
                continue
            d, total = level.discount, float(level.ctx_total[i])
            lo, hi = int(level.ctx_start[i]), int(level.ctx_start[i + 1])
            j = _find(level.keys[lo:hi], code * base + token_id)
            c = float(level.counts[lo + j]) if j >= 0 else 0.0
            p = max(c - d, 0.0) / total + d * float(level.ctx_types[i]) / total * p
        return p

    def prob(self, token: str, history: Sequence[str] = ()) -> float:
        """P(token | history); an unseen token gets the whole ``<unk>`` mass."""
        return self.prob_id(self.token_id(token), self.context_ids(history))

    def logprob(self, token: str, history: Sequence[str] = ()) -> float:
        """Natural log of :meth:`prob`."""
        return float(np.log(self.prob(token, history)))

    def sequence_logprobs(self, tokens: Sequence[str]) -> list[float]:
        """Log-probabilities of ``tokens`` one by one, from a document start."""
        history: list[str] = []
        out = []
        for t in tokens:
            out.append(self.logprob(t, history))
            history.append(t)
        return out

    # ----------------------------------------------------------------- identity, storage

    def config(self) -> dict[str, Any]:
        """JSON-ready settings."""
        return {
            "kind": "interpolated-kneser-ney",
            "order": self.order,
            "discounts": list(self.discounts),
            "vocab_size": len(self._vocab),
        }

    def state_digest(self) -> str:
        """SHA-256 hex over the vocabulary, discounts and every count."""
        if self._digest is None:
            h = hashlib.sha256()
            h.update(json.dumps(self.config(), sort_keys=True).encode())
            h.update("\x00".join(self._vocab).encode())
            h.update("\x00".join(self._surfaces).encode())
            h.update(self._c1.tobytes())
            for lv in self._levels:
                h.update(lv.keys.astype("<i8").tobytes())
                h.update(lv.counts.astype("<f8").tobytes())
            self._digest = h.hexdigest()
        return self._digest

    def save(self, path: str | Path) -> None:
        """Write the fitted state to ``path`` (NumPy ``.npz``)."""
        arrays: dict[str, Any] = {
            "meta": np.frombuffer(
                json.dumps(
                    {
                        "order": self.order,
                        "d1": self._d1,
                        "discounts": [lv.discount for lv in self._levels],
                        "vocab": list(self._vocab),
                        "surfaces": list(self._surfaces),
                    }
                ).encode(),
                dtype=np.uint8,
            ),
            "c1": self._c1,
        }
        for k, lv in enumerate(self._levels, start=2):
            arrays[f"keys{k}"] = lv.keys
            arrays[f"counts{k}"] = lv.counts
        with open(path, "wb") as fh:
            np.savez_compressed(fh, **arrays)

    @classmethod
    def load(cls, path: str | Path, *, cache_size: int = 128) -> BackgroundModel:
        """Read a model written by :meth:`save`."""
        try:
            with np.load(path) as data:
                meta = json.loads(bytes(data["meta"]).decode())
                base = len(meta["vocab"])
                levels = [
                    _make_level(data[f"keys{k}"], data[f"counts{k}"], base, meta["discounts"][i])
                    for i, k in enumerate(range(2, meta["order"] + 1))
                ]
                c1 = data["c1"]
        except (OSError, KeyError, ValueError) as exc:
            raise DataError(
                f"Could not read a background model from {str(path)!r} ({exc}); write one "
                "with BackgroundModel.save."
            ) from exc
        return cls(
            meta["vocab"], meta["surfaces"], meta["order"], c1, levels, meta["d1"],
            cache_size=cache_size,
        )  # fmt: skip


def build_background(
    texts: Iterable[str], *, order: int = 3, discount: float | None = None
) -> BackgroundModel:
    """Fit the reader's background model on public, non-member ``texts``."""
    items = [texts] if isinstance(texts, str) else list(texts)
    bad = next((t for t in items if not isinstance(t, str)), None)
    if bad is not None:
        raise ConfigError(
            f"A background model is fitted on texts (strings); got a {type(bad).__name__}. "
            "Pass the documents' .text values."
        )
    return BackgroundModel.from_texts(items, order=order, discount=discount)


_BUILTIN_TEXTS = (
    "The weather was mild for most of the week, with rain in the morning and clear skies in "
    "the afternoon. Many people walked to work, and the parks were busy in the evening.",
    "To make a simple soup, cut the vegetables into small pieces, cook them in a large pot "
    "with water and salt, and let it simmer for about half an hour. Serve it warm.",
    "The library opens at nine in the morning and closes at six in the evening. Visitors can "
    "borrow up to five books at a time and return them within three weeks.",
    "The train to the coast leaves every hour from the main station. The journey takes "
    "about two hours, and tickets can be bought online or at the station.",
    "Regular exercise, enough sleep and a balanced diet help most people stay healthy. A "
    "doctor can give advice when symptoms last for more than a few days.",
    "The company was founded by a small group of engineers. It builds tools for teams that "
    "need to plan their work, share documents and keep track of their projects.",
    "The museum has a large collection of paintings, maps and old photographs. Guided tours "
    "are offered on weekends, and the cafe on the top floor has a view of the river.",
    "Thank you for your message. I will look into the question and get back to you as soon "
    "as possible. Please let me know if you have any other questions.",
    "The meeting was moved to Thursday afternoon. We will discuss the budget for next year, "
    "the new schedule and the plans for the summer program.",
    "Hello, I have had a mild headache for two days and I feel tired in the evening. What "
    "should I do? Hi, thanks for the question. It may be stress or a lack of sleep.",
    "The city is known for its old bridges, narrow streets and small markets. In the summer "
    "many visitors come to see the festival and the boats on the lake.",
    "Students should read the chapter before the class and bring their notes. The final "
    "exam covers all of the topics from the first and the second part of the course.",
)


_DEFAULT: BackgroundModel | None = None
_DEFAULT_LOCK = threading.Lock()


def default_background() -> BackgroundModel:
    """A small built-in background model (a dozen generic English paragraphs, no
    personal data), for use when no public background corpus is given."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = BackgroundModel.from_texts(_BUILTIN_TEXTS, order=3)
        return _DEFAULT

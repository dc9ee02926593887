"""DCMI, the differential-calibration membership inference attack (Gao, Meng, Dong, Li and
Guo, "DCMI: A Differential Calibration Membership Inference Attack Against
Retrieval-Augmented Generation", arXiv:2509.06026, 2025; the authors' code is
github.com/Xinyu140203/RAG_MIA).

**Why a difference.** A response-only attack (RAG-MIA's yes/no question) reads one answer,
and that answer also reflects the documents retrieved *beside* the target: a non-member
target still retrieves its nearest stored neighbours, which may push the reader towards
"Yes". DCMI asks twice, once with the target and once with a slightly perturbed copy of
it, and scores the *change*. Both queries retrieve nearly the same documents; when the
target is a member its own record is among them, supports the original and contradicts
the perturbed copy, so the reader's confidence falls; when it is not, the neighbours
support neither query better than the other, and their influence cancels in the
difference. For a target ``x``:

1. *Perturbed query* (the code's ``perturb.py``): ``x̃`` is ``x`` with
   ``n = max(1, ⌊ρ · w⌋)`` key adjectives or adverbs replaced by their antonyms, the text
   kept logically consistent, where ``w`` is the number of whitespace-separated words and
   ``ρ`` the perturbation magnitude (0.03). The authors had GPT-4o make the replacements.
2. *Queries*: ``x`` and ``x̃`` each as the yes/no membership question, "Does this: {text}
   appear in the context? Answer with Yes or No." (our ``rag-mia`` template; the code
   reads the probability of a Yes/No token, so it asks a yes/no question, whose wording
   the repository does not include), greedy decoding, up to 32 new tokens (its config).
3. *Membership score* (``flashrag/generator/generator.py``): ``s(q) = P(Yes)``, the
   generator's softmax probability of the "Yes" token at the position of the first Yes or
   No token of the answer; 0 when the answer holds neither.
4. *Differential calibration* (``MIA.py``): ``Δ(x) = s(x) − s(x̃)``, higher meaning
   member. The code predicts "member" when ``Δ > τ``, with ``τ`` the value of the grid
   0, 0.01, …, 0.99 of best accuracy. Here ``Δ`` is the attack's score and the harness
   chooses thresholds on the calibration split (by accuracy unless told otherwise); the
   code chose ``τ`` on the very scores it then evaluated.

**Where this differs, and why.**

* *A black box shows the emitted tokens' probabilities only* (:class:`~ragprivacy.types.
  Response`: answer text, tokens and their log-probabilities where the deployment serves
  them), not the whole next-token distribution. When the first yes/no token of the
  answer is "Yes", ``P(Yes)`` is its probability, as in the code; when it is "No", the
  answer shows ``P(No)`` only and ``s`` is 0, the lower bound of ``P(Yes)`` (the code reads
  the small ``P(Yes)`` at that position). So a Yes always scores above a No, whatever the
  generator's probabilities are calibrated against. The yes/no token is found
  case-insensitively after the tokenizer's word-start marks (``Ġ``, ``▁``) are stripped,
  and only as a whole word ("Yesterday" is not one); the code matched the capitalised
  tokens.
* *Without log-probabilities* the default attack cannot run: it declares
  :attr:`requires_logprobs`, and a system or endpoint that serves none is reported as
  skipped. ``signal="answer"`` is a label-only reading of ours (the paper also attacks
  Dify and MaxKB deployments, whose APIs answer with text, but the released code has the
  probability path only): ``s`` is 1 for a Yes and 0 otherwise, so ``Δ ∈ {−1, 0, 1}``.
* *The perturbation is made offline.* No instruction-following model is at hand by
  default, so :func:`perturb_text` replaces words from a built-in antonym lexicon of
  adjectives and adverbs (``mild`` → ``severe``, ``often`` → ``rarely``), ``n`` of them
  spread evenly over the candidates, keeping the source's case; when the text holds fewer
  than ``n``, it toggles negations next (``not`` dropped, ``cannot`` → ``can``, a ``not``
  after ``is``/``was``/``are``/``were``), then changes standalone numbers (doubled, 0 → 1).
  A text with no candidate at all is sent unchanged twice (``Δ`` then measures only the
  reader's noise). ``perturber`` (an instruction-following :class:`~ragprivacy.generate.
  Generator`) makes the replacements as the authors did, with an instruction of ours to
  the same effect; an empty reply falls back to the lexicon.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ragprivacy._validation import check_choice, check_in_range, check_positive_int
from ragprivacy.attacks.base import MembershipAttack, register_attack
from ragprivacy.errors import DataError
from ragprivacy.generate import Generator, Prompt, Task, tokenize
from ragprivacy.rag import Query
from ragprivacy.types import Document, Response

__all__ = [
    "ANTONYMS",
    "DCMIAttack",
    "PerturbedText",
    "perturb_text",
    "replacements_wanted",
    "yes_probability",
]

_PAIRS = (
    ("high", "low"),
    ("higher", "lower"),
    ("highest", "lowest"),
    ("increased", "decreased"),
    ("more", "less"),
    ("most", "least"),
    ("better", "worse"),
    ("best", "worst"),
    ("good", "bad"),
    ("normal", "abnormal"),
    ("normally", "abnormally"),
    ("regular", "irregular"),
    ("regularly", "irregularly"),
    ("mild", "severe"),
    ("mildly", "severely"),
    ("often", "rarely"),
    ("frequent", "infrequent"),
    ("frequently", "seldom"),
    ("usually", "unusually"),
    ("usual", "unusual"),
    ("always", "never"),
    ("occasionally", "constantly"),
    ("sometimes", "never"),
    ("early", "late"),
    ("earlier", "later"),
    ("earliest", "latest"),
    ("new", "old"),
    ("newer", "older"),
    ("first", "last"),
    ("slightly", "greatly"),
    ("slight", "marked"),
    ("small", "large"),
    ("smaller", "larger"),
    ("little", "much"),
    ("big", "tiny"),
    ("heavy", "light"),
    ("long", "short"),
    ("longer", "shorter"),
    ("fast", "slow"),
    ("quick", "slow"),
    ("quickly", "slowly"),
    ("sudden", "gradual"),
    ("suddenly", "gradually"),
    ("hot", "cold"),
    ("warm", "cool"),
    ("dry", "wet"),
    ("safe", "dangerous"),
    ("common", "rare"),
    ("commonly", "rarely"),
    ("typical", "atypical"),
    ("simple", "complex"),
    ("serious", "minor"),
    ("poor", "good"),
    ("partial", "complete"),
    ("partially", "completely"),
    ("adequate", "inadequate"),
    ("balanced", "unbalanced"),
    ("properly", "improperly"),
    ("proper", "improper"),
    ("possible", "impossible"),
    ("likely", "unlikely"),
    ("probable", "improbable"),
    ("able", "unable"),
    ("available", "unavailable"),
    ("sure", "unsure"),
    ("certain", "uncertain"),
    ("healthy", "unhealthy"),
    ("positive", "negative"),
    ("present", "absent"),
    ("right", "left"),
    ("upper", "lower"),
    ("inner", "outer"),
    ("near", "far"),
    ("nearest", "farthest"),
    ("easy", "difficult"),
    ("easily", "hardly"),
    ("strong", "weak"),
    ("stronger", "weaker"),
    ("active", "inactive"),
    ("acute", "chronic"),
    ("stable", "unstable"),
    ("constant", "intermittent"),
    ("persistent", "transient"),
    ("careful", "careless"),
    ("carefully", "carelessly"),
    ("full", "empty"),
    ("same", "different"),
    ("similar", "different"),
    ("correct", "incorrect"),
    ("important", "unimportant"),
    ("necessary", "unnecessary"),
    ("expected", "unexpected"),
    ("internal", "external"),
    ("major", "minor"),
    ("maximum", "minimum"),
    ("clear", "unclear"),
    ("clearly", "vaguely"),
    ("very", "barely"),
    ("mostly", "rarely"),
    ("well", "badly"),
    ("happy", "unhappy"),
    ("pleasant", "unpleasant"),
    ("comfortable", "uncomfortable"),
    ("successful", "unsuccessful"),
    ("successfully", "unsuccessfully"),
    ("legal", "illegal"),
    ("formal", "informal"),
    ("complete", "incomplete"),
    ("final", "preliminary"),
    ("open", "closed"),
    ("busy", "idle"),
    ("cheap", "expensive"),
    ("rich", "poor"),
    ("wide", "narrow"),
    ("deep", "shallow"),
    ("young", "elderly"),
    ("older", "younger"),
)

ANTONYMS: dict[str, str] = {}
"""The offline perturbation's lexicon: a lower-case adjective or adverb → its antonym
(both directions of every pair; where a word is in two pairs, its first pair wins)."""
for _a, _b in _PAIRS:
    ANTONYMS.setdefault(_a, _b)
    ANTONYMS.setdefault(_b, _a)
del _a, _b

_WORD = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)?")
_NUMBER = re.compile(r"(?<![\w.,:/+()-])\d{1,4}(?![\w.,:/()-]|[.,]\d)")
_COPULAS = frozenset({"is", "was", "are", "were"})
_WORD_START = "Ġ▁ \t\n"


@dataclass(frozen=True, slots=True)
class PerturbedText:
    """A target's perturbed copy (step 1).

    Attributes:
        text: the perturbed text ``x̃``.
        wanted: ``n = max(1, ⌊ρ · w⌋)``, the replacements asked for.
        changes: ``(original, replacement)`` of each edit made, in text order (empty when
            ``text`` was written by a generator).
    """

    text: str
    wanted: int
    changes: tuple[tuple[str, str], ...] = ()


def _cased(source: str, word: str) -> str:
    if source.isupper() and len(source) > 1:
        return word.upper()
    if source[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def _spread(items: Sequence[Any], n: int) -> list[Any]:
    """``n`` of ``items`` evenly spaced from first to last (all when there are no more)."""
    if len(items) <= n:
        return list(items)
    if n == 1:
        return [items[(len(items) - 1) // 2]]
    step = (len(items) - 1) / (n - 1)
    return [items[round(i * step)] for i in range(n)]


def replacements_wanted(text: str, magnitude: float = 0.03) -> int:
    """``n = max(1, ⌊ρ · w⌋)`` for ``w`` whitespace-separated words and magnitude ``ρ``.

    >>> replacements_wanted(" ".join(["word"] * 100))
    3
    >>> replacements_wanted("a short text")
    1
    """
    check_in_range("magnitude", magnitude, 0.0, 1.0, low_open=True)
    return max(1, int(magnitude * len(text.split())))


def perturb_text(text: str, *, magnitude: float = 0.03) -> PerturbedText:
    """The offline perturbation of step 1 (see the module docstring): antonyms first, then
    negations, then numbers, ``n`` edits in all where the text has that many candidates.

    >>> perturb_text("The pain was mild and came often.", magnitude=0.3).text
    'The pain was severe and came rarely.'
    >>> perturb_text("Nothing here is not known.").text
    'Nothing here is known.'
    """
    wanted = replacements_wanted(text, magnitude)
    words = list(_WORD.finditer(text))
    used: set[int] = set()  # character offsets of the words already edited
    edits: list[tuple[int, int, str, str]] = []  # (start, end, old, new)

    def take(cands: list[tuple[int, int, str, str]]) -> None:
        free = [c for c in cands if c[0] not in used]
        for c in _spread(free, wanted - len(edits)):
            edits.append(c)
            used.add(c[0])

    take(
        [
            (m.start(), m.end(), m.group(), _cased(m.group(), ANTONYMS[m.group().lower()]))
            for m in words
            if m.group().lower() in ANTONYMS
        ]
    )
    if len(edits) < wanted:
        negations: list[tuple[int, int, str, str]] = []
        for i, m in enumerate(words):
            low = m.group().lower()
            nxt = words[i + 1].group().lower() if i + 1 < len(words) else ""
            if low == "not" and m.start() > 0 and text[m.start() - 1] == " ":
                negations.append((m.start() - 1, m.end(), text[m.start() - 1 : m.end()], ""))
            elif low == "cannot":
                negations.append((m.start(), m.end(), m.group(), _cased(m.group(), "can")))
            elif low in _COPULAS and nxt != "not":
                negations.append((m.start(), m.end(), m.group(), f"{m.group()} not"))
        take(negations)
    if len(edits) < wanted:
        take(
            [
                (m.start(), m.end(), m.group(), str(max(1, 2 * int(m.group()))))
                for m in _NUMBER.finditer(text)
            ]
        )
    edits.sort()
    out, last = [], 0
    for start, end, _, new in edits:
        out.append(text[last:start])
        out.append(new)
        last = end
    out.append(text[last:])
    return PerturbedText("".join(out), wanted, tuple((old, new) for _, _, old, new in edits))


def _piece(token: str) -> str:
    return token.lstrip(_WORD_START).casefold()


def _starts_word(token: str) -> bool:
    """Whether ``token`` cannot continue the word before it."""
    return not token or token[0] in _WORD_START or not token[0].isalnum()


def yes_probability(response: Response, *, signal: str = "probability") -> float:
    """The membership score ``s`` of one answer (step 3, read as the module docstring says):
    ``P(Yes)`` when the answer's first yes/no word is "Yes", else 0; with
    ``signal="answer"``, 1 for a Yes and 0 otherwise.

    Raises:
        DataError: ``signal="probability"`` and the response carries no log-probabilities,
            or not one per token.

    >>> yes_probability(Response("Yes.", ("Yes", "."), (math.log(0.8), -0.1)))
    0.8
    >>> yes_probability(Response("No", ("No",), (-0.01,)))
    0.0
    """
    check_choice("signal", signal, ("probability", "answer"))
    tokens = response.tokens
    if signal == "probability":
        lps = response.logprobs
        if lps is None or len(lps) != len(tokens):
            raise DataError(
                "The 'dcmi' attack reads P(Yes) from the answer's token log-probabilities, "
                f"but the response carries {'none' if lps is None else len(lps)} for its "
                f"{len(tokens)} tokens; use an endpoint that serves log-probabilities, or "
                "signal='answer'."
            )
    else:  # the text's words, each marked as starting a word
        tokens = tuple(f" {t}" for t in tokenize(response.text))
    for i, tok in enumerate(tokens):
        word = _piece(tok)
        if word not in ("yes", "no"):
            continue
        if i + 1 < len(tokens) and not _starts_word(tokens[i + 1]):
            continue  # "Yes" + "terday": not the word yes
        if word == "no":
            return 0.0
        if signal == "answer":
            return 1.0
        return math.exp(max(float(response.logprobs[i]), -1e3))  # type: ignore[index]
    return 0.0


_PERTURB_INSTRUCTION = (
    "In the text below, swap {n} prominent adjectives or adverbs for words of the opposite "
    "meaning, so that the text still reads as consistent. Change nothing else and reply "
    "with the changed text alone.\n\n{text}"
)


class DCMIAttack(MembershipAttack):
    """DCMI (see the module docstring): the drop of ``P(Yes)`` from the target to its
    perturbed copy.

    Args:
        signal: ``"probability"`` (``P(Yes)`` from the answer's log-probabilities, as the
            authors' code) or ``"answer"`` (label only: 1 for a Yes, 0 otherwise).
        magnitude: the perturbation magnitude ``ρ`` in (0, 1] (0.03 in the code).
        perturber: an instruction-following generator that writes ``x̃`` (else the
            offline lexicon, :func:`perturb_text`).
        max_tokens: new tokens per answer (32 in the code's config).

    >>> attack = DCMIAttack()
    >>> [q.text for q in attack.queries(Document("d", "The rash was mild."))]
    ['The rash was mild.', 'The rash was severe.']
    """

    name = "dcmi"
    requires_logprobs = True

    def __init__(
        self,
        *,
        signal: str = "probability",
        magnitude: float = 0.03,
        perturber: Generator | None = None,
        max_tokens: int = 32,
    ) -> None:
        self.signal = check_choice("signal", signal, ("probability", "answer"))
        self.requires_logprobs = signal == "probability"
        self.magnitude = check_in_range("magnitude", magnitude, 0.0, 1.0, low_open=True)
        self.perturber = perturber
        self.max_tokens = check_positive_int("max_tokens", max_tokens)
        self._memo: dict[str, PerturbedText] = {}

    def perturb(self, target: Document) -> PerturbedText:
        """The perturbed copy of ``target`` (memoised per text)."""
        hit = self._memo.get(target.text)
        if hit is None:
            hit = self._generated(target.text) if self.perturber is not None else None
            if hit is None:
                hit = perturb_text(target.text, magnitude=self.magnitude)
            self._memo[target.text] = hit
        return hit

    def _generated(self, text: str) -> PerturbedText | None:
        n = replacements_wanted(text, self.magnitude)
        prompt = Prompt(Task.CHAT, _PERTURB_INSTRUCTION.format(n=n, text=text))
        limit = 2 * len(text.split()) + 16
        out = self.perturber.generate(prompt, max_tokens=limit).text.strip()  # type: ignore[union-attr]
        return PerturbedText(out, n) if out else None

    def queries(self, target: Document) -> list[Query]:
        options = {"template": "rag-mia", "max_tokens": self.max_tokens}
        return [
            Query(target.text, task=Task.JUDGE, options=options),
            Query(self.perturb(target).text, task=Task.JUDGE, options=options),
        ]

    def decide(self, target: Document, responses: Sequence[Response]) -> float:
        if len(responses) != 2:
            raise DataError(
                f"The 'dcmi' attack scores two answers per target (the target's and its "
                f"perturbed copy's); got {len(responses)}."
            )
        original, perturbed = (yes_probability(r, signal=self.signal) for r in responses)
        return original - perturbed

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "signal": self.signal,
            "magnitude": self.magnitude,
            "perturber": "generator" if self.perturber is not None else "lexicon",
            "max_tokens": self.max_tokens,
        }


register_attack("dcmi", DCMIAttack)

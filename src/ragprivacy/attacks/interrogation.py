"""The Interrogation Attack (Naseh et al., 2025, as used by Private-RAG 4.2 and App. E).

For each target document the attacker asks ``m`` yes/no questions whose answers the
document implies (Private-RAG uses ``m = 30``, written by GPT-4). Each query joins the
question with context that makes the target retrievable — for a patient–doctor record,
the doctor's answer (the ``interrogation`` template: 'I am inquiring about a
patient–doctor conversation where the doctor talked "{excerpt}" {question} Please answer
with 'Yes,' or 'No'.'). The score is the share of questions answered correctly.

**Questions without an LLM** (the reference path). From the document's own sentences
outside the excerpt, ranked by how surprising they are to the attacker's proxy LM (sum of
log-rank of their content words: specific facts first):

* a *yes* question restates a sentence: "Is it so that {sentence}?";
* a *no* question restates it with its most surprising content word replaced by a
  different word of the same shape (another number for a number, else a word drawn from
  the proxy's vocabulary), so the document contradicts it.

Questions alternate yes/no until ``m`` are made (fewer for short documents). A
``question_generator`` (an instruction-following generator) may write them instead.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragprivacy._validation import check_positive_int
from ragprivacy.attacks.base import MembershipAttack, register_attack
from ragprivacy.attacks.proxy import ProxyLM, create_proxy
from ragprivacy.attacks.stopwords import is_punctuation, is_stop_word
from ragprivacy.generate import Generator, Prompt, Task, detokenize, tokenize
from ragprivacy.rag import Query
from ragprivacy.types import Document, Response

__all__ = ["InterrogationAttack", "YesNoQuestion", "make_questions"]

_SENTENCE_END = frozenset({".", "!", "?"})
_QA_LINE = re.compile(r"Q:\s*(.+?)\s*A:\s*(yes|no)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class YesNoQuestion:
    """A question and the answer the document implies (``True`` for yes)."""

    text: str
    answer: bool


def _sentences(units: Sequence[str]) -> list[list[str]]:
    out: list[list[str]] = []
    cur: list[str] = []
    for u in units:
        cur.append(u)
        if u in _SENTENCE_END:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def _content(sentence: Sequence[str]) -> list[int]:
    return [i for i, u in enumerate(sentence) if not is_punctuation(u) and not is_stop_word(u)]


def _replacement(word: str, proxy: ProxyLM, rng: np.random.Generator) -> str:
    if word.isdigit():
        return str(int(word) + int(rng.integers(2, 9)))
    vocab = getattr(getattr(proxy, "background", None), "surfaces", None)
    if vocab:
        for _ in range(50):
            cand = str(vocab[int(rng.integers(len(vocab)))])
            if cand.isalpha() and len(cand) > 3 and not is_stop_word(cand) and cand != word:
                return cand
    return word + "ia"


def make_questions(
    text: str, excerpt: str, proxy: ProxyLM, m: int, *, rng: np.random.Generator
) -> list[YesNoQuestion]:
    """The reference path's ``m`` yes/no questions (see the module docstring)."""
    m = check_positive_int("m", m)
    skip = set(tokenize(excerpt))
    ranked: list[tuple[float, list[str]]] = []
    for sent in _sentences(tokenize(text)):
        words = [u for u in sent if not is_punctuation(u)]
        idx = _content(sent)
        if len(idx) < 2 or (words and all(w in skip for w in words)):
            continue
        prefix: list[str] = []
        surprise = 0.0
        for u in sent:
            if not is_punctuation(u) and not is_stop_word(u):
                surprise += math.log(proxy.word_rank(prefix, u))
            prefix.append(u)
        ranked.append((surprise, sent))
    ranked.sort(key=lambda sr: -sr[0])
    out: list[YesNoQuestion] = []
    for _, sent in ranked:
        body = [u for u in sent if u not in _SENTENCE_END]
        out.append(YesNoQuestion(f"Is it so that {detokenize(body)}?", True))
        if len(out) >= m:
            break
        idx = _content(body)
        prefix_rank = []
        for i in idx:
            prefix_rank.append((proxy.word_rank(body[:i], body[i]), i))
        _, pos = max(prefix_rank)
        changed = list(body)
        changed[pos] = _replacement(body[pos], proxy, rng)
        out.append(YesNoQuestion(f"Is it so that {detokenize(changed)}?", False))
        if len(out) >= m:
            break
    return out


def _excerpt(doc: Document) -> str:
    offset = doc.metadata.get("doctor_offset")
    if isinstance(offset, int) and 0 < offset < len(doc.text):
        return doc.text[offset:].strip()
    units = tokenize(doc.text)
    return detokenize(units[len(units) // 2 :])


def _verdict(text: str) -> bool | None:
    words = [w.casefold() for w in tokenize(text) if not is_punctuation(w)]
    if words and words[0] == "yes":
        return True
    if words and words[0] == "no":
        return False
    return None


class InterrogationAttack(MembershipAttack):
    """The Interrogation Attack (see the module docstring).

    Args:
        proxy: the attacker's LM for ranking sentences (``"ngram"``, ``"hf:PATH"``).
        background_texts: public non-member texts for the ``ngram`` proxy.
        m: questions per document (30 in Private-RAG).
        question_generator: writes the questions when given (else the reference path).
        seed: seeds the "no" questions' replacement words (per document).
    """

    name = "interrogation"

    def __init__(
        self,
        proxy: ProxyLM | str = "ngram",
        *,
        background_texts: Sequence[str] = (),
        m: int = 30,
        question_generator: Generator | None = None,
        seed: int = 0,
    ) -> None:
        self.proxy = create_proxy(proxy, background_texts=background_texts)
        self.m = check_positive_int("m", m)
        self.question_generator = question_generator
        self.seed = check_positive_int("seed", seed, allow_zero=True)
        self._memo: dict[str, list[YesNoQuestion]] = {}

    def questions(self, target: Document) -> list[YesNoQuestion]:
        hit = self._memo.get(target.text)
        if hit is None:
            if self.question_generator is not None:
                hit = self._generated(target)
            else:
                rng = np.random.default_rng([self.seed, zlib.crc32(target.id.encode())])
                hit = make_questions(target.text, _excerpt(target), self.proxy, self.m, rng=rng)
            if not hit:
                hit = [YesNoQuestion(f"Is it so that {_excerpt(target)}?", True)]
            self._memo[target.text] = hit
        return hit

    def _generated(self, target: Document) -> list[YesNoQuestion]:
        prompt = Prompt(
            Task.CHAT,
            f"Write {self.m} yes/no questions about the following document whose answers "
            "the document implies, half answered yes and half no, one per line as "
            f"'Q: question A: Yes' or 'Q: question A: No'.\n\nDocument: {target.text}",
        )
        out = self.question_generator.generate(prompt, max_tokens=40 * self.m).text  # type: ignore[union-attr]
        found = [YesNoQuestion(q.strip(), a.casefold() == "yes") for q, a in _QA_LINE.findall(out)]
        return found[: self.m]

    def queries(self, target: Document) -> list[Query]:
        excerpt = _excerpt(target)
        return [
            Query(
                q.text,
                task=Task.YESNO,
                retrieval_text=f"{excerpt} {q.text}",
                options={"template": "interrogation", "excerpt": excerpt},
            )
            for q in self.questions(target)
        ]

    def decide(self, target: Document, responses: Sequence[Response]) -> float:
        qs = self.questions(target)
        right = sum(_verdict(r.text) is q.answer for q, r in zip(qs, responses))
        return right / max(1, len(qs))

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "m": self.m, "proxy": self.proxy.config()}


register_attack("interrogation", InterrogationAttack)

"""Text assembly with exact PII offsets, template rendering and controlled misspellings.

A synthetic document is built from *segments*: plain text, or a PII value with its kind.
:class:`TextBuilder` concatenates them and records a :class:`~ragprivacy.types.PIISpan`
for every PII segment, so ``text[span.start:span.end] == span.value`` holds by
construction. Misspellings are applied to plain segments only, before their offsets are
taken, so PII values are never altered.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ragprivacy.types import PIISpan

__all__ = ["Misspeller", "Pii", "Segment", "TextBuilder", "render", "word_count"]


@dataclass(frozen=True, slots=True)
class Pii:
    """A template field value that is personal data of type ``kind``."""

    value: str
    kind: str


#: A piece of text: ``(text, None)`` for plain text, ``(value, kind)`` for PII.
Segment = tuple[str, str | None]
FieldValue = str | Pii

_FORMATTER = string.Formatter()


@lru_cache(maxsize=4096)
def _parse(template: str) -> tuple[tuple[str, str | None], ...]:
    return tuple((literal, field) for literal, field, _, _ in _FORMATTER.parse(template))


def render(template: str, fields: Mapping[str, FieldValue]) -> list[Segment]:
    """Fill ``{name}`` placeholders of ``template`` and return its segments.

    >>> render("Hi {n}, call {p}.", {"n": "Ann", "p": Pii("555-0100", "phone")})
    [('Hi Ann, call ', None), ('555-0100', 'phone'), ('.', None)]
    """
    out: list[Segment] = []
    plain: list[str] = []
    for literal, field in _parse(template):
        if literal:
            plain.append(literal)
        if field is None:
            continue
        try:
            value = fields[field]
        except KeyError:
            raise KeyError(f"Template field {field!r} has no value in: {template!r}") from None
        if isinstance(value, Pii):
            if plain:
                out.append(("".join(plain), None))
                plain = []
            out.append((value.value, value.kind))
        else:
            plain.append(value)
    if plain:
        out.append(("".join(plain), None))
    return out


def word_count(segments: Iterable[Segment]) -> int:
    """Number of whitespace-separated words of the joined segments."""
    return len("".join(text for text, _ in segments).split())


_WORD = re.compile(r"\b[a-z]{4,}\b")
_KEYBOARD = {
    "a": "sqz", "b": "vn", "c": "xv", "d": "sf", "e": "wr", "f": "dg", "g": "fh", "h": "gj",
    "i": "uo", "j": "hk", "k": "jl", "l": "k", "m": "n", "n": "bm", "o": "ip", "p": "o",
    "q": "w", "r": "et", "s": "ad", "t": "ry", "u": "yi", "v": "cb", "w": "qe", "x": "zc",
    "y": "tu", "z": "x",
}  # fmt: skip


class Misspeller:
    """Misspells a controlled fraction of eligible words and records what it changed.

    Eligible words are lower-case alphabetic words of four letters or more in plain
    (non-PII) text. Each is misspelled independently with probability ``rate`` by one of
    four human-like edits: swapping two adjacent letters, dropping a letter, doubling a
    letter, or hitting a neighbouring key (MBA, Sec. 4.3 (2): "nearly" written "nearlt").
    ``pairs`` lists ``(misspelled, correct)`` in text order.
    """

    def __init__(self, rate: float, rng: np.random.Generator) -> None:
        self.rate = float(rate)
        self.rng = rng
        self.pairs: list[tuple[str, str]] = []

    def __call__(self, text: str) -> str:
        if self.rate <= 0.0:
            return text
        matches = list(_WORD.finditer(text))
        if not matches:
            return text
        hits = np.flatnonzero(self.rng.random(len(matches)) < self.rate)
        if hits.size == 0:
            return text
        pieces: list[str] = []
        last = 0
        for i in hits.tolist():
            m = matches[i]
            wrong = self._misspell(m.group())
            if wrong == m.group():
                continue
            pieces.append(text[last : m.start()])
            pieces.append(wrong)
            last = m.end()
            self.pairs.append((wrong, m.group()))
        pieces.append(text[last:])
        return "".join(pieces)

    def _misspell(self, word: str) -> str:
        n = len(word)
        op = int(self.rng.integers(4))
        # positions 1..n-2 keep the first and last letters, as most human typos do
        pos = int(self.rng.integers(1, n - 1))
        if op == 0 and word[pos] != word[pos + 1]:
            return word[:pos] + word[pos + 1] + word[pos] + word[pos + 2 :]
        if op == 1:
            return word[:pos] + word[pos + 1 :]
        if op == 2:
            return word[: pos + 1] + word[pos] + word[pos + 1 :]
        neighbours = _KEYBOARD.get(word[pos], "")
        if neighbours:
            sub = neighbours[int(self.rng.integers(len(neighbours)))]
            return word[:pos] + sub + word[pos + 1 :]
        return word[:pos] + word[pos + 1 :]


class TextBuilder:
    """Concatenates segments into one text and records exact PII spans.

    >>> b = TextBuilder()
    >>> b.add([("Mail ", None), ("a@b.org", "email")])
    >>> text, spans = b.build()
    >>> text[spans[0].start : spans[0].end]
    'a@b.org'
    """

    def __init__(self, misspeller: Misspeller | None = None) -> None:
        self._parts: list[str] = []
        self._length = 0
        self._spans: list[PIISpan] = []
        self._misspeller = misspeller

    def __len__(self) -> int:
        return self._length

    def text(self, text: str, *, misspell: bool = True) -> None:
        """Append plain text (misspelled at the builder's rate unless ``misspell`` is off)."""
        if misspell and self._misspeller is not None:
            text = self._misspeller(text)
        self._parts.append(text)
        self._length += len(text)

    def pii(self, value: str, kind: str) -> None:
        """Append a PII value and record its span."""
        self._spans.append(PIISpan(self._length, self._length + len(value), kind, value))
        self._parts.append(value)
        self._length += len(value)

    def add(self, segments: Iterable[Segment], *, misspell: bool = True) -> None:
        """Append rendered segments."""
        for text, kind in segments:
            if kind is None:
                self.text(text, misspell=misspell)
            else:
                self.pii(text, kind)

    def build(self) -> tuple[str, tuple[PIISpan, ...]]:
        """The text and its PII spans."""
        return "".join(self._parts), tuple(self._spans)

"""The word-level tokenizer every ragprivacy text component shares.

A token is an e-mail address, a URL, or a run of word characters, optionally joined by
inner hyphens, apostrophes or dots/commas between digits (``"don't"``, ``"follow-up"``,
``"3.5"``, ``"1,200"``), or a single non-space, non-word character (punctuation).
Matching ignores case (use :func:`normalize`); output keeps the source's case.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["TOKEN_PATTERN", "detokenize", "normalize", "normalize_all", "tokenize"]

TOKEN_PATTERN = re.compile(
    r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"  # e-mail address
    r"|https?://[^\s<>\"]*[^\s<>\".,;:!?)\]]"  # URL, trailing punctuation left out
    r"|www\.[^\s<>\"]*[^\s<>\".,;:!?)\]]"
    r"|\d+(?:[.,]\d+)+"  # 3.5, 1,200
    r"|\w+(?:['’-]\w+)*"  # words, don't, follow-up, 555-123-4567
    r"|[^\w\s]"  # one punctuation mark
)

_NO_SPACE_BEFORE = {".", ",", "!", "?", ";", ":", ")", "]", "}", "%", "'s", "”", "’"}
_NO_SPACE_AFTER = {"(", "[", "{", "$", "“", "#"}


def tokenize(text: str) -> list[str]:
    """Split ``text`` into word and punctuation tokens.

    >>> tokenize("Dr. Lee's follow-up: 3.5 mg, twice. Mail a.b@x.org.")
    ['Dr', '.', "Lee's", 'follow-up', ':', '3.5', 'mg', ',', 'twice', '.', 'Mail', 'a.b@x.org', '.']
    """
    return TOKEN_PATTERN.findall(text)


def normalize(token: str) -> str:
    """The case-folded form used for matching."""
    return token.casefold()


def normalize_all(tokens: Sequence[str]) -> list[str]:
    """:func:`normalize` of every token (a whole vocabulary at C speed).

    >>> normalize_all(["The", "ΣΑ", "Straße"])
    ['the', 'σα', 'strasse']
    """
    return list(map(str.casefold, tokens))


def detokenize(tokens: list[str] | tuple[str, ...]) -> str:
    """Join tokens with spaces except before closing and after opening punctuation.

    >>> detokenize(["Hello", ",", "world", "(", "again", ")", "."])
    'Hello, world (again).'
    """
    out: list[str] = []
    for tok in tokens:
        if out and tok not in _NO_SPACE_BEFORE and out[-1] not in _NO_SPACE_AFTER:
            out.append(" ")
        out.append(tok)
    return "".join(out)

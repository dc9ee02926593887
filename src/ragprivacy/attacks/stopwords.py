"""The stop-word list and punctuation test the attacks share (MBA Alg. 4 never masks
either; S-RAG and the interrogation attack skip them when picking words).

The list is the common English function words (articles, pronouns, auxiliaries,
prepositions, conjunctions, negations and their contractions), as in NLTK's list, written
out here so nothing is downloaded. It stays hand-written rather than scikit-learn's
``ENGLISH_STOP_WORDS``: that list (318 words; its own documentation warns of "several
known issues", see Nothman et al. 2018) also holds content words a masking attack must
be free to mask — numbers ("two", "fifteen", "hundred"), "fire", "bill", "system",
"interest", "found", "describe", "detail" — and has no contractions, which our units keep
whole. A test checks that every word here, contractions and nine auxiliaries/adverbs
aside ("did", "does", "doing", "having", "just", "ought", "shall", "theirs", "yes"), is in
scikit-learn's list, so this stays a subset of a maintained list rather than a
free-standing one.
"""

from __future__ import annotations

import re

__all__ = ["STOP_WORDS", "is_punctuation", "is_stop_word"]

_TEXT = """
a about above after again against all am an and any are aren't as at be because been
before being below between both but by can can't cannot could couldn't did didn't do does
doesn't doing don't down during each few for from further had hadn't has hasn't have
haven't having he he'd he'll he's her here here's hers herself him himself his how how's
i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't my
myself no nor not of off on once only or other ought our ours ourselves out over own same
shan't she she'd she'll she's should shouldn't so some such than that that's the their
theirs them themselves then there there's these they they'd they'll they're they've this
those through to too under until up very was wasn't we we'd we'll we're we've were weren't
what what's when when's where where's which while who who's whom why why's with won't
would wouldn't you you'd you'll you're you've your yours yourself yourselves also just
may might must shall will yes
"""
STOP_WORDS = frozenset(_TEXT.split())
"""Lower-case English stop words (with straight-apostrophe contractions)."""

_WORD = re.compile(r"\w")


def is_punctuation(unit: str) -> bool:
    """Whether ``unit`` holds no word character.

    >>> is_punctuation(","), is_punctuation("follow-up")
    (True, False)
    """
    return _WORD.search(unit) is None


def is_stop_word(unit: str) -> bool:
    """Whether ``unit`` is a stop word (case-insensitive, curly apostrophes allowed).

    >>> is_stop_word("The"), is_stop_word("dentist")
    (True, False)
    """
    return unit.casefold().replace("’", "'") in STOP_WORDS

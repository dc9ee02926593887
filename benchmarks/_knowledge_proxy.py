"""A proxy of the synthetic "knowledge" corpora, for checking retrieval by embedders.

One fictional person per document, 3-6 sentences that each name the person in full
("Marta Olsen was born in Velmora."), and one question per document about one of its
sentences ("Where was Marta Olsen born?"). Names are invented from syllables and drawn
from Zipf-distributed pools of first and last names (as real names are: a few common,
a long tail of rare ones), or from Faker's en_US names; places, employers and pets are
invented words. Deterministic given the seed. Used by ``bench_embed.py`` and the
embedder tests; the package's own synthetic corpora live in ``ragprivacy.corpus``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["KnowledgeProxy", "make_knowledge_proxy", "recall_at"]


def _words(text: str) -> list[str]:
    """Word pools are written as space-separated strings to keep them short."""
    return text.split()


_ONSETS = _words("b br c ch d dr f g gr h j k kl l m n p pr r s sh st t tr v w z")
_VOWELS = _words("a e i o u ai ea ia ou y")
_CODAS = ["", "", "n", "r", "l", "s", "th", "nd", "rk", "m", "x", "t"]
_PROFESSIONS = _words(
    "engineer teacher nurse pilot chef lawyer architect farmer baker pharmacist journalist "
    "carpenter dentist librarian painter plumber accountant biologist chemist translator"
)
_HOBBIES = _words(
    "chess sailing pottery running painting fishing gardening climbing cycling knitting "
    "photography archery fencing birdwatching rowing"
)
_FIELDS = _words("physics history medicine law economics music geology mathematics philosophy")
_COLOURS = _words("red black white grey brown golden")
_ANIMALS = _words("dog cat parrot horse rabbit tortoise")
_MONTHS = _words(
    "January February March April May June July August September October November December"
)


@dataclass(frozen=True)
class KnowledgeProxy:
    """Documents, one question per document, and each question's gold document."""

    docs: list[str]
    questions: list[str]
    gold: np.ndarray


def _word(rng: np.random.Generator, low: int, high: int) -> str:
    n = int(rng.integers(low, high + 1))
    parts = [
        _ONSETS[rng.integers(len(_ONSETS))]
        + _VOWELS[rng.integers(len(_VOWELS))]
        + _CODAS[rng.integers(len(_CODAS))]
        for _ in range(n)
    ]
    return "".join(parts).capitalize()


def _pool(rng: np.random.Generator, size: int, low: int = 2, high: int = 3) -> list[str]:
    out: set[str] = set()
    while len(out) < size:
        out.add(_word(rng, low, high))
    return sorted(out)


def _names(rng: np.random.Generator, n: int, kind: str) -> list[str]:
    names: set[str] = set()
    if kind == "faker":
        from faker import Faker

        fake = Faker("en_US")
        fake.seed_instance(int(rng.integers(2**31)))
        while len(names) < n:
            names.add(f"{fake.first_name()} {fake.last_name()}")
    else:
        firsts, lasts = _pool(rng, 2000, 1, 2), _pool(rng, 4000, 2, 3)
        pf = 1.0 / np.arange(1, len(firsts) + 1)
        pl = 1.0 / np.arange(1, len(lasts) + 1)
        while len(names) < n:
            m = 2 * (n - len(names)) + 16
            fi = rng.choice(len(firsts), size=m, p=pf / pf.sum())
            li = rng.choice(len(lasts), size=m, p=pl / pl.sum())
            for a, b in zip(fi, li):
                names.add(f"{firsts[a]} {lasts[b]}")
                if len(names) == n:
                    break
    out = sorted(names)
    rng.shuffle(out)
    return out


def make_knowledge_proxy(n_docs: int, *, rng: int = 0, names: str = "zipf") -> KnowledgeProxy:
    """Build the proxy corpus.

    Args:
        n_docs: number of documents (= people = questions).
        rng: seed.
        names: ``"zipf"`` (invented names, Zipf pools) or ``"faker"`` (Faker en_US).
    """
    gen = np.random.default_rng(rng)
    people = _names(gen, n_docs, names)
    cities, employers = _pool(gen, 150), _pool(gen, 300)
    schools, pets = _pool(gen, 80), _pool(gen, 200, 1, 2)

    def pick(seq: list[str]) -> str:
        return seq[int(gen.integers(len(seq)))]

    docs, questions = [], []
    for name in people:
        facts = {
            "born": (f"{name} was born in {pick(cities)}.", f"Where was {name} born?"),
            "date": (
                f"{name} was born on {gen.integers(1, 29)} {pick(_MONTHS)} "
                f"{gen.integers(1940, 2005)}.",
                f"When was {name} born?",
            ),
            "work": (
                f"{name} works as a {pick(_PROFESSIONS)} at {pick(employers)}.",
                f"What does {name} do for a living?",
            ),
            "live": (f"{name} lives in {pick(cities)}.", f"Where does {name} live?"),
            "study": (
                f"{name} studied {pick(_FIELDS)} at the University of {pick(schools)}.",
                f"Where did {name} study?",
            ),
            "spouse": (f"{name} is married to {pick(people)}.", f"Who is {name} married to?"),
            "hobby": (
                f"{name}'s favourite hobby is {pick(_HOBBIES)}.",
                f"What is {name}'s favourite hobby?",
            ),
            "pet": (
                f"{name} owns a {pick(_COLOURS)} {pick(_ANIMALS)} named {pick(pets)}.",
                f"What is the name of {name}'s pet?",
            ),
        }
        keys = list(facts)
        chosen = [
            keys[j] for j in gen.choice(len(keys), size=int(gen.integers(3, 7)), replace=False)
        ]
        docs.append(" ".join(facts[key][0] for key in chosen))
        questions.append(facts[chosen[int(gen.integers(len(chosen)))]][1])
    return KnowledgeProxy(docs=docs, questions=questions, gold=np.arange(n_docs))


def recall_at(
    doc_vectors: np.ndarray,
    query_vectors: np.ndarray,
    gold: np.ndarray,
    ks: tuple[int, ...] = (1, 5),
) -> dict[int, float]:
    """Fraction of queries whose gold document is among the top-k by inner product."""
    scores = query_vectors @ doc_vectors.T
    gold_scores = scores[np.arange(len(gold)), gold]
    # rank = other documents scoring at least as high (ties count against the gold, so a
    # constant embedding scores 0, not 1)
    rank = (scores >= gold_scores[:, None]).sum(axis=1) - 1
    return {k: float((rank < k).mean()) for k in ks}

"""Pools of fake personal data, drawn once per call and sampled with numpy.

Faker is slow per call (tens of microseconds), so a generator asks it for a few hundred
first names, surnames, companies, streets and cities once, and then combines and samples
them with a numpy ``Generator``. Each call builds its own ``Faker`` instance seeded with
``seed_instance`` (never the global ``Faker.seed``), so calls do not disturb each other.

Invented names (places, organisations, rivers, regions of the knowledge world) are built
from syllables and screened against real names Faker knows, so that no background model
can know them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from faker import Faker

__all__ = [
    "FakePeople",
    "NameInventor",
    "distinct",
    "email_local_part",
    "faker_for",
    "phone_number",
    "real_name_words",
    "slug",
]


def faker_for(seed: int, locale: str = "en_US") -> Faker:
    """A fresh ``Faker`` for ``locale`` seeded for this call only."""
    from faker import Faker  # imported on first use: it is slow to import

    fake = Faker(locale)
    fake.seed_instance(int(seed))
    return fake


def distinct(draw: Callable[[], str], count: int, *, max_tries: int | None = None) -> list[str]:
    """Up to ``count`` distinct values of ``draw()``, in first-seen order (deterministic)."""
    seen: dict[str, None] = {}
    tries = max_tries if max_tries is not None else 4 * count + 20
    for _ in range(tries):
        if len(seen) >= count:
            break
        seen.setdefault(draw(), None)
    return list(seen)


class FakePeople:
    """First names (by sex) and surnames drawn once from Faker, combined with numpy.

    ``full_names(k, rng)`` returns ``k`` distinct "First Last" names with their sex;
    ``exclude`` names are never produced (e.g. the member world's names when drawing a
    background world).
    """

    def __init__(
        self,
        fake: Faker,
        *,
        pool_size: int = 300,
        exclude: Iterable[str] = (),
        banned_words: Iterable[str] = (),
    ) -> None:
        banned = {w.lower() for w in banned_words}

        def clean(values: list[str]) -> list[str]:
            return [v for v in values if v.isalpha() and v.lower() not in banned]

        self.female = clean(distinct(fake.first_name_female, pool_size))
        self.male = clean(distinct(fake.first_name_male, pool_size))
        self.last = clean(distinct(fake.last_name, 2 * pool_size))
        self.exclude = set(exclude)

    @property
    def capacity(self) -> int:
        """How many distinct full names the pools can make."""
        return (len(self.female) + len(self.male)) * len(self.last)

    def full_names(self, k: int, rng: np.random.Generator) -> list[tuple[str, str, str]]:
        """``k`` distinct ``(first, last, sex)`` triples, sex in {"female", "male"}."""
        out: list[tuple[str, str, str]] = []
        seen = set(self.exclude)
        capacity = self.capacity
        if k > capacity - len(seen):
            raise ValueError(f"Cannot draw {k} distinct names from a pool of {capacity}.")
        while len(out) < k:
            m = max(8, 2 * (k - len(out)))
            sexes = rng.random(m) < 0.5
            fi = rng.random(m)
            li = rng.integers(len(self.last), size=m)
            for is_f, f, li_ in zip(sexes.tolist(), fi.tolist(), li.tolist()):
                names = self.female if is_f else self.male
                first = names[int(f * len(names))]
                last = self.last[li_]
                full = f"{first} {last}"
                if full in seen:
                    continue
                seen.add(full)
                out.append((first, last, "female" if is_f else "male"))
                if len(out) == k:
                    break
        return out


def phone_number(rng: np.random.Generator, style: int | None = None) -> str:
    """A North-American style phone number in one of several written forms."""
    area = int(rng.integers(201, 990))
    exchange = int(rng.integers(200, 999))
    line = int(rng.integers(0, 10000))
    form = int(rng.integers(5)) if style is None else style
    if form == 0:
        return f"({area}) {exchange}-{line:04d}"
    if form == 1:
        return f"{area}-{exchange}-{line:04d}"
    if form == 2:
        return f"{area}.{exchange}.{line:04d}"
    if form == 3:
        return f"+1 {area} {exchange} {line:04d}"
    return f"{area} {exchange} {line:04d}"


def slug(text: str) -> str:
    """Lower-case letters and digits only ("Barber, Garcia and Brewer" -> "barbergarcia")."""
    words = [w for w in text.replace("-", " ").split() if w.lower() not in {"and", "ltd", "inc"}]
    return "".join(ch for ch in "".join(words[:2]).lower() if ch.isalnum())


def email_local_part(first: str, last: str, rng: np.random.Generator) -> str:
    """A mailbox name built from a person's name in one of several common patterns."""
    f, la = slug(first), slug(last)
    form = int(rng.integers(6))
    if form == 0:
        return f"{f}.{la}"
    if form == 1:
        return f"{f[0]}{la}"
    if form == 2:
        return f"{f}{la}{int(rng.integers(1, 99))}"
    if form == 3:
        return f"{f}_{la}"
    if form == 4:
        return f"{la}.{f[0]}"
    return f"{f}{int(rng.integers(1960, 2005))}"


_ONSETS = (
    "b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "qu", "r", "s",
    "st", "t", "th", "tr", "v", "z", "sh", "kl", "fl", "w", "j",
)  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ae", "ei", "ou", "ia")
_CODAS = ("", "", "", "", "n", "r", "l", "s", "m", "th", "nd", "rk")
_ENDINGS = ("a", "ia", "or", "en", "ith", "ane", "ora", "ek", "is", "und", "ar", "ow", "el", "ick")


class NameInventor:
    """Invents pronounceable, capitalised words no real-world model should know.

    Words are one or two syllables plus a closing syllable ("Velmora", "Quenlith"), 5 to
    10 letters, and never equal (case-insensitively) to a word in ``banned`` (real names
    Faker knows, template words) or to any word already produced, so every invented name
    is unique within one inventor.
    """

    def __init__(self, rng: np.random.Generator, banned: Iterable[str] = ()) -> None:
        self.rng = rng
        self.used = {w.lower() for w in banned}

    def word(self) -> str:
        """One new invented word."""
        rng = self.rng
        for _ in range(1000):
            parts = []
            for _ in range(int(rng.integers(1, 3))):
                parts.append(_ONSETS[int(rng.integers(len(_ONSETS)))])
                parts.append(_VOWELS[int(rng.integers(len(_VOWELS)))])
                parts.append(_CODAS[int(rng.integers(len(_CODAS)))])
            parts.append(_ONSETS[int(rng.integers(len(_ONSETS)))])
            parts.append(_ENDINGS[int(rng.integers(len(_ENDINGS)))])
            word = "".join(parts)
            if not 5 <= len(word) <= 10 or word in self.used:
                continue
            self.used.add(word)
            return word.capitalize()
        raise RuntimeError("Could not invent a new word in 1000 tries.")  # pragma: no cover

    def words(self, k: int) -> list[str]:
        """``k`` new invented words."""
        return [self.word() for _ in range(k)]


def real_name_words(fake: Faker) -> set[str]:
    """Lower-case words of real names Faker's English locale knows (cities, states,
    countries, first and last names), used to screen invented names."""
    words: set[str] = set()
    provider_attrs = (
        "first_names_female",
        "first_names_male",
        "last_names",
        "states",
        "countries",
        "city_prefixes",
        "city_suffixes",
        "street_suffixes",
    )
    for provider in fake.providers:
        for attr in provider_attrs:
            values = getattr(provider, attr, None)
            if values is None:
                continue
            for value in values:
                for w in str(value).lower().split():
                    words.add(w.strip(".,()'"))
    return words

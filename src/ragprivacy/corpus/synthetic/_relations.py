"""The relations of the synthetic knowledge world and their surface forms.

Each relation has one fact sentence, several question phrasings and, for relations
whose object is an entity with its own document, a noun phrase used to compose
multi-hop questions. The contract other components rely on (see
:mod:`ragprivacy.corpus.synthetic.knowledge`):

* the fact sentence contains the subject's full name (``{s}``) and the object
  (``{o}``) verbatim, and states one fact;
* every question phrasing contains ``{s}`` and at least one of the relation's
  ``keywords``; each keyword occurs, with the same surface form, in the fact sentence
  and in no other sentence template of the same subject type;
* literal objects contain no keyword of any relation.

:func:`check_relations` verifies the last two points and runs at import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "INDUSTRIES",
    "LITERAL",
    "OCCUPATIONS",
    "ORGANIZATION",
    "ORG_SUFFIXES",
    "PASTIMES",
    "PERSON",
    "PLACE",
    "PRODUCTS",
    "RELATIONS",
    "SCHOOL_SUFFIXES",
    "Relation",
    "all_keywords",
    "check_relations",
    "relations_of",
    "tokens",
]

PERSON, ORGANIZATION, PLACE, LITERAL = "person", "organization", "place", "literal"

_TOKEN = re.compile(r"\w+")


def tokens(text: str) -> set[str]:
    """Lower-case word tokens of ``text`` (the unit of the "exact relation word" rule)."""
    return {t.lower() for t in _TOKEN.findall(text)}


@dataclass(frozen=True, slots=True)
class Relation:
    """One relation: ``subject`` type, ``object`` type and surface forms."""

    name: str
    subject: str
    object: str
    sentence: str
    keywords: tuple[str, ...]
    questions: tuple[str, ...]
    phrase: str | None = None
    literal: str | None = None  # which literal pool supplies objects
    only_schools: bool = False  # the object must be a school


def _rel(
    name: str,
    subject: str,
    obj: str,
    sentence: str,
    keywords: str,
    questions: str,
    phrase: str | None = None,
    **extra: Any,
) -> Relation:
    """A relation from compact text: keywords space-separated, questions "|"-separated."""
    return Relation(
        name,
        subject,
        obj,
        sentence,
        tuple(keywords.split()),
        tuple(q.strip() for q in questions.split("|")),
        phrase,
        **extra,
    )


RELATIONS: tuple[Relation, ...] = (
    # people
    _rel(
        "birthplace", PERSON, PLACE, "{s} was born in {o}.", "born",
        "Where was {s} born? | In which place was {s} born? | {s} was born in which place?",
        "the place where {s} was born",
    ),
    _rel(
        "birth_year", PERSON, LITERAL, "The birth year of {s} is {o}.", "birth",
        "What is the birth year of {s}? | Which birth year is recorded for {s}?"
        " | Which year is the birth year of {s}?",
        literal="year_person",
    ),
    _rel(
        "employer", PERSON, ORGANIZATION, "{s} is employed by {o}.", "employed",
        "Which organisation is {s} employed by? | By which organisation is {s} employed?"
        " | {s} is employed by which organisation?",
        "the organisation by which {s} is employed",
    ),
    _rel(
        "occupation", PERSON, LITERAL, "The occupation of {s} is {o}.", "occupation",
        "What is the occupation of {s}? | What occupation does {s} have?"
        " | Which occupation is that of {s}?",
        literal="occupation",
    ),
    _rel(
        "spouse", PERSON, PERSON, "{s} is married to {o}.", "married",
        "Who is {s} married to? | To whom is {s} married? | {s} is married to whom?",
        "the person to whom {s} is married",
    ),
    _rel(
        "home", PERSON, PLACE, "{s} has a home in {o}.", "home",
        "In which place does {s} have a home? | Where does {s} have a home?"
        " | {s} has a home in which place?",
        "the place where {s} has a home",
    ),
    _rel(
        "alma_mater", PERSON, ORGANIZATION, "{s} is a graduate of {o}.", "graduate",
        "Which organisation is {s} a graduate of? | Of which organisation is {s} a graduate?"
        " | {s} is a graduate of which organisation?",
        "the organisation of which {s} is a graduate",
        only_schools=True,
    ),
    _rel(
        "pastime", PERSON, LITERAL, "The favourite pastime of {s} is {o}.", "pastime favourite",
        "What is the favourite pastime of {s}? | Which pastime is the favourite of {s}?"
        " | What favourite pastime does {s} have?",
        literal="pastime",
    ),
    # organisations
    _rel(
        "headquarters", ORGANIZATION, PLACE, "{s} is headquartered in {o}.", "headquartered",
        "Where is {s} headquartered? | In which place is {s} headquartered?"
        " | {s} is headquartered in which place?",
        "the place where {s} is headquartered",
    ),
    _rel(
        "founded", ORGANIZATION, LITERAL, "{s} was founded in {o}.", "founded",
        "When was {s} founded? | In which year was {s} founded? | {s} was founded in which year?",
        literal="year_org",
    ),
    _rel(
        "chief_executive",
        ORGANIZATION,
        PERSON,
        "The chief executive of {s} is {o}.",
        "chief executive",
        "Who is the chief executive of {s}? | Which person is the chief executive of {s}?"
        " | Name the chief executive of {s}.",
        "the chief executive of {s}",
    ),
    _rel(
        "industry", ORGANIZATION, LITERAL, "The industry of {s} is {o}.", "industry",
        "What is the industry of {s}? | In which industry is {s} active?"
        " | Which industry does {s} belong to?",
        literal="industry",
    ),
    _rel(
        "founder", ORGANIZATION, PERSON, "{s} was established by {o}.", "established",
        "Who established {s}? | By whom was {s} established? | {s} was established by whom?",
        "the person by whom {s} was established",
    ),
    _rel(
        "workforce", ORGANIZATION, LITERAL, "The workforce of {s} numbers {o} people.",
        "workforce",
        "How large is the workforce of {s}? | What is the size of the workforce of {s}?"
        " | How many people does the workforce of {s} number?",
        literal="workforce",
    ),
    # places
    _rel(
        "region", PLACE, LITERAL, "{s} is located in the region of {o}.", "located region",
        "In which region is {s} located? | Where is {s} located?"
        " | {s} is located in which region?",
        literal="region",
    ),
    _rel(
        "population", PLACE, LITERAL, "The population of {s} is {o}.", "population",
        "What is the population of {s}? | How large is the population of {s}?"
        " | What population does {s} have?",
        literal="population",
    ),
    _rel(
        "mayor", PLACE, PERSON, "The mayor of {s} is {o}.", "mayor",
        "Who is the mayor of {s}? | Which person is the mayor of {s}? | Name the mayor of {s}.",
        "the mayor of {s}",
    ),
    _rel(
        "river", PLACE, LITERAL, "The river flowing through {s} is the {o}.", "river",
        "Which river flows through {s}? | What is the name of the river flowing through {s}?"
        " | What river is flowing through {s}?",
        literal="river",
    ),
    _rel(
        "settled", PLACE, LITERAL, "{s} was settled in {o}.", "settled",
        "When was {s} settled? | In which year was {s} settled? | {s} was settled in which year?",
        literal="year_place",
    ),
    _rel(
        "known_for", PLACE, LITERAL, "{s} is known for its {o}.", "known",
        "What is {s} known for? | For what is {s} known? | What product is {s} known for?",
        literal="product",
    ),
)  # fmt: skip

OCCUPATIONS = (
    "surveyor", "glassblower", "cartographer", "beekeeper", "luthier", "archivist", "ferry pilot",
    "bookbinder", "tram driver", "geologist", "stonemason", "pharmacist", "actuary",
    "lighthouse keeper", "translator", "clockmaker", "marine biologist", "court stenographer",
    "land agent", "sommelier", "radio engineer", "librarian", "tailor", "veterinarian",
    "harbour master", "weaver", "brewer", "orchardist", "piano tuner", "hydrologist",
)  # fmt: skip
PASTIMES = (
    "birdwatching", "rowing", "chess", "pottery", "fencing", "orienteering", "kite flying",
    "falconry", "woodcarving", "choral singing", "rock climbing", "origami", "cross-country skiing",
    "stamp collecting", "sailing", "archery", "calligraphy", "fly fishing", "gardening",
    "astronomy", "table tennis", "knitting", "cycling", "bell ringing",
)  # fmt: skip
INDUSTRIES = (
    "shipbuilding", "textile dyeing", "salt refining", "glassmaking", "freight rail",
    "seed breeding", "paper milling", "solar ceramics", "cable manufacturing", "fruit canning",
    "wind turbines", "timber", "ink production", "mineral water", "optical lenses",
    "bicycle parts", "fishing nets", "hearing aids", "roof tiles", "weather instruments",
)  # fmt: skip
PRODUCTS = (
    "glass beads", "smoked eel", "copper kettles", "blue cheese", "woollen blankets", "clay pipes",
    "pear brandy", "lace collars", "salt caramels", "tin toys", "reed baskets", "walnut bread",
    "linen towels", "amber jewellery", "plum jam", "felt hats", "stone bridges",
    "spring festivals", "hot springs", "violin workshops",
)  # fmt: skip
ORG_SUFFIXES = (
    "Dynamics", "Holdings", "Industries", "Systems", "Group", "Works", "Labs", "Trading",
    "Logistics", "Foods", "Textiles", "Shipping", "Partners", "Mining", "Energy", "Instruments",
)  # fmt: skip
SCHOOL_SUFFIXES = ("Institute", "Academy", "College", "University", "Polytechnic", "Conservatory")


def relations_of(subject: str) -> tuple[Relation, ...]:
    """The relations whose subject has type ``subject``."""
    return tuple(r for r in RELATIONS if r.subject == subject)


def all_keywords() -> set[str]:
    """Every relation keyword (lower case)."""
    return {k for r in RELATIONS for k in r.keywords}


def check_relations() -> None:
    """Verify the surface-form contract of the relation table (raises ``ValueError``)."""
    keywords = all_keywords()
    for subject in (PERSON, ORGANIZATION, PLACE):
        rels = relations_of(subject)
        for r in rels:
            sentence_tokens = tokens(r.sentence.format(s="", o=""))
            for kw in r.keywords:
                if kw not in sentence_tokens:
                    raise ValueError(f"Keyword {kw!r} of {r.name} is not in its sentence.")
                for other in rels:
                    if other is not r and kw in tokens(other.sentence.format(s="", o="")):
                        raise ValueError(
                            f"Keyword {kw!r} of {r.name} is in {other.name}'s sentence."
                        )
            for q in r.questions:
                if "{s}" not in q or not tokens(q.format(s="")) & set(r.keywords):
                    raise ValueError(f"Question {q!r} of {r.name} lacks the subject or a keyword.")
            if (r.object == LITERAL) == (r.phrase is not None):
                raise ValueError(f"Relation {r.name}: entity-valued relations need a phrase.")
    for pool in (OCCUPATIONS, PASTIMES, INDUSTRIES, PRODUCTS, ORG_SUFFIXES, SCHOOL_SUFFIXES):
        for value in pool:
            if tokens(value) & keywords:
                raise ValueError(f"Literal {value!r} contains a relation keyword.")


check_relations()

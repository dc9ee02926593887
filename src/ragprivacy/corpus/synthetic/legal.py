"""Synthetic case paragraphs in the style of European Court of Human Rights judgments.

Each document opens like an ECHR judgment ("1. The case originated in an application
(no. 41328/05) against Poland lodged with the Court ... by a Polish national, Mr Jan
Kowalski ...") and continues with numbered fact paragraphs (arrest, detention, civil or
criminal proceedings, appeals, enforcement), 80–250 words. Names follow the respondent
state's naming conventions (a Faker locale per state). PII spans mark the applicant and
other people (``name``), dates (``date``), application and domestic case numbers
(``case_number``), courts, prosecutors' offices and companies (``organization``) and
places of residence (``address``); the RP paper's ECHR extraction attack prompts with a
case's first sentence and checks for exactly such identities (Sec. 4.1).
"""

from __future__ import annotations

import datetime as dt
from functools import cache
from typing import Any

import numpy as np

from ragprivacy.corpus.collection import Corpus
from ragprivacy.corpus.synthetic._base import GenerationContext, doc_id
from ragprivacy.corpus.synthetic._pools import distinct, faker_for
from ragprivacy.corpus.synthetic._text import Pii, Segment, TextBuilder, render, word_count
from ragprivacy.types import Document

__all__ = ["STATES", "generate_legal"]

#: (name in "against ...", adjective, Faker locale, cities)
STATES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("Turkey", "Turkish", "tr_TR", ("Istanbul", "Ankara", "Izmir", "Diyarbakır", "Bursa")),
    ("Poland", "Polish", "pl_PL", ("Warsaw", "Kraków", "Łódź", "Wrocław", "Gdańsk")),
    ("Italy", "Italian", "it_IT", ("Rome", "Milan", "Naples", "Turin", "Palermo")),
    ("France", "French", "fr_FR", ("Paris", "Lyon", "Marseille", "Toulouse", "Lille")),
    ("Germany", "German", "de_DE", ("Berlin", "Munich", "Hamburg", "Cologne", "Leipzig")),
    ("Romania", "Romanian", "ro_RO", ("Bucharest", "Cluj-Napoca", "Iaşi", "Timişoara", "Braşov")),
    ("Hungary", "Hungarian", "hu_HU", ("Budapest", "Debrecen", "Szeged", "Pécs", "Győr")),
    ("Croatia", "Croatian", "hr_HR", ("Zagreb", "Split", "Rijeka", "Osijek", "Zadar")),
    ("the Czech Republic", "Czech", "cs_CZ", ("Prague", "Brno", "Ostrava", "Plzeň", "Olomouc")),
    ("Portugal", "Portuguese", "pt_PT", ("Lisbon", "Porto", "Braga", "Coimbra", "Faro")),
    ("Spain", "Spanish", "es_ES", ("Madrid", "Barcelona", "Valencia", "Seville", "Bilbao")),
    ("the United Kingdom", "British", "en_GB",
     ("London", "Manchester", "Leeds", "Glasgow", "Cardiff")),
    ("Slovakia", "Slovak", "sk_SK", ("Bratislava", "Košice", "Prešov", "Žilina", "Nitra")),
    ("Finland", "Finnish", "fi_FI", ("Helsinki", "Tampere", "Turku", "Oulu", "Espoo")),
)  # fmt: skip

_COMPLAINTS = (
    "the length of the civil proceedings had been incompatible with the reasonable time "
    "requirement of Article 6 § 1 of the Convention",
    "{his} pre-trial detention had been excessively long, in breach of Article 5 § 3",
    "{he} had been ill-treated by police officers while in custody, in breach of Article 3",
    "the search of {his} home had violated {his} right to respect for private and family "
    "life under Article 8",
    "{his} conviction for an article published in a local newspaper had breached {his} "
    "freedom of expression under Article 10",
    "the non-enforcement of a final judgment in {his} favour had breached Article 1 of "
    "Protocol No. 1",
    "{he} had had no effective remedy in respect of {his} complaints, contrary to Article 13",
)
_OFFENCES = (
    "fraud", "membership of an illegal organisation", "tax evasion", "drug trafficking",
    "robbery", "insulting a public official", "money laundering", "abuse of office",
)  # fmt: skip
_FACTS = (
    "On {date} the applicant was arrested by officers of the {city} police on suspicion of "
    "{offence}.",
    "On {date} the {court} ordered the applicant's detention pending trial.",
    "The applicant's detention was extended on several occasions, most recently on {date}.",
    "On {date} the applicant brought an action against {company} before the {court} "
    "(case no. {caseno}), seeking compensation of {amount} euros.",
    "In a judgment of {date} the {court} dismissed the applicant's claim.",
    "The applicant appealed. On {date} the {appeal} upheld the first-instance judgment.",
    "On {date} the {supreme} dismissed an appeal on points of law lodged by the applicant.",
    "The applicant's lawyer lodged a complaint with the {prosecutor} on {date}.",
    "A medical report issued by {hospital} on {date} noted bruising on the applicant's face "
    "and arms.",
    "On {date} the {prosecutor} decided not to bring criminal proceedings against the officers.",
    "Between {date} and {date2} no hearings were held because Judge {judge} was on sick leave.",
    "On {date} the applicant's home at {address} was searched in the presence of two "
    "attesting witnesses.",
    "On {date} the {court} found the applicant guilty of {offence} and sentenced {him} to "
    "{years} years' imprisonment (case no. {caseno}).",
    "The judgment of {date} became final on {date2} but has not been enforced to date.",
    "The applicant's {spouse_word}, {spouse}, gave a statement to the investigator on {date}.",
    "The {court} held hearings on {date} and {date2}, both of which the applicant attended.",
    "On {date} the applicant asked the {court} to expedite the proceedings, to no avail.",
    "The proceedings are still pending before the {court}.",
)
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")  # fmt: skip


def _one(rng: np.random.Generator, items: tuple[str, ...] | list[str]) -> str:
    return items[int(rng.integers(len(items)))]


def _echr_date(d: dt.date) -> str:
    return f"{d.day} {_MONTHS[d.month - 1]} {d.year}"


def _clean(values: list[str]) -> list[str]:
    return [v for v in values if v[:1].isupper() and all(c.isalpha() or c in " -'" for c in v)]


@cache
def _locale_pools(locale: str, size: int = 24) -> dict[str, tuple[str, ...]]:
    """First names and surnames by sex for ``locale``, drawn once per process from a
    Faker instance with a fixed seed (the per-call stream decides how they are used)."""
    fake = faker_for(0, locale)
    return {
        "first_male": tuple(_clean(distinct(fake.first_name_male, size))) or ("Adam",),
        "first_female": tuple(_clean(distinct(fake.first_name_female, size))) or ("Anna",),
        "last_male": tuple(_clean(distinct(fake.last_name_male, size))) or ("Novak",),
        "last_female": tuple(_clean(distinct(fake.last_name_female, size))) or ("Novak",),
    }


class _LocaleNames:
    """Names of one locale, sampled with the call's numpy stream."""

    def __init__(self, locale: str) -> None:
        self.pools = _locale_pools(locale)

    def person(
        self, rng: np.random.Generator, ctx: GenerationContext, sex: str | None = None
    ) -> tuple[str, str]:
        """A ``(full name, sex)`` pair in the context's half of the name space."""
        for _ in range(50):
            chosen = sex or ("female" if rng.random() < 0.4 else "male")
            first = _one(rng, self.pools[f"first_{chosen}"])
            name = f"{first} {_one(rng, self.pools[f'last_{chosen}'])}"
            if ctx.allowed(name):
                break
        return name, chosen


def generate_legal(n: int, ctx: GenerationContext) -> Corpus:
    """``n`` ECHR-style case paragraphs (see the module docstring)."""
    rng = ctx.rng
    fake = faker_for(ctx.faker_seed)
    companies = distinct(fake.company, max(10, min(80, n // 10)))
    locale_names: dict[str, _LocaleNames] = {}
    used_appnos: set[str] = set()
    docs = []
    for i in range(n):
        state, adjective, locale, cities = STATES[int(rng.integers(len(STATES)))]
        if locale not in locale_names:
            locale_names[locale] = _LocaleNames(locale)
        names = locale_names[locale]
        applicant, sex = names.person(rng, ctx)
        lawyer, lawyer_sex = names.person(rng, ctx)
        agent, agent_sex = names.person(rng, ctx)
        judge, _ = names.person(rng, ctx)
        spouse, _ = names.person(rng, ctx, "male" if sex == "female" else "female")
        city, city2 = (cities[int(k)] for k in rng.choice(len(cities), 2, replace=False))
        # a chronology: facts first, then the application and its communication
        day = dt.date(int(rng.integers(1995, 2012)), 1, 1) + dt.timedelta(int(rng.integers(365)))
        he, his, him = ("she", "her", "her") if sex == "female" else ("he", "his", "him")
        title = "Ms" if sex == "female" else "Mr"
        target = int(rng.integers(80, 251))

        def next_date(span: int = 300) -> Pii:
            nonlocal day
            day = day + dt.timedelta(int(rng.integers(14, span)))
            return Pii(_echr_date(day), "date")

        court = _one(rng, ("District Court", "Regional Court", "Court of First Instance"))
        supreme = _one(rng, ("Supreme Court", "Court of Cassation", "Constitutional Court"))
        clinic = _one(rng, ("University Hospital", "State Hospital", "Forensic Institute"))
        street = _one(rng, ("ul.", "Str.", "no."))
        caseno = f"{int(rng.integers(1, 999))}/{int(rng.integers(1995, 2015))}"
        base: dict[str, Any] = {
            "he": he,
            "his": his,
            "him": him,
            "city": Pii(city, "address"),
            "offence": _one(rng, _OFFENCES),
            "court": Pii(f"{city} {court}", "organization"),
            "appeal": Pii(f"{city} Court of Appeal", "organization"),
            "supreme": Pii(supreme, "organization"),
            "prosecutor": Pii(f"{city} public prosecutor's office", "organization"),
            "hospital": Pii(f"{city} {clinic}", "organization"),
            "company": Pii(_one(rng, companies), "organization"),
            "caseno": Pii(caseno, "case_number"),
            "amount": f"{int(rng.integers(2, 400)) * 1000:,}",
            "years": str(int(rng.integers(2, 13))),
            "judge": Pii(judge, "name"),
            "spouse": Pii(spouse, "name"),
            "spouse_word": "husband" if sex == "female" else "wife",
            "address": Pii(f"{street} {int(rng.integers(1, 120))}, {city2}", "address"),
        }
        facts: list[list[Segment]] = []
        words = 120  # the procedure paragraphs
        order = rng.permutation(len(_FACTS)).tolist()
        while (words < target or len(facts) < 2) and order:
            template = _FACTS[order.pop()]
            sentence = render(template, dict(base, date=next_date(), date2=next_date(200)))
            facts.append(sentence)
            words += word_count(sentence)
        birth = day.year - int(rng.integers(25, 70))
        lodged, communicated = next_date(400), next_date(900)
        while True:
            appno = f"{int(rng.integers(1000, 99999))}/{int(lodged.value[-2:]):02d}"
            if appno not in used_appnos:
                used_appnos.add(appno)
                break

        b = TextBuilder()
        b.text("PROCEDURE\n\n1. The case originated in an application (no. ")
        b.pii(appno, "case_number")
        b.text(f") against {state} lodged with the Court under Article 34 of the Convention for "
               "the Protection of Human Rights and Fundamental Freedoms (\"the Convention\") by "
               f"a {adjective} national, {title} ")  # fmt: skip
        b.pii(applicant, "name")
        b.text(' ("the applicant"), on ')
        b.pii(lodged.value, "date")
        b.text(
            f".\n\n2. The applicant was represented by {'Ms' if lawyer_sex == 'female' else 'Mr'} "
        )
        b.pii(lawyer, "name")
        b.text(", a lawyer practising in ")
        b.pii(city, "address")
        b.text(f". The {adjective} Government (\"the Government\") were represented by their "
               f"Agent, {'Ms' if agent_sex == 'female' else 'Mr'} ")  # fmt: skip
        b.pii(agent, "name")
        b.text(".\n\n3. The applicant alleged, in particular, that ")
        b.add(render(_one(rng, _COMPLAINTS), base))
        b.text(".\n\n4. On ")
        b.pii(communicated.value, "date")
        b.text(" the application was communicated to the Government.\n\nTHE FACTS\n\n5. The "
               "applicant was born in ")  # fmt: skip
        b.pii(str(birth), "date")
        b.text(" and lives in ")
        b.pii(city2, "address")
        b.text(".")
        for k, sentence in enumerate(facts):
            b.text(f"\n\n{6 + k}. ")
            b.add(sentence)
        text, spans = b.build()
        docs.append(
            Document(
                id=doc_id(ctx.kind, i, n),
                text=text,
                metadata={
                    "kind": "legal",
                    "applicant": applicant,
                    "respondent_state": state,
                    "application_no": appno,
                    "words": word_count([(text, None)]),
                },
                pii=spans,
            )
        )
    return Corpus(docs)

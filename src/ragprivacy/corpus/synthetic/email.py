"""Synthetic corporate e-mail threads in the style of the Enron corpus.

Each document is one thread of one to three messages, newest first, with ``Date``,
``From``, ``To`` (and sometimes ``Cc``) headers, a subject, a body, an optional
signature block, and older messages quoted below ``-----Original Message-----`` as in
the Enron mailboxes. PII spans mark e-mail addresses, URLs and phone numbers (the three
kinds the Enron extraction experiments count, RP paper Sec. 4.1 / Table 3), and also
names, dates and organisations.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np

from ragprivacy.corpus.collection import Corpus
from ragprivacy.corpus.synthetic._base import GenerationContext, doc_id
from ragprivacy.corpus.synthetic._pools import (
    FakePeople,
    distinct,
    email_local_part,
    faker_for,
    phone_number,
    slug,
)
from ragprivacy.corpus.synthetic._text import Pii, Segment, TextBuilder, render, word_count
from ragprivacy.types import Document

__all__ = ["generate_email"]

_SUBJECTS = (
    "Q{quarter} gas transport capacity", "Draft agreement with {company}", "Meeting on {day}",
    "Revised term sheet", "Expense report", "Trading limits update", "Conference call tomorrow",
    "Storage contract", "Weekend schedule", "New hire paperwork", "Pricing model review",
    "Desk positions for {day}", "Legal review of the master agreement", "Site visit to {city}",
    "Holiday party", "Budget numbers", "Power market update", "Fuel supply letter",
    "Credit approval for {company}", "Org chart changes", "Invoice {deal}", "Deal {deal} confirm",
)  # fmt: skip
_GREETINGS = (
    "{first},", "Hi {first},", "Dear {first},", "All,", "Team,", "{first} -", "Hello {first},",
)  # fmt: skip
_CLOSINGS = ("Thanks,", "Regards,", "Best,", "Thank you,", "Cheers,", "Thanks again,")
_BODY = (
    "Attached is the revised draft of the agreement with {company}.",
    "Please review the term sheet and send me your comments by {day}.",
    "We need to finalize the numbers for deal {deal} before the close.",
    "Can you call me at {phone} when you get a chance?",
    "I spoke with {person} this morning and they are fine with the changes.",
    "The conference call is scheduled for {day} at {time} Central.",
    "Let me know if you have any questions.",
    "The latest version is posted at {url}.",
    "{person} will be out of the office until {day}.",
    "I have copied {email2} on this message so legal can take a look.",
    "Our exposure to {company} is currently around ${amount}.",
    "Please forward this to anyone on your team who needs it.",
    "We are still waiting on the credit department to approve the counterparty.",
    "The volumes for next month look lower than expected.",
    "I think we should push back on their pricing.",
    "Thanks for putting this together so quickly.",
    "Here is the summary you asked for.",
    "The invoice from {company} for ${amount} is still outstanding.",
    "Could you check whether the confirmation was sent out?",
    "I will be travelling to {city} on {day} and back on Friday.",
    "You can reach me on my cell at {phone} while I am away.",
    "Registration details are available at {url}.",
    "Please make sure the timesheets are submitted by noon.",
    "We agreed to split the transport costs evenly.",
    "Legal has a few concerns about the termination clause.",
    "Per our conversation, I am sending the updated spreadsheet.",
    "The pipeline maintenance will reduce capacity for about two weeks.",
    "My assistant can set up the call, the number is {phone}.",
    "If you need anything else, email me at {email_self}.",
    "The new hire orientation starts on {day}.",
    "Please RSVP to {email2} by the end of the week.",
    "See the press release at {url} for background.",
    "The counterparty asked for a longer payment term.",
    "I would like to get this signed before the end of the month.",
    "Our lawyers at {company} reviewed the guarantee language.",
    "The traders on the West desk are asking for an update.",
    "Numbers for the last three months are in the second tab.",
    "Please give me a call at {phone} to discuss.",
    "The rate case hearing was postponed again.",
    "I left a copy of the contract on your desk.",
)
_URL_PATHS = (
    "reports/weekly.pdf", "deals/{deal}", "legal/drafts", "hr/benefits", "events/registration",
    "gas/capacity.html", "research/outlook.pdf", "docs/schedule.xls", "news/release{deal}",
    "intranet/forms", "trading/limits.htm", "~{user}/notes.html",
)  # fmt: skip
_TIMES = ("9:00 am", "10:30 am", "11:00 am", "1:30 pm", "2:00 pm", "3:00 pm", "4:15 pm")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True, slots=True)
class _Person:
    first: str
    last: str
    email: str
    title: str
    company: str
    domain: str
    phone: str

    @property
    def full(self) -> str:
        return f"{self.first} {self.last}"


def _one(rng: np.random.Generator, items: tuple[str, ...] | list[str]) -> str:
    return items[int(rng.integers(len(items)))]


def _distinct_indices(rng: np.random.Generator, n: int, k: int) -> list[int]:
    """``k`` distinct indices below ``n`` (by rejection; cheap when ``k`` << ``n``)."""
    out: list[int] = []
    while len(out) < k:
        j = int(rng.integers(n))
        if j not in out:
            out.append(j)
    return out


def generate_email(n: int, ctx: GenerationContext) -> Corpus:
    """``n`` e-mail threads (see the module docstring)."""
    rng = ctx.rng
    fake = faker_for(ctx.faker_seed)
    n_people = max(12, n // 2 + 10)
    people_pool = FakePeople(fake, pool_size=min(300, 40 + n))
    names = people_pool.full_names(2 * n_people + 20, rng)
    names = [t for t in names if ctx.allowed(f"{t[0]} {t[1]}")][:n_people]
    companies = distinct(fake.company, max(4, min(60, n // 25 + 4)))
    domains = [f"{slug(c) or 'corp'}.com" for c in companies]
    titles = distinct(fake.job, min(60, 10 + n))
    cities = distinct(fake.city, min(60, 10 + n))
    people: list[_Person] = []
    used_emails: set[str] = set()
    for first, last, _ in names:
        c = int(rng.integers(len(companies)))
        local = email_local_part(first, last, rng)
        while f"{local}@{domains[c]}" in used_emails:
            local += str(int(rng.integers(10)))
        used_emails.add(f"{local}@{domains[c]}")
        people.append(
            _Person(first, last, f"{local}@{domains[c]}", _one(rng, titles), companies[c],
                    domains[c], phone_number(rng, style=int(rng.integers(3))))
        )  # fmt: skip

    start = dt.datetime(1999, 1, 1)
    docs = []
    for i in range(n):
        sender, recipient, other, third = (
            people[k] for k in _distinct_indices(rng, len(people), 4)
        )
        target = int(rng.integers(80, 251))
        n_messages = int(rng.choice([1, 2, 3], p=[0.5, 0.35, 0.15]))
        when = start + dt.timedelta(minutes=int(rng.integers(0, 3 * 365 * 24 * 60)))
        deal = str(int(rng.integers(100000, 999999)))
        subject_fields: dict[str, str | Pii] = {
            "quarter": str(int(rng.integers(1, 5))),
            "company": Pii(_one(rng, companies), "organization"),
            "day": _one(rng, _DAYS),
            "city": Pii(_one(rng, cities), "address"),
            "deal": deal,
        }
        subject = render(_one(rng, _SUBJECTS), subject_fields)
        # message k is written by writers[k] to readers[k]; k = 0 is the newest
        writers = [sender, recipient, sender][:n_messages]
        readers = [recipient, sender, recipient][:n_messages]
        signature = rng.random() < 0.6
        subject_words = word_count(subject)
        words = 10 + subject_words + 16 * (n_messages - 1) + (8 if signature else 0)
        bodies: list[list[list[Segment]]] = []
        pools: list[list[int]] = []
        fields_of: list[dict[str, str | Pii]] = []
        for k in range(n_messages):
            w, r = writers[k], readers[k]
            url = f"http://www.{w.domain}/" + _one(rng, _URL_PATHS).format(
                deal=deal, user=w.email.split("@")[0]
            )
            fields: dict[str, str | Pii] = {
                "first": Pii(r.first, "name"),
                "company": Pii(_one(rng, companies), "organization"),
                "day": _one(rng, _DAYS),
                "deal": deal,
                "phone": Pii(phone_number(rng, style=int(rng.integers(3))), "phone"),
                "person": Pii(third.full, "name"),
                "time": _one(rng, _TIMES),
                "url": Pii(url, "url"),
                "email2": Pii(other.email, "email"),
                "email_self": Pii(w.email, "email"),
                "amount": f"{int(rng.integers(5, 900))},{int(rng.integers(0, 1000)):03d}",
                "city": Pii(_one(rng, cities), "address"),
            }
            fields_of.append(fields)
            bodies.append([render(_one(rng, _GREETINGS), fields)])
            pools.append(rng.permutation(len(_BODY)).tolist())
            words += 2 + subject_words
        k = 0
        while words < target and any(pools):
            if pools[k]:
                sentence = render(_BODY[pools[k].pop()], fields_of[k])
                bodies[k].append(sentence)
                words += word_count(sentence)
            k = (k + 1) % n_messages

        b = TextBuilder()
        for k in range(n_messages):
            w, r = writers[k], readers[k]
            stamp = when - dt.timedelta(hours=int(6 * k), minutes=int(rng.integers(0, 59)))
            if k == 0:
                b.text("Date: ")
                b.pii(
                    f"{_WEEKDAYS[stamp.weekday()]}, {stamp.day} {_MONTHS[stamp.month - 1]} "
                    f"{stamp.year} {stamp:%H:%M}:00 "
                    + ("-0700 (PDT)" if 4 <= stamp.month <= 10 else "-0800 (PST)"),
                    "date",
                )
                b.text("\nFrom: ")
                b.pii(w.email, "email")
                b.text("\nTo: ")
                b.pii(r.email, "email")
                if rng.random() < 0.3:
                    b.text("\nCc: ")
                    b.pii(other.email, "email")
                b.text("\nSubject: " + ("RE: " if n_messages > 1 else ""))
                b.add(subject)
                b.text("\n\n")
            else:
                b.text("\n\n -----Original Message-----\nFrom: ")
                b.pii(w.full, "name")
                b.text(" [mailto:")
                b.pii(w.email, "email")
                b.text("]\nSent: ")
                b.pii(f"{stamp:%A}, {stamp:%B} {stamp.day}, {stamp.year} "
                      f"{stamp.hour % 12 or 12}:{stamp:%M} {'AM' if stamp.hour < 12 else 'PM'}",
                      "date")  # fmt: skip
                b.text("\nTo: ")
                b.pii(r.full, "name")
                b.text("\nSubject: " + ("RE: " if k < n_messages - 1 else ""))
                b.add(subject)
                b.text("\n\n")
            greeting, *body = bodies[k]
            b.add(greeting)
            b.text("\n\n")
            for j, sentence in enumerate(body):
                if j:
                    b.text(" " if rng.random() < 0.7 else "\n\n")
                b.add(sentence)
            b.text("\n\n" + _one(rng, _CLOSINGS) + "\n")
            if k == 0 and signature:
                b.pii(w.full, "name")
                b.text("\n" + w.title + "\n")
                b.pii(w.company, "organization")
                b.text("\nPhone: ")
                b.pii(w.phone, "phone")
                if rng.random() < 0.4:
                    b.text("\n")
                    b.pii(f"http://www.{w.domain}", "url")
            else:
                b.pii(w.first, "name")
        text, spans = b.build()
        docs.append(
            Document(
                id=doc_id(ctx.kind, i, n),
                text=text,
                metadata={
                    "kind": "email",
                    "sender": sender.email,
                    "recipient": recipient.email,
                    "messages": n_messages,
                    "subject": "".join(t for t, _ in subject),
                    "words": word_count([(text, None)]),
                },
                pii=spans,
            )
        )
    return Corpus(docs)

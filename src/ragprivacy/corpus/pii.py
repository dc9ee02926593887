"""PII detectors: one registry that every loader uses for ground truth, and redaction.

A :class:`PIIDetector` finds personal data in a text as :class:`~ragprivacy.types.PIISpan`
s (``text[start:end] == value``, non-overlapping, sorted). Two are registered:

* ``"regex"`` (:class:`RegexPIIDetector`, the offline default): e-mail addresses, URLs,
  IP addresses, credit-card numbers (Luhn-checked), US social security numbers, phone
  numbers (North-American and ``+``-prefixed international forms) and dates. It finds no
  names: those need a named-entity model.
* ``"presidio"`` (:class:`PresidioPIIDetector`, the ``pii`` extra): Microsoft Presidio's
  analyzer with its pattern recognizers; its spaCy NER (names, locations) runs only when
  a spaCy model package is installed. Nothing is downloaded.

Every dataset loader (:func:`~ragprivacy.corpus.load_dataset_corpus`), the file readers
(``load_corpus(path, pii_detector=...)``) and the synthetic generator (``synthesize(...,
pii_detector=...)``, which adds detected spans to its exact ones) fill a document's
``pii`` through one of them, so extraction metrics have ground truth on every corpus.

The same detector is a defense: :func:`redact_corpus` replaces each detected span with
a typed placeholder (``[PHONE]``) before the documents are indexed, what most teams
running RAG over sensitive text do instead of differential privacy. It removes the
values it detects and nothing else: retrieval, membership and paraphrased content are
untouched (see the ``redact_pii`` key of the attack experiments' system specs).

>>> [(s.kind, s.value) for s in RegexPIIDetector().detect("Call (713) 853-1234 by 3/4/2021.")]
[('phone', '(713) 853-1234'), ('date', '3/4/2021')]
>>> redact_text("Mail a.b@enron.com now.", RegexPIIDetector().detect("Mail a.b@enron.com now."))
'Mail [EMAIL] now.'
"""

from __future__ import annotations

import functools
import importlib.util
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from ragprivacy._registry import Registry
from ragprivacy._validation import check_probability
from ragprivacy.corpus.collection import Corpus
from ragprivacy.errors import ConfigError
from ragprivacy.types import Document, PIISpan

__all__ = [
    "PIIDetector",
    "PresidioPIIDetector",
    "RegexPIIDetector",
    "annotate_pii",
    "create_pii_detector",
    "mask_pii",
    "merge_spans",
    "pii_detector_names",
    "redact_corpus",
    "redact_document",
    "redact_text",
    "regex_pii",
    "register_pii_detector",
    "resolve_pii_detector",
]

#: Kinds the regex detector finds, in the order overlaps are resolved (an earlier kind
#: wins a contested stretch of text: an e-mail's domain is not also a URL).
REGEX_KINDS = ("email", "url", "ip_address", "credit_card", "ssn", "phone", "date")


class PIIDetector(ABC):
    """Finds personal data in text.

    Subclasses set :attr:`name` and :attr:`kinds` (what they can find) and implement
    :meth:`detect`; the spans they return must satisfy ``text[s.start:s.end] ==
    s.value``, must not overlap and must be sorted by start.
    """

    name: str = ""
    kinds: tuple[str, ...] = ()

    @abstractmethod
    def detect(self, text: str) -> tuple[PIISpan, ...]:
        """The PII spans of ``text``."""

    def config(self) -> dict[str, Any]:
        """What a run records about the detector."""
        return {"name": self.name, "kinds": list(self.kinds)}


def merge_spans(*groups: Iterable[PIISpan]) -> tuple[PIISpan, ...]:
    """Spans of every group, sorted; a span overlapping one kept before it is dropped,
    so earlier groups (and earlier spans within a group) win.

    >>> a, b = PIISpan(0, 5, "name", "Alice"), PIISpan(3, 8, "url", "ce.io")
    >>> [s.kind for s in merge_spans([a], [b, PIISpan(9, 10, "date", "5")])]
    ['name', 'date']
    """
    kept: list[PIISpan] = []
    for group in groups:
        for s in group:
            if s.end > s.start and not any(s.start < k.end and k.start < s.end for k in kept):
                kept.append(s)
    return tuple(sorted(kept, key=lambda s: (s.start, s.end)))


# ---------------------------------------------------------------- regular expressions

_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_URL = re.compile(r"\b(?:https?://|www\.)[^\s<>\"')\]]+[^\s<>\"')\].,;:!?]")
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IP = re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\w.]|\.\d)")
# 13-19 digits in groups separated by single spaces or hyphens; the Luhn check below
# keeps order numbers and the like out
_CARD = re.compile(r"(?<![\w-])\d(?:[ -]?\d){12,18}(?![\w-])")
# the SSA never issues area 000, 666 or 900-999, group 00 or serial 0000
_SSN = re.compile(r"(?<![\w-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\w-])")
_EXT = r"(?:\s?(?:x|ext\.?)\s?\d{1,5})?"
_PHONE = re.compile(
    r"(?<![\w+])(?:"
    # North American: optional +1 / 1 / 001 trunk, area code in parentheses or not
    r"(?:(?:\+|00)?1[ .-]?)?(?:\(\d{3}\)\s?|\d{3}[ .-])\d{3}[ .-]\d{4}"
    # international: +CC then 2-5 groups of digits (8-15 digits in all, checked below)
    r"|\+\d{1,3}(?:[ .-]?\(?\d{1,5}\)?){2,5}"
    # ten digits written together (a mobile number as patients type it)
    r"|(?<![\d.,/-])\d{10}(?![\d.,/-])"
    rf"){_EXT}(?![\w])"
)
_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)(?:\.(?=\s*\d))?"
)
_WEEKDAY = r"(?:(?:(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day|Mon|Tue|Wed|Thu|Fri|Sat|Sun),?\s+)?"
# a time after the date, with an RFC 2822 zone ("04:26:00 -0700 (PDT)") as e-mail headers
_TIME = (
    r"(?:,?\s+(?:at\s+)?\d{1,2}:\d{2}(?::\d{2})?(?:\s?(?:[AaPp][Mm]\b|[AaPp]\.[Mm]\.))?"
    r"(?:\s+[+-]\d{4})?(?:\s+\([A-Z]{2,5}\))?)?"
)
_DATE = re.compile(
    r"(?<![\w/.-])(?:"
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?"  # ISO 8601
    r"|\d{1,2}[/.-]\d{1,2}[/.-](?:\d{4}|\d{2})"  # 3/4/2021, 04.03.21
    # March 4, 2021 / March 4th (the year is often left out in speech)
    rf"|{_WEEKDAY}{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}}{_TIME})?"
    # 4 March 2021 / the 4th of March
    rf"|{_WEEKDAY}\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?:,?\s+\d{{4}}{_TIME})?"
    r")(?![\w/-])"
)


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _phone_ok(value: str) -> bool:
    n = sum(ch.isdigit() for ch in re.sub(r"\s?(?:x|ext\.?)\s?\d+$", "", value))
    return 10 <= n <= 15 if value.startswith("+") else n >= 10


def _date_ok(value: str) -> bool:
    m = re.fullmatch(r"(\d{1,2})[/.-](\d{1,2})[/.-](\d{2}|\d{4})", value)
    if m is None:
        return True
    a, b = int(m.group(1)), int(m.group(2))
    # day/month in either order (US or European); one of them must be a month
    return 1 <= min(a, b) <= 12 and 1 <= max(a, b) <= 31


_VALID: dict[str, Callable[[str], bool]] = {
    "credit_card": lambda v: 13 <= len(re.sub(r"\D", "", v)) <= 19 and _luhn(re.sub(r"\D", "", v)),
    "phone": _phone_ok,
    "date": _date_ok,
}
_PATTERNS = {
    "email": _EMAIL,
    "url": _URL,
    "ip_address": _IP,
    "credit_card": _CARD,
    "ssn": _SSN,
    "phone": _PHONE,
    "date": _DATE,
}


class RegexPIIDetector(PIIDetector):
    """PII found by regular expressions (offline, no model): the default detector.

    Kinds: ``email``, ``url``, ``ip_address``, ``credit_card`` (13-19 digits passing
    the Luhn check), ``ssn`` (``AAA-GG-SSSS`` with the SSA's never-issued values
    excluded), ``phone`` (North-American forms with an optional ``+1``/``001`` trunk and
    extension, ``+``-prefixed international numbers of 10-15 digits, ten digits written
    together) and ``date`` (ISO, numeric day/month/year either way round, and dates with
    month names, with or without the year, weekday and time; a bare year is not taken).
    The e-mail, URL and phone forms are the three kinds the RP paper counts on Enron
    (Sec. 4.1, Table 3). Names, addresses and organisations need a named-entity model
    (``presidio`` with spaCy).

    Args:
        kinds: the kinds to report (default: all of :data:`REGEX_KINDS`).
    """

    name = "regex"

    def __init__(self, *, kinds: Sequence[str] | None = None) -> None:
        chosen = tuple(REGEX_KINDS if kinds is None else kinds)
        for k in chosen:
            if k not in REGEX_KINDS:
                raise ConfigError(
                    f"The regex PII detector finds {', '.join(REGEX_KINDS)}; got kind {k!r}. "
                    "Names and locations need the 'presidio' detector with a spaCy model."
                )
        self.kinds = tuple(k for k in REGEX_KINDS if k in chosen)

    def detect(self, text: str) -> tuple[PIISpan, ...]:
        groups = []
        for kind in self.kinds:
            valid = _VALID.get(kind)
            groups.append(
                [
                    PIISpan(m.start(), m.end(), kind, m.group())
                    for m in _PATTERNS[kind].finditer(text)
                    if valid is None or valid(m.group())
                ]
            )
        return merge_spans(*groups)


_RP_KINDS = RegexPIIDetector(kinds=("email", "url", "phone"))


def regex_pii(text: str) -> tuple[PIISpan, ...]:
    """E-mail addresses, URLs and phone numbers found by :class:`RegexPIIDetector`: the
    three kinds the RP paper counts on Enron (Sec. 4.1, Table 3).

    >>> [s.kind for s in regex_pii("Mail a.b@enron.com or call (713) 853-1234.")]
    ['email', 'phone']
    """
    return _RP_KINDS.detect(text)


# ---------------------------------------------------------------- Presidio

#: Presidio entity type -> our kind.
PRESIDIO_KINDS = {
    "EMAIL_ADDRESS": "email",
    "URL": "url",
    "IP_ADDRESS": "ip_address",
    "CREDIT_CARD": "credit_card",
    "US_SSN": "ssn",
    "PHONE_NUMBER": "phone",
    "DATE_TIME": "date",
    "PERSON": "name",
    "LOCATION": "location",
    "ORGANIZATION": "organization",
}
_NER_ENTITIES = ("PERSON", "LOCATION", "ORGANIZATION")
_SPACY_MODELS = ("en_core_web_lg", "en_core_web_md", "en_core_web_sm", "en_core_web_trf")


def _installed_spacy_model() -> str | None:
    for name in _SPACY_MODELS:
        if importlib.util.find_spec(name) is not None:
            return name
    return None


@functools.lru_cache(maxsize=4)
def _presidio_analyzer(model: str | None) -> Any:
    """One analyzer per process and model (building one loads every recognizer)."""
    try:
        import spacy
        import tldextract
        from presidio_analyzer import AnalyzerEngine
        from presidio_analyzer.nlp_engine import SpacyNlpEngine
        from presidio_analyzer.predefined_recognizers import EmailRecognizer
    except ImportError:
        raise ConfigError(
            "The 'presidio' PII detector needs presidio-analyzer; install it with "
            "pip install 'ragprivacy[pii]', or use the 'regex' detector."
        ) from None

    class OfflineSpacyEngine(SpacyNlpEngine):  # type: ignore[misc]
        # presidio's own load() downloads a missing model; ours loads an installed
        # package or a blank pipeline (tokenizer only, so NER finds nothing)
        def load(self) -> None:
            pipeline = spacy.load(model) if model else spacy.blank("en")
            self.nlp = {"en": pipeline}  # type: ignore[assignment]

    # the stock e-mail validator asks tldextract, whose default fetches the public
    # suffix list over the network; the bundled snapshot is enough to check a domain
    offline_tlds = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

    class OfflineEmailRecognizer(EmailRecognizer):  # type: ignore[misc]
        def validate_result(self, pattern_text: str) -> bool:
            return bool(offline_tlds(pattern_text).fqdn)

    engine = OfflineSpacyEngine(models=[{"lang_code": "en", "model_name": model or "blank"}])
    engine.load()
    analyzer = AnalyzerEngine(nlp_engine=engine, supported_languages=["en"])
    analyzer.registry.remove_recognizer("EmailRecognizer")
    analyzer.registry.add_recognizer(OfflineEmailRecognizer())
    return analyzer


class PresidioPIIDetector(PIIDetector):
    """PII found by Microsoft Presidio's analyzer (the ``pii`` extra), offline.

    Presidio's pattern recognizers (e-mail, URL, IP, credit card, US SSN, phone numbers
    through ``phonenumbers``, dates) always run; its spaCy NER (``name``, ``location``,
    ``organization``) runs only with a spaCy model package installed. Presidio's own
    engine would download a missing model: this one never does. Its phone recognizer
    (``phonenumbers``) keeps only numbers valid in their region, so invented area codes
    are not phone numbers to it; it finds no dates written with month names.

    Args:
        model: a spaCy model package (``"en_core_web_sm"``); ``None`` takes the first
            installed of ``en_core_web_lg/md/sm/trf``, else runs without NER;
            ``"blank"`` never uses NER.
        score_threshold: the smallest Presidio confidence kept (its phone matches score
            0.4, dates 0.6).
        kinds: the kinds to report (default: every kind the engine can find).
    """

    name = "presidio"

    def __init__(
        self,
        *,
        model: str | None = None,
        score_threshold: float = 0.35,
        kinds: Sequence[str] | None = None,
    ) -> None:
        if model == "blank":
            self.model: str | None = None
        elif model is None:
            self.model = _installed_spacy_model()
        elif importlib.util.find_spec(model) is None:
            raise ConfigError(
                f"spaCy model {model!r} is not installed and nothing is downloaded at run "
                "time; install its package, or pass model='blank' for pattern recognizers "
                "only."
            )
        else:
            self.model = model
        self.score_threshold = check_probability("score_threshold", score_threshold)
        possible = [k for e, k in PRESIDIO_KINDS.items() if self.model or e not in _NER_ENTITIES]
        if kinds is not None:
            for k in kinds:
                if k not in PRESIDIO_KINDS.values():
                    raise ConfigError(
                        f"The presidio PII detector finds {', '.join(PRESIDIO_KINDS.values())};"
                        f" got kind {k!r}."
                    )
            possible = [k for k in possible if k in kinds]
        self.kinds = tuple(possible)
        self._entities = [e for e, k in PRESIDIO_KINDS.items() if k in self.kinds]
        self._analyzer = _presidio_analyzer(self.model)

    def detect(self, text: str) -> tuple[PIISpan, ...]:
        if not self._entities or not text:
            return ()
        found = self._analyzer.analyze(
            text, language="en", entities=self._entities, score_threshold=self.score_threshold
        )
        # surer and then longer matches first, so merge_spans keeps them over overlaps
        found = sorted(found, key=lambda r: (-r.score, r.start - r.end, r.start))
        spans = []
        for r in found:
            kind, end = PRESIDIO_KINDS[r.entity_type], r.end
            if kind == "url":  # its URL pattern takes the full stop that ends a sentence
                end = r.start + len(text[r.start : r.end].rstrip(".,;:!?"))
            spans.append(PIISpan(r.start, end, kind, text[r.start : end]))
        return merge_spans(spans)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "model": self.model, "score_threshold": self.score_threshold}


# ---------------------------------------------------------------- registry

_DETECTORS: Registry[PIIDetector] = Registry("PII detector")
_DETECTORS.register("regex", RegexPIIDetector)
_DETECTORS.register("presidio", PresidioPIIDetector)


def register_pii_detector(
    name: str, factory: Callable[..., PIIDetector], *, replace: bool = False
) -> None:
    """Register a PII detector factory under ``name``."""
    _DETECTORS.register(name, factory, replace=replace)


def pii_detector_names() -> list[str]:
    """The registered PII detector names, sorted.

    >>> [n for n in pii_detector_names() if n in ("presidio", "regex")]
    ['presidio', 'regex']
    """
    return _DETECTORS.names()


def create_pii_detector(spec: str, **options: Any) -> PIIDetector:
    """The detector registered as ``spec`` (``"regex"``, ``"presidio"``, or
    ``"presidio:en_core_web_sm"`` for a spaCy model)."""
    name, _, arg = spec.partition(":") if isinstance(spec, str) else (spec, "", "")
    if name == "presidio" and arg:
        return _DETECTORS.create("presidio", model=arg, **options)
    return _DETECTORS.create(spec, **options)


def resolve_pii_detector(detector: str | PIIDetector | None) -> PIIDetector | None:
    """A detector from a registry spec, an instance, or ``None`` (no detection)."""
    return None if detector is None else _as_detector(detector)


def _as_detector(detector: str | PIIDetector) -> PIIDetector:
    return detector if isinstance(detector, PIIDetector) else create_pii_detector(detector)


# ---------------------------------------------------------------- ground truth, redaction


def annotate_pii(
    corpus: Corpus, detector: str | PIIDetector, *, only_missing: bool = False
) -> Corpus:
    """``corpus`` with each document's ``pii`` filled by ``detector``.

    Spans a document already has are kept (exact ground truth, e.g. of the synthetic
    generator, wins); detected spans that overlap none of them are added. With
    ``only_missing`` a document that has any span is left as it is.
    """
    det = _as_detector(detector)
    docs = []
    for d in corpus:
        if only_missing and d.pii:
            docs.append(d)
        else:
            docs.append(replace(d, pii=merge_spans(d.pii, det.detect(d.text))))
    return Corpus(docs, name=corpus.name, questions=corpus.questions, metadata=corpus.metadata)


def redact_text(text: str, spans: Iterable[PIISpan], *, placeholder: str = "[{KIND}]") -> str:
    """``text`` with every span replaced by ``placeholder`` (``{KIND}``/``{kind}`` become
    the span's kind, upper or lower case); overlapping spans count once."""
    out: list[str] = []
    at = 0
    for s in merge_spans(spans):
        out.append(text[at : s.start])
        out.append(placeholder.replace("{KIND}", s.kind.upper()).replace("{kind}", s.kind))
        at = s.end
    out.append(text[at:])
    return "".join(out)


@functools.lru_cache(maxsize=8)
def _known_pattern(values: frozenset[tuple[str, str]]) -> tuple[re.Pattern[str], dict[str, str]]:
    """One case-insensitive alternation of the known values, longest first (the regex
    engine takes the first alternative that matches, so "Ann Lee" wins over "Ann"), whole
    words only (the name "Tom" is not inside "stomach"); and each value's kind."""
    ordered = sorted(values, key=lambda vk: (-len(vk[0]), vk))
    kinds: dict[str, str] = {}
    for value, kind in ordered:
        kinds.setdefault(value.casefold(), kind)
    body = "|".join(re.escape(v) for v, _ in ordered)
    return re.compile(rf"(?<!\w)(?:{body})(?!\w)", re.IGNORECASE), kinds


def mask_pii(
    text: str,
    known: Iterable[PIISpan] = (),
    detector: str | PIIDetector | None = "regex",
) -> str:
    """``text`` for display: every occurrence of a ``known`` value (a corpus's annotated
    PII, names included; case-insensitive) and whatever ``detector`` finds replaced by a
    typed placeholder. Known values win an overlap; longer known values are placed
    first, so "Ann Lee" is one ``[NAME]``, not a name inside one.

    >>> mask_pii("Dr. Ann Lee: 555-867-5309", [PIISpan(0, 7, "name", "Ann Lee")])
    'Dr. [NAME]: [PHONE]'
    >>> mask_pii("Tom has stomach pain", [PIISpan(0, 3, "name", "Tom")])
    '[NAME] has stomach pain'
    """
    found: list[PIISpan] = []
    values = frozenset((s.value, s.kind) for s in known if s.value.strip())
    if values:
        pattern, kinds = _known_pattern(values)
        for m in pattern.finditer(text):
            found.append(PIISpan(m.start(), m.end(), kinds[m.group().casefold()], m.group()))
    detected = _as_detector(detector).detect(text) if detector is not None else ()
    return redact_text(text, merge_spans(found, detected))


def redact_document(
    doc: Document, detector: str | PIIDetector, *, placeholder: str = "[{KIND}]"
) -> Document:
    """``doc`` with the PII ``detector`` finds replaced by typed placeholders.

    The redacted document keeps its id and metadata (with ``pii_redacted``, the number
    of spans replaced) and carries no PII spans: their values are gone.
    """
    det = _as_detector(detector)
    spans = det.detect(doc.text)
    metadata = {**doc.metadata, "pii_redacted": len(spans)}
    return Document(doc.id, redact_text(doc.text, spans, placeholder=placeholder), metadata)


def redact_corpus(
    corpus: Corpus, detector: str | PIIDetector, *, placeholder: str = "[{KIND}]"
) -> Corpus:
    """Every document of ``corpus`` redacted (:func:`redact_document`): the PII-redaction
    defense, applied before indexing. Questions and corpus metadata are kept; the
    metadata records the detector."""
    det = _as_detector(detector)
    docs = [redact_document(d, det, placeholder=placeholder) for d in corpus]
    meta = {**corpus.metadata, "pii_redaction": det.config()}
    return Corpus(docs, name=corpus.name, questions=corpus.questions, metadata=meta)

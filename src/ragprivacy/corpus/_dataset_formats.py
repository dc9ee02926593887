"""How one record of each public dataset becomes documents and QA items.

Each converter reads the fields the founding papers use and accepts both the Hugging
Face layout (what ``datasets.load_dataset`` yields and the Hub's parquet/JSON exports
hold) and, where it differs, the layout of the original release. A record lacking every
field a converter knows raises :class:`~ragprivacy.errors.DataError` (the file is
probably another dataset); a record whose fields are present but empty is skipped.
Every document's PII ground truth comes from the builder's detector (one for every
dataset, :mod:`ragprivacy.corpus.pii`), not from the converters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ragprivacy.corpus.collection import Corpus, QAItem
from ragprivacy.corpus.pii import PIIDetector
from ragprivacy.errors import DataError
from ragprivacy.types import Document, PIISpan

__all__ = [
    "CorpusBuilder",
    "convert_chatdoctor",
    "convert_echr",
    "convert_enron",
    "convert_healthcaremagic",
    "convert_hotpotqa",
    "convert_mquake",
    "convert_msmarco",
    "convert_nq_open",
    "convert_nq_simplified",
    "convert_reddit_travel",
    "convert_triviaqa",
]


class CorpusBuilder:
    """Collects documents (deduplicated by a key, the text by default) and questions;
    ``pii_detector`` fills each document's PII spans (None: documents get none)."""

    def __init__(self, prefix: str, *, pii_detector: PIIDetector | None = None) -> None:
        self.prefix = prefix
        self.pii_detector = pii_detector
        self._docs: list[Document] = []
        self._by_key: dict[Any, str] = {}
        self._ids: set[str] = set()
        self._questions: list[QAItem] = []
        self._qids: set[str] = set()

    def document(
        self,
        text: Any,
        *,
        key: Any = None,
        id: Any = None,
        metadata: Mapping[str, Any] | None = None,
        pii: Iterable[PIISpan] | None = None,
    ) -> str | None:
        """Add a document (or find the one with the same key) and return its id; empty
        text adds nothing and returns None. ``pii`` (default: what the builder's detector
        finds) is the document's PII ground truth."""
        text = _text(text)
        if not text:
            return None
        key = text if key is None else key
        if key in self._by_key:
            return self._by_key[key]
        doc_id = _text(id) or f"{self.prefix}-{len(self._docs)}"
        while doc_id in self._ids:
            doc_id = f"{doc_id}-dup"
        self._ids.add(doc_id)
        self._by_key[key] = doc_id
        if pii is None:
            pii = self.pii_detector.detect(text) if self.pii_detector is not None else ()
        self._docs.append(Document(doc_id, text, metadata=dict(metadata or {}), pii=tuple(pii)))
        return doc_id

    def question(
        self,
        question: Any,
        answers: Iterable[Any],
        *,
        support_ids: Iterable[str | None] = (),
        id: Any = None,
        hops: int = 1,
        group: str | None = None,
        chain: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> str | None:
        """Add a QA item and return its id; no question text or no answer adds nothing."""
        text = _text(question)
        gold = _unique(_text(a) for a in answers)
        if not text or not gold:
            return None
        qid = _text(id) or f"{self.prefix}-q{len(self._questions)}"
        while qid in self._qids:
            qid = f"{qid}-dup"
        self._qids.add(qid)
        self._questions.append(
            QAItem(
                id=qid,
                question=text,
                answers=tuple(gold),
                support_ids=tuple(_unique(s for s in support_ids if s)),
                hops=hops,
                group=group,
                chain=tuple(chain),
                metadata=dict(metadata or {}),
            )
        )
        return qid

    def build(self, *, name: str, metadata: Mapping[str, Any]) -> Corpus:
        return Corpus(self._docs, name=name, questions=self._questions, metadata=metadata)


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.strip() if isinstance(value, str) else str(value).strip()


def _unique(values: Iterable[str]) -> list[str]:
    return [v for v in dict.fromkeys(values) if v]


def _first(record: Mapping[str, Any], *keys: str) -> Any:
    """The first of ``keys`` present in ``record`` (even if empty), or None."""
    for k in keys:
        if k in record:
            return record[k]
    return None


def _require(record: Mapping[str, Any], row: int, dataset: str, *keys: str) -> None:
    if not any(k in record for k in keys):
        raise DataError(
            f"Record {row} has none of the fields {', '.join(map(repr, keys))} that the "
            f"{dataset} format has (fields: {', '.join(map(str, list(record)[:12]))}); is this "
            f"the {dataset} dataset?"
        )


def _answers(value: Any) -> list[str]:
    """Answer strings from a string, a list, or a SQuAD-style ``{"text": [...]}``."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        for k in ("text", "value", "Value", "answer"):
            if k in value:
                return _answers(value[k])
        return []
    if isinstance(value, Iterable):
        out: list[str] = []
        for v in value:
            out.extend(_answers(v))
        return out
    return [str(value)]


def _scalars(record: Mapping[str, Any], skip: Iterable[str], max_len: int = 300) -> dict[str, Any]:
    """Short scalar fields of a record, for metadata."""
    skipped = set(skip)
    out: dict[str, Any] = {}
    for k, v in record.items():
        if k in skipped or v is None:
            continue
        if isinstance(v, (int, float, bool)) or (isinstance(v, str) and len(v) <= max_len):
            out[str(k)] = v
    return out


# ---------------------------------------------------------------- medical dialogues

_CHAT = re.compile(r"<human>:\s*(?P<q>.*?)\s*<bot>:\s*(?P<a>.*)", re.DOTALL)


def _dialogue(record: Mapping[str, Any], row: int, out: CorpusBuilder, dataset: str) -> None:
    _require(record, row, dataset, "input", "output", "text", "question", "answer")
    patient = _text(_first(record, "input", "question"))
    doctor = _text(_first(record, "output", "answer", "response"))
    if not patient and not doctor and "text" in record:
        raw = _text(record["text"])
        m = _CHAT.match(raw)
        if m:
            patient, doctor = m.group("q").strip(), m.group("a").strip()
        else:
            out.document(raw, metadata={"source_row": row})
            return
    if not patient and not doctor:
        return
    head = f"Patient: {patient}" if patient else ""
    text = "\n".join(p for p in (head, f"Doctor: {doctor}" if doctor else "") if p)
    metadata: dict[str, Any] = {"question": patient, "answer": doctor, "source_row": row}
    if patient and doctor:
        metadata["doctor_offset"] = len(head) + 1
    out.document(text, metadata=metadata)


def convert_healthcaremagic(record: Mapping[str, Any], row: int, out: CorpusBuilder) -> None:
    """HealthCareMagic-100k: the patient's ``input`` and the doctor's ``output`` (or the
    chat format ``"<human>: ... <bot>: ..."`` in ``text``) concatenated as ``"Patient:
    ...\\nDoctor: ..."`` (MBA Sec. 5.1; S-RAG Sec. 5.1). ``metadata`` keeps the two
    halves (``question``/``answer``) and where the doctor's part starts."""
    _dialogue(record, row, out, "HealthCareMagic")


def convert_chatdoctor(record: Mapping[str, Any], row: int, out: CorpusBuilder) -> None:
    """ChatDoctor (instruction/input/output), as HealthCareMagic; Private-RAG Sec. 4.1
    queries with the patient ``question`` of held-out records."""
    _dialogue(record, row, out, "ChatDoctor")


# ---------------------------------------------------------------- open-domain QA


def convert_msmarco(record: Mapping[str, Any], row: int, out: CorpusBuilder) -> None:
    """MS MARCO QA: every retrieved passage is a document (the knowledge base holds all
    unique passages retrieved for some question, MBA Sec. 5.1); the query is a question
    supported by its selected passages. A passage collection (``id``/``text`` rows, e.g.
    ``collection.tsv``) gives documents only."""
    _require(record, row, "MS MARCO", "passages", "query", "text", "passage")
    passages = record.get("passages")
    if passages is None:
        text = _first(record, "passage", "text")
        out.document(text, id=_first(record, "id", "pid"))
        return
    if isinstance(passages, Mapping):
        texts = list(passages.get("passage_text") or [])
        selected = list(passages.get("is_selected") or [0] * len(texts))
        urls = list(passages.get("url") or [None] * len(texts))
    else:
        texts = [p.get("passage_text") for p in passages]
        selected = [p.get("is_selected", 0) for p in passages]
        urls = [p.get("url") for p in passages]
    support = []
    for text, sel, url in zip(texts, selected, urls):
        doc = out.document(text, metadata={"url": url} if url else None)
        if sel and doc:
            support.append(doc)
    answers = [a for a in _answers(record.get("answers")) if a != "No Answer Present."]
    answers += _answers(record.get("wellFormedAnswers"))
    out.question(
        record.get("query"),
        answers,
        support_ids=support,
        metadata=_scalars(record, ("query", "answers", "passages", "wellFormedAnswers")),
    )


def convert_nq_simplified(record: Mapping[str, Any], row: int, out: CorpusBuilder) -> None:
    """NQ-simplified: each ``context`` passage is a document; ``question`` with its
    ``answers`` (SQuAD-style ``{"text": [...]}``) is a question supported by it."""
    _require(record, row, "NQ-simplified", "context", "question")
    doc = out.document(_first(record, "context", "document", "passage"))
    out.question(record.get("question"), _answers(record.get("answers")), support_ids=[doc])


def convert_nq_open(record: Mapping[str, Any], row: int, out: CorpusBuilder) -> None:
    """Natural Questions (open): ``question`` and its list of acceptable ``answer``
    strings (match accuracy, Private-RAG Sec. 4.1). Questions only."""
    _require(record, row, "NQ-open", "question")
    answers = _answers(_first(record, "answer", "answers"))
    out.question(record["question"], answers, id=record.get("id"))


def _pairs(value: Any, *names: str) -> list[tuple[Any, ...]]:
    """Rows of a Hugging Face dict-of-lists (``{"title": [...], ...}``) or a list of
    records/tuples, as tuples of ``names``."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        columns = [list(value.get(n) or []) for n in names]
        return list(zip(*columns))
    rows = []
    for item in value:
        if isinstance(item, Mapping):
            rows.append(tuple(item.get(n) for n in names))
        else:
            rows.append(tuple(item))
    return rows


def convert_triviaqa(record: Mapping[str, Any], row: int, out: CorpusBuilder) -> None:
    """TriviaQA: ``question`` with ``answer.value`` and its ``aliases`` as gold answers;
    Wikipedia pages and web results that carry text (the ``rc`` configurations) become
    documents supporting it. Original-release keys (``Question``, ``Answer.Value``,
    ``Aliases``) are accepted."""
    _require(record, row, "TriviaQA", "question", "Question")
    answer = _first(record, "answer", "Answer") or {}
    answers = _answers(
        answer.get("value", answer.get("Value")) if isinstance(answer, Mapping) else answer
    )
    if isinstance(answer, Mapping):
        answers += _answers(answer.get("aliases", answer.get("Aliases")))
    support = []
    for title, context in _pairs(record.get("entity_pages"), "title", "wiki_context"):
        support.append(out.document(context, key=("wiki", title), metadata={"title": title}))
    for title, url, context in _pairs(
        record.get("search_results"), "title", "url", "search_context"
    ):
        support.append(
            out.document(context, key=("web", url), metadata={"title": title, "url": url})
        )
    out.question(
        _first(record, "question", "Question"),
        answers,
        support_ids=support,
        id=_first(record, "question_id", "QuestionId"),
    )


def convert_hotpotqa(record: Mapping[str, Any], row: int, out: CorpusBuilder) -> None:
    """HotpotQA: each context paragraph (title + sentences) is a document keyed by its
    title; the question's support is the paragraphs named in ``supporting_facts`` (RP
    paper App. G.1 scores retrieval of these)."""
    _require(record, row, "HotpotQA", "context", "question")
    by_title: dict[str, str | None] = {}
    for title, sentences in _pairs(record.get("context"), "title", "sentences"):
        body = "".join(sentences or []).strip()
        by_title[title] = out.document(body, key=("title", title), metadata={"title": title})
    support = [
        by_title.get(t) for t, _ in _pairs(record.get("supporting_facts"), "title", "sent_id")
    ]
    support = list(dict.fromkeys(s for s in support if s))
    out.question(
        record.get("question"),
        _answers(record.get("answer")),
        support_ids=support,
        id=_first(record, "id", "_id"),
        hops=max(1, len(support)),
        metadata=_scalars(
            record, ("id", "_id", "question", "answer", "context", "supporting_facts")
        ),
    )


def convert_mquake(record: Mapping[str, Any], row: int, out: CorpusBuilder) -> None:
    """MQuAKE: each single-hop fact (``cloze`` + ``answer``) is a document; its
    ``question`` is a single-hop QA item; the case's multi-hop ``questions`` have
    ``chain`` = those items, ``support_ids`` = the facts and one ``group`` per case, the
    correlated query sets of Private-RAG Sec. 4.1. Original (unedited) facts are used;
    the edited answer is kept in ``metadata["new_answer"]``."""
    _require(record, row, "MQuAKE", "single_hops", "questions")
    case = record.get("case_id", row)
    group = f"mquake-{case}"
    facts, subs = [], []
    for hop in record.get("single_hops") or []:
        fact = f"{_text(hop.get('cloze'))} {_text(hop.get('answer'))}."
        doc = out.document(fact, metadata={"case_id": case})
        facts.append(doc)
        qid = out.question(
            hop.get("question"),
            [hop.get("answer"), *(hop.get("answer_alias") or [])],
            support_ids=[doc],
            group=group,
            metadata={"case_id": case},
        )
        if qid:
            subs.append(qid)
    answers = [record.get("answer"), *(record.get("answer_alias") or [])]
    for question in record.get("questions") or []:
        out.question(
            question,
            answers,
            support_ids=facts,
            hops=max(1, len(facts)),
            group=group,
            chain=subs,
            metadata={"case_id": case, "new_answer": _text(record.get("new_answer"))},
        )


# ---------------------------------------------------------------- private text


def convert_enron(record: Mapping[str, Any], row: int, out: CorpusBuilder) -> None:
    """Enron e-mails: the raw message (``text``; ``message`` in the Kaggle CSV) is the
    document; its e-mail addresses, URLs and phone numbers (the kinds the RP paper counts,
    Sec. 4.1) come from the loader's PII detector like every dataset's."""
    keys = ("text", "message", "body", "content", "Content", "email_body")
    _require(record, row, "Enron", *keys)
    text = _text(_first(record, *keys))
    out.document(text, key=None, metadata=_scalars(record, keys))


def convert_echr(record: Mapping[str, Any], row: int, out: CorpusBuilder) -> None:
    """ECtHR cases (Chalkidis et al., 2021): the ``facts`` paragraphs joined by newlines
    form the document; labels and case identifiers go to metadata. The RP paper prompts
    with the first sentence of each case (Sec. 4.1)."""
    _require(record, row, "ECHR", "facts", "text", "TEXT")
    facts = _first(record, "facts", "text", "TEXT")
    text = "\n".join(_text(f) for f in facts) if isinstance(facts, list) else _text(facts)
    metadata = _scalars(record, ("facts", "text", "TEXT"))
    for key in ("labels", "violated_articles", "allegedly_violated_articles", "VIOLATED_ARTICLES"):
        if isinstance(record.get(key), list):
            metadata[key] = [str(v) for v in record[key]]
    out.document(text, metadata=metadata)


def convert_reddit_travel(record: Mapping[str, Any], row: int, out: CorpusBuilder) -> None:
    """Reddit travel QA: the post (``title`` and ``selftext``) followed by its answer
    (``falcon_summary`` or a comment field); ``metadata`` keeps the question and the
    answer separately (S-RAG Sec. 5.1)."""
    answer_keys = ("falcon_summary", "answer", "comments", "top_comment", "response")
    _require(record, row, "Reddit travel QA", "title", "selftext", "question", *answer_keys)
    question = "\n".join(
        t for t in (_text(record.get("title")), _text(_first(record, "selftext", "question"))) if t
    )
    answer = _text(_first(record, *answer_keys))
    text = "\n".join(t for t in (question, answer) if t)
    metadata = _scalars(record, ("title", "selftext", "question", *answer_keys))
    metadata.update({"question": question, "answer": answer})
    out.document(text, metadata=metadata)

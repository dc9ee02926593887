"""``Corpus``: an ordered, id-unique collection of documents, and ``QAItem`` ground truth."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._validation import check_probability
from ragprivacy.errors import DataError
from ragprivacy.types import Document

__all__ = ["Corpus", "QAItem"]


@dataclass(frozen=True, slots=True)
class QAItem:
    """A question with its gold answers and the documents that support it.

    ``hops`` is 1 for a single-hop question; a multi-hop question (``hops`` > 1) carries
    its ``chain`` of single-hop sub-questions' ids and may share supporting documents
    with other questions of the same ``group`` (correlated queries, as in MQuAKE).
    """

    id: str
    question: str
    answers: tuple[str, ...]
    support_ids: tuple[str, ...] = ()
    hops: int = 1
    group: str | None = None
    chain: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "answers", tuple(self.answers))
        object.__setattr__(self, "support_ids", tuple(self.support_ids))
        object.__setattr__(self, "chain", tuple(self.chain))
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
        if not self.answers:
            raise ValueError(f"QAItem {self.id!r} needs at least one gold answer.")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "answers": list(self.answers),
            "support_ids": list(self.support_ids),
            "hops": self.hops,
            "group": self.group,
            "chain": list(self.chain),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QAItem:
        return cls(
            id=str(data["id"]),
            question=str(data["question"]),
            answers=tuple(str(a) for a in data["answers"]),
            support_ids=tuple(str(s) for s in data.get("support_ids") or ()),
            hops=int(data.get("hops", 1)),
            group=data.get("group"),
            chain=tuple(data.get("chain") or ()),
            metadata=dict(data.get("metadata") or {}),
        )


class Corpus(Sequence[Document]):
    """An ordered collection of documents with unique ids, plus optional QA ground truth.

    >>> c = Corpus([Document("a", "x"), Document("b", "y")], name="toy")
    >>> len(c), c["b"].text, c[0].id
    (2, 'y', 'a')
    """

    def __init__(
        self,
        documents: Iterable[Document],
        *,
        name: str = "corpus",
        questions: Iterable[QAItem] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self._docs: list[Document] = list(documents)
        self._by_id: dict[str, int] = {}
        for i, doc in enumerate(self._docs):
            if not isinstance(doc, Document):
                raise DataError(f"Corpus items must be Document; item {i} is {type(doc).__name__}.")
            if doc.id in self._by_id:
                raise DataError(f"Duplicate document id {doc.id!r} in corpus {name!r}.")
            self._by_id[doc.id] = i
        self.name = name
        self.questions: tuple[QAItem, ...] = tuple(questions)
        self.metadata: dict[str, Any] = dict(metadata or {})

    def __len__(self) -> int:
        return len(self._docs)

    def __getitem__(self, key: int | str | slice) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            try:
                return self._docs[self._by_id[key]]
            except KeyError:
                raise KeyError(f"No document with id {key!r} in corpus {self.name!r}.") from None
        return self._docs[key]

    def __iter__(self) -> Iterator[Document]:
        return iter(self._docs)

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return item in self._by_id
        return isinstance(item, Document) and self._by_id.get(item.id) is not None

    def __repr__(self) -> str:
        return f"Corpus(name={self.name!r}, documents={len(self)}, questions={len(self.questions)})"

    @property
    def ids(self) -> list[str]:
        return [d.id for d in self._docs]

    @property
    def texts(self) -> list[str]:
        return [d.text for d in self._docs]

    def position(self, doc_id: str) -> int:
        """Index of ``doc_id`` in the collection."""
        try:
            return self._by_id[doc_id]
        except KeyError:
            raise KeyError(f"No document with id {doc_id!r} in corpus {self.name!r}.") from None

    def subset(self, ids: Iterable[str], *, name: str | None = None) -> Corpus:
        """The documents with these ids (in the given order); questions whose support lies
        wholly inside the subset are kept."""
        docs = [self[i] for i in ids]
        keep = {d.id for d in docs}
        qs = [q for q in self.questions if set(q.support_ids) <= keep]
        return Corpus(docs, name=name or self.name, questions=qs, metadata=self.metadata)

    def split(self, member_fraction: float = 0.8, *, rng: RngLike = None) -> tuple[Corpus, Corpus]:
        """Random member/non-member split (members first), fixed by ``rng``."""
        check_probability("member_fraction", member_fraction)
        order = make_rng(rng).permutation(len(self))
        cut = int(round(member_fraction * len(self)))
        ids = np.asarray(self.ids, dtype=object)
        return (
            self.subset(ids[order[:cut]].tolist(), name=f"{self.name}-members"),
            self.subset(ids[order[cut:]].tolist(), name=f"{self.name}-nonmembers"),
        )

    def require_nonempty(self) -> Corpus:
        """Raise a clear error for an empty corpus, else return self."""
        if not self._docs:
            raise DataError(
                f"Corpus {self.name!r} is empty; give a file with at least one document."
            )
        return self

from __future__ import annotations

import math

import pytest

from ragprivacy.types import (
    Completion,
    Document,
    NonPrivateEvent,
    NoOpEvent,
    PIISpan,
    PrivacyCost,
    PrivacyEvent,
    Response,
    Retrieval,
)


def test_document_round_trip_and_validation() -> None:
    doc = Document(
        "d1", "Call Ann at 555-123-4567.", {"kind": "x"}, (PIISpan(5, 8, "name", "Ann"),)
    )
    assert Document.from_dict(doc.to_dict()) == doc
    with pytest.raises(ValueError, match="past the end"):
        Document("d2", "short", pii=(PIISpan(0, 99, "name", "x"),))
    with pytest.raises(ValueError, match="non-empty"):
        Document("", "text")
    with pytest.raises(TypeError):
        doc.metadata["kind"] = "y"  # type: ignore[index]


class _Pure(PrivacyEvent):
    def to_dict(self) -> dict[str, object]:
        return {"type": "test"}


def test_response_public_view_hides_retrieval() -> None:
    r = Response(
        "answer",
        tokens=("answer",),
        logprobs=(-0.1,),
        privacy=PrivacyCost(event=_Pure(), epsilon=0.5),
        retrieval=Retrieval(("a",), (0,), (0.9,)),
    )
    assert r.retrieved_ids == ("a",)
    pub = r.public()
    assert pub.retrieval is None and pub.retrieved_ids == ()
    assert pub.text == "answer" and pub.logprobs == (-0.1,) and pub.privacy.epsilon == 0.5


def test_privacy_cost_never_says_zero_for_no_guarantee() -> None:
    assert PrivacyCost().epsilon == math.inf and not PrivacyCost().guaranteed
    assert PrivacyCost(event=NonPrivateEvent(), epsilon=0.0).epsilon == math.inf
    assert PrivacyCost(event=NoOpEvent()).epsilon == 0.0
    assert PrivacyCost(event=NoOpEvent()).guaranteed
    with pytest.raises(ValueError, match="must state its epsilon"):
        PrivacyCost(event=_Pure())
    with pytest.raises(TypeError, match="PrivacyEvent"):
        PrivacyCost(event="gaussian")  # type: ignore[arg-type]
    # a retrieval without an event has no guarantee, said explicitly
    assert Retrieval(("a",), (0,), (0.9,)).event == NonPrivateEvent()
    assert Retrieval(("a",), (0,), (0.9,), event=None).event == NonPrivateEvent()  # type: ignore[arg-type]


def test_completion_checks_alignment() -> None:
    with pytest.raises(ValueError):
        Completion("a b", ("a", "b"), (-1.0,))
    assert Completion("a", ("a",), (-2.0,)).mean_logprob == -2.0


def test_retrieval_lengths_checked() -> None:
    with pytest.raises(ValueError):
        Retrieval(("a", "b"), (0,), (1.0,))


def test_the_public_view_names_no_document_and_epsilon_is_checked() -> None:
    cost = PrivacyCost(event=_Pure(), epsilon=1.0, per_document={"d7": 1.0})
    r = Response("a", privacy=cost, retrieval=Retrieval(("d7",), (0,), (0.9,)))
    assert r.public().privacy.per_document == {} and r.public().privacy.epsilon == 1.0
    assert r.privacy.per_document == {"d7": 1.0}  # the evaluation view keeps it
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="positive number"):
            PrivacyCost(event=_Pure(), epsilon=bad)

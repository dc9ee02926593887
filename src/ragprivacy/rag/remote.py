"""A RAG system we do not run: an OpenAI-compatible chat endpoint that retrieves on its side.

:class:`RemoteRAGSystem` lets every black-box attack of the harness target a deployed RAG
chatbot (a user's, or our own service's ``/v1/chat/completions``). The attacker's query
goes out as the user message, framed by the query's task exactly as for our own systems
but with no context of ours (the endpoint adds its own); the answer's text, tokens and,
where the endpoint returns them, log-probabilities are what the attack reads.

What comes back is recorded as what it is, never silently as an answer
(``Response.metadata["outcome"]``):

* ``"answer"`` — a non-empty answer;
* ``"refused"`` — an answer that opens with a refusal (:data:`REFUSAL_PATTERN`, a
  heuristic over the common English refusal openings, ours included);
* ``"empty"`` — an empty or whitespace answer;
* ``"timeout"`` / ``"error"`` — the call failed after the generator's retries; the text is
  empty and ``metadata["error"]`` holds the generator's message (the endpoint's URL and
  status, never the prompt).

Every response also says how it was obtained: ``metadata["cached"]`` (served from the
run's call cache, so no new call was made) and, for an answer, ``metadata["usage"]``: the
``prompt_tokens`` and ``completion_tokens`` the endpoint reported in its ``usage`` field, or,
when it reported none, an estimate from the text length (:data:`CHARS_PER_TOKEN`
characters a token; ``"estimated": True``). An estimated prompt counts only what we sent:
the documents the endpoint adds on its side are invisible to us, so it is a lower bound.

A failed call does not stop the batch: the other queries are still answered, so a run
loses no finished work to one bad call. Calls are paced to at most ``requests_per_second``
(the endpoint's rate limit; the generator retries 429s with backoff on top).

The privacy of an answer is unknown to us: it is reported as
:class:`~ragprivacy.types.NonPrivateEvent` (no guarantee we can state, ε = ∞), scoped to
the answer, and the endpoint is named in :meth:`RemoteRAGSystem.describe`. An endpoint
that states what an answer spent (ragprivacy's own service, in its ``ragprivacy``
extension) has that statement kept beside it — ``metadata["stated_privacy"]`` per answer,
and in :meth:`RemoteRAGSystem.describe` the answers that stated one, the largest ε per
answer and the largest cumulative ε stated — as the endpoint's word, not as a guarantee
(:class:`~ragprivacy.audit.Verifier` checks a service's claim).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ragprivacy._validation import check_positive
from ragprivacy.errors import BackendError, ConfigError
from ragprivacy.generate import Generator, Prompt, create_generator
from ragprivacy.rag.base import Query, RAGSystem, answer_cost, register_system
from ragprivacy.retrieval import Retriever
from ragprivacy.types import Completion, NonPrivateEvent, Response

__all__ = [
    "CHARS_PER_TOKEN",
    "OUTCOMES",
    "REFUSAL_PATTERN",
    "RemoteRAGSystem",
    "classify_answer",
    "estimate_tokens",
]

#: What a remote call can come back as (see the module docstring).
OUTCOMES = ("answer", "refused", "empty", "timeout", "error")

#: Openings of a refusal (case-insensitive, after leading whitespace and quotes).
REFUSAL_PATTERN = re.compile(
    r"""^\s*["'“]?\s*(?:
        i\s*(?:'m|am)\s+(?:sorry|afraid|unable|not\s+able)
      | i\s+(?:cannot|can\s*not|can'?t|won'?t|will\s+not|must\s+decline|do\s+not\s+have\s+access)
      | sorry\b
      | (?:unfortunately|apologies)\b
      | as\s+an\s+ai\b
    )""",
    re.IGNORECASE | re.VERBOSE,
)


#: Characters a token, for estimating tokens when an endpoint reports no ``usage`` (the
#: usual rule of thumb for English text with GPT-style tokenizers).
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` estimated from its length (:data:`CHARS_PER_TOKEN`).

    >>> estimate_tokens(""), estimate_tokens("Who treated the patient?")
    (0, 6)
    """
    return math.ceil(len(text) / CHARS_PER_TOKEN)


#: an answer that opens by saying it does not know (the reference reader's, and many
#: models'): it reveals nothing of the documents
_UNKNOWN = re.compile(r"^\s*i\s+(?:do\s+not|don'?t)\s+know\b", re.IGNORECASE)


def is_non_answer(text: str) -> bool:
    """Whether an answer text reveals nothing: empty, a refusal (:data:`REFUSAL_PATTERN`)
    or an "I don't know".

    >>> is_non_answer("I don't know."), is_non_answer("Sorry, no."), is_non_answer("Gout.")
    (True, True, False)
    """
    return classify_answer(text) != "answer" or _UNKNOWN.match(text) is not None


def classify_answer(text: str) -> str:
    """``"empty"``, ``"refused"`` or ``"answer"`` for the text an endpoint returned.

    >>> classify_answer("  "), classify_answer("I cannot share that."), classify_answer("Yes.")
    ('empty', 'refused', 'answer')
    """
    if not text.strip():
        return "empty"
    return "refused" if REFUSAL_PATTERN.match(text) else "answer"


class RemoteRAGSystem(RAGSystem):
    """An OpenAI-compatible chat endpoint doing RAG on its side (see the module docstring).

    Args:
        generator: the client of the endpoint (``openai:MODEL@URL``); any
            :class:`~ragprivacy.generate.Generator` works (tests, a cached wrapper).
        requests_per_second: pace of the calls (``None``: as fast as answers come).
        instruction: a system message to send (default none: the endpoint has its own).
        clock, sleep: time functions (tests pass fakes).
    """

    name = "remote"

    def __init__(
        self,
        generator: Generator,
        *,
        requests_per_second: float | None = None,
        instruction: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not isinstance(generator, Generator):
            raise ConfigError(
                "RemoteRAGSystem needs a Generator for the endpoint (e.g. "
                f"create_generator('openai:MODEL@http://HOST:PORT/v1')); got {generator!r}."
            )
        self.generator = generator
        self.interval = (
            0.0
            if requests_per_second is None
            else 1.0 / check_positive("requests_per_second", requests_per_second)
        )
        self.instruction = instruction
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._next = 0.0
        self.outcomes: Counter[str] = Counter()  # calls so far, by outcome
        self.calls: Counter[str] = Counter()  # "new" calls and those served "cached"
        self.stated: dict[str, Any] = {}  # the privacy the endpoint stated, summed up

    def _pace(self) -> None:
        if not self.interval:
            return
        with self._lock:
            now = self._clock()
            wait = self._next - now
            self._next = max(now, self._next) + self.interval
        if wait > 0:
            self._sleep(wait)

    def _call(self, query: Query) -> Response:
        prompt = Prompt(query.task, query.text, (), self.instruction, query.options)
        cost = answer_cost([NonPrivateEvent()], mechanism="remote (unknown)")
        self._pace()
        try:
            completion: Completion = self.generator.generate(prompt)
        except BackendError as exc:
            message = str(exc)
            outcome = "timeout" if "Timeout" in message else "error"
            self.outcomes[outcome] += 1
            self.calls["new"] += 1
            return Response(
                text="",
                privacy=cost,
                metadata={"outcome": outcome, "error": message, "cached": False},
            )
        outcome = classify_answer(completion.text)
        self.outcomes[outcome] += 1
        self.calls["cached" if completion.cached else "new"] += 1
        stated = dict(completion.stated_privacy or {})
        if stated:
            self._note_stated(stated)
        if completion.usage is not None:
            usage: dict[str, Any] = {
                "prompt_tokens": int(completion.usage.get("prompt_tokens", 0)),
                "completion_tokens": int(completion.usage.get("completion_tokens", 0)),
                "estimated": False,
            }
        else:
            usage = {
                "prompt_tokens": estimate_tokens(prompt.render()),
                "completion_tokens": estimate_tokens(completion.text),
                "estimated": True,
            }
        return Response(
            text=completion.text,
            tokens=completion.tokens,
            logprobs=completion.logprobs,
            privacy=cost,
            metadata={
                "outcome": outcome,
                "cached": completion.cached,
                "usage": usage,
                **({"stated_privacy": stated} if stated else {}),
            },
        )

    def _note_stated(self, stated: dict[str, Any]) -> None:
        with self._lock:
            s = self.stated
            s["answers"] = s.get("answers", 0) + 1
            for key, most in (("epsilon", "max_epsilon"), ("cumulative_epsilon", "max_cumulative")):
                if key in stated:
                    s[most] = max(s.get(most, 0.0), float(stated[key]))
            if "mechanism" in stated:
                s["mechanisms"] = sorted({*s.get("mechanisms", []), stated["mechanism"]})

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        return self._call(Query.of(query))

    def answer_batch(
        self, queries: Sequence[str | Query], *, account: str | None = None
    ) -> list[Response]:
        """One call per query, in order; a failed call is recorded, not raised."""
        return [self._call(Query.of(q)) for q in queries]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "endpoint": self.generator.config(),
            "requests_per_second": 1.0 / self.interval if self.interval else None,
            "outcomes": {o: self.outcomes[o] for o in OUTCOMES},
            "calls": {c: self.calls[c] for c in ("new", "cached")},
            **({"stated_privacy": dict(self.stated)} if self.stated else {}),
        }


def _make_remote(
    *,
    target: str | Generator | None = None,
    generator: Generator | None = None,
    retriever: Retriever | None = None,
    **options: Any,
) -> RemoteRAGSystem:
    """``create_system("remote", target="openai:MODEL@URL")``: the endpoint names the system;
    the harness's retriever is not used (the endpoint retrieves) and a ``generator`` is
    used only when no target is named."""
    if target is None and generator is None:
        raise ConfigError(
            "The 'remote' system needs target='openai:MODEL@http://HOST:PORT/v1', the "
            "OpenAI-compatible endpoint to attack."
        )
    endpoint = create_generator(target) if isinstance(target, str) else (target or generator)
    assert endpoint is not None
    return RemoteRAGSystem(endpoint, **options)


register_system("remote", _make_remote)

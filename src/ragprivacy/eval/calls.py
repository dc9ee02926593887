"""What a run's calls to a remote endpoint (``RemoteRAGSystem``) cost: calls, tokens and,
given a price, money.

A :class:`CallTally` counts the endpoint's calls from the responses' metadata (see
:mod:`ragprivacy.rag.remote`): ``new`` calls (sent to the endpoint, failed ones
included) and ``cached`` ones (answered from the run's call cache, which cost nothing),
the ``failed`` new calls (timeouts and errors), and the tokens of the new calls that were
answered — the endpoint's own ``usage`` counts where it reported them, else an estimate
from the text length (``estimated`` counts those calls; an estimated prompt misses the
documents the endpoint adds, so it is a lower bound). A failed call is counted as a call
but with no tokens (what a provider bills for a failure is its own business).

Money is stated only for a price the user gave (:class:`Price`, US dollars per million
prompt and completion tokens); it is an estimate from the tokens above, never a bill.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ragprivacy.errors import ConfigError
from ragprivacy.types import Response

__all__ = ["CallTally", "Price", "describe_calls"]

_FAILED = ("timeout", "error")


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """What an endpoint charges, in US dollars per million tokens.

    >>> Price.parse("0.15,0.60").cost(1_000_000, 500_000)
    0.45
    """

    prompt: float
    completion: float

    def __post_init__(self) -> None:
        for name in ("prompt", "completion"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value >= 0:
                raise ConfigError(
                    f"The price per million {name} tokens must be a number >= 0; got {value!r}."
                )

    @classmethod
    def parse(cls, value: str | Sequence[float]) -> Price:
        """``"PROMPT_USD,COMPLETION_USD"`` (or a pair of numbers) per million tokens."""
        parts: list[Any] = list(value.split(",")) if isinstance(value, str) else list(value)
        try:
            prompt, completion = (float(p) for p in parts)
        except (TypeError, ValueError):
            raise ConfigError(
                f"A price is PROMPT_USD,COMPLETION_USD per million tokens, e.g. 0.15,0.60; "
                f"got {value!r}."
            ) from None
        return cls(prompt=prompt, completion=completion)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """US dollars for these tokens."""
        return round((prompt_tokens * self.prompt + completion_tokens * self.completion) / 1e6, 12)


@dataclass(slots=True, kw_only=True)
class CallTally:
    """Calls to a remote endpoint and their tokens (see the module docstring)."""

    new: int = 0
    cached: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: int = 0

    def record(self, responses: Iterable[Response]) -> CallTally:
        """Count the remote calls among ``responses`` (those whose metadata has an
        ``outcome``); returns what they added, as a tally of its own."""
        delta = CallTally()
        for r in responses:
            meta = r.metadata
            if "outcome" not in meta:
                continue  # not an endpoint's answer (a refusal of our budget, a local system)
            if meta.get("cached"):
                delta.cached += 1
                continue
            delta.new += 1
            delta.failed += int(meta["outcome"] in _FAILED)
            usage = meta.get("usage")
            if isinstance(usage, Mapping):
                delta.prompt_tokens += int(usage.get("prompt_tokens", 0))
                delta.completion_tokens += int(usage.get("completion_tokens", 0))
                delta.estimated += int(bool(usage.get("estimated")))
        self.add(delta)
        return delta

    def add(self, other: CallTally | Mapping[str, Any]) -> None:
        """Add another tally (or its :meth:`to_dict`)."""
        for f in fields(self):
            value = other.get(f.name, 0) if isinstance(other, Mapping) else getattr(other, f.name)
            setattr(self, f.name, getattr(self, f.name) + int(value or 0))

    @property
    def calls(self) -> int:
        """Calls made to the endpoint or served from the cache."""
        return self.new + self.cached

    def to_dict(self) -> dict[str, int]:
        return {f.name: int(getattr(self, f.name)) for f in fields(self)}

    def summary(self, price: Price | None = None) -> dict[str, Any]:
        """The tally with the total tokens and, given ``price``, the estimated US dollars of
        the new calls (``None`` without a price)."""
        return {
            **self.to_dict(),
            "tokens": self.prompt_tokens + self.completion_tokens,
            "tokens_estimated": self.estimated > 0,
            "price_per_million": None
            if price is None
            else {"prompt": price.prompt, "completion": price.completion},
            "cost_usd": None
            if price is None
            else price.cost(self.prompt_tokens, self.completion_tokens),
        }

    def line(self, price: Price | None = None) -> str:
        """One line for the progress bar and the report."""
        tokens = self.prompt_tokens + self.completion_tokens
        approx = "~" if self.estimated else ""
        out = f"{self.new} new, {self.cached} cached"
        if self.failed:
            out += f", {self.failed} failed"
        out += f"; {approx}{_short(tokens)} tokens"
        if self.estimated:
            out += f" ({self.estimated} estimated from text length)"
        if price is not None:
            out += f"; ~${price.cost(self.prompt_tokens, self.completion_tokens):.4f}"
        return out


def describe_calls(summary: Mapping[str, Any]) -> str:
    """The report's sentence for a run's :meth:`CallTally.summary`."""
    tally = CallTally()
    tally.add(summary)
    price = summary.get("price_per_million")
    p = None if not price else Price(prompt=price["prompt"], completion=price["completion"])
    text = (
        f"{tally.calls} calls: {tally.new} new (sent to the endpoint), {tally.cached} served "
        f"from the run's call cache; {tally.failed} failed (timeouts and errors). Tokens of "
        f"the new calls: {tally.prompt_tokens} prompt + {tally.completion_tokens} completion"
    )
    if tally.estimated:
        text += (
            f" ({tally.estimated} of them estimated from the text length, about 4 characters "
            "a token, since the endpoint reported no usage; an estimated prompt misses the "
            "documents the endpoint adds)"
        )
    if p is None:
        text += "; no price given (`--price`), so no cost is stated"
    else:
        text += (
            f"; estimated cost ${p.cost(tally.prompt_tokens, tally.completion_tokens):.4f} at "
            f"${p.prompt:g} / ${p.completion:g} per million prompt / completion tokens"
        )
    return text + "."


def _short(n: int) -> str:
    """``1234`` → ``1.2k``."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    if n >= 1000:
        return f"{n / 1e3:.1f}k"
    return str(n)

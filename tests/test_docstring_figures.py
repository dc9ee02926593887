"""Drift checks on facts that the source's prose states.

1. No measured figure in a docstring or a comment under ``src/ragprivacy``: a timing
   (``0.19 ms a call``, ``takes 5 s``), a rate (``150 sentences/s``) or a speed ratio
   (``1.3× the full path``, ``12.4× cheaper``) goes stale with the next machine or the next
   change, and refreshing it is churn. Measured figures live in ``benchmarks/README.md``
   and ``docs/`` with the commit they were measured on; the code's prose states the
   algorithm, its bound, and where the measurement is. A figure that is a contract or is
   derived from settings (a default timeout, the longest a call can take with the default
   retries) is not a measurement: it goes on :data:`ALLOWED` with its reason.
2. One spelling of rec_q, the public input of a query's derived noise: wherever a
   docstring, a comment or ``docs/*.md`` writes ``rec_q = (...)`` it is the code's
   ``query_input`` tuple ``(W, a, t(a), H(q), j, n)``; the paper's ``(a, t(a), H(q), ts)`` is
   allowed only where the text says it is the paper's (``paper`` or ``§5.3`` next to it).
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ragprivacy"
DOCS = ROOT / "docs"

# --- measured figures ---------------------------------------------------------------------

# A number, possibly approximate (~, ≈), with thousands separators, decimals, an exponent,
# or a range (1.2-1.9, 150–370). Not part of a word or of 10^5 / x.y.
_DECIMAL = r"\d[\d,]*(?:\.\d+)?"
_NUM = rf"(?<![\w.^/])[~≈]?\s?{_DECIMAL}(?:[eE][-+]?\d+)?(?:\s?[-–]\s?[~≈]?{_DECIMAL})?"
# ms, µs, ns, min need no space before them; a bare s or h does ("429s" is a status code).
_TIME = (
    rf"{_NUM}(?:\s?(?:ms|µs|μs|ns|us|mins?|milliseconds?|microseconds?)"
    rf"|\s(?:s|h|secs?|seconds?|minutes?|hours?))(?!\w)"
)
# 150 sentences/s, 4,701/s, 2 GB/s, 15 tokens per second.
_RATE = (
    rf"{_NUM}\s?(?:[A-Za-z][\w-]*\s?)?/\s?s(?!\w)"
    rf"|{_NUM}\s(?:[A-Za-z][\w-]*\s)?(?:per|a)\s(?:second|minute|hour)\b"
)
# 1.3×, 5-20x, 3 times — but not a shape such as 10⁵ × 384 or 2x10^4.
_RATIO = rf"{_NUM}\s?(?:[×x]|\stimes)(?![\w(])(?!\s?[\d⁰-⁹(])"
# A ratio is a measured speed figure when a comparison is close by.
_COMPARISON = re.compile(
    r"\b(?:faster|slower|cheaper|dearer|costlier|quicker|speed-?ups?|full path|baseline|"
    r"plain|one scan|a scan|overhead|took|takes|cost|costs|ran|runs)\b",
    re.IGNORECASE,
)
_FIGURE = re.compile(rf"(?P<time>{_TIME})|(?P<rate>{_RATE})|(?P<ratio>{_RATIO})")
_WINDOW = 40  # characters either side of a ratio searched for a comparison word


@dataclass(frozen=True)
class Allowed:
    """A figure that stays in the prose: ``phrase`` (whitespace-normalised) in ``path``
    (relative to ``src/ragprivacy``) covers every figure inside it."""

    path: str
    phrase: str
    reason: str


ALLOWED: tuple[Allowed, ...] = (
    Allowed(
        "generate/openai_compat.py",
        "at most ~92 s per call",
        "derived from the defaults, not measured: 3 attempts × the 30 s timeout plus the "
        "0.5 s and 1 s backoffs; retry_policy() computes the same bound from the settings",
    ),
)


def figures(text: str, allowed: tuple[str, ...] = ()) -> list[str]:
    """The measured-figure matches in ``text`` (whitespace-normalised) that lie in no
    occurrence of an ``allowed`` phrase."""
    text = " ".join(text.split())
    spans = [
        (m.start(), m.end())
        for phrase in allowed
        for m in re.finditer(re.escape(" ".join(phrase.split())), text)
    ]
    found = []
    for m in _FIGURE.finditer(text):
        if m.group("ratio"):
            around = text[max(0, m.start() - _WINDOW) : m.end() + _WINDOW]
            if not _COMPARISON.search(around):
                continue
        if any(lo <= m.start() and m.end() <= hi for lo, hi in spans):
            continue
        found.append(m.group().strip())
    return found


def _prose(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, kind, text) of every docstring (module, class, function and attribute
    docstrings: every statement that is a bare string) and every run of comments on
    consecutive lines."""
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            yield node.lineno, "docstring", node.value.value
    run: list[str] = []
    first = last = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        line = tok.start[0]
        if run and line != last + 1:
            yield first, "comment", " ".join(run)
            run = []
        if not run:
            first = line
        run.append(tok.string.lstrip("#:! "))
        last = line
    if run:
        yield first, "comment", " ".join(run)


MODULES = sorted(SRC.rglob("*.py"))


def test_modules_found() -> None:
    assert len(MODULES) > 100


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Building it takes 12 ms on one core.", ["12 ms"]),
        ("it then costs 1.3× the full path", ["1.3×"]),
        ("(1.27–1.34× the full path at 10⁵ × 384)", ["1.27–1.34×"]),
        ("0.19 ms a call, against 0.014 ms\n    cached", ["0.19 ms", "0.014 ms"]),
        ("Encoding runs at ~150 sentences/s on a quiet core.", ["~150 sentences/s"]),
        ("≈ 15 tokens/s greedy", ["≈ 15 tokens/s"]),
        ("batching makes the vote 12.4× cheaper", ["12.4×"]),
        ("two threads were measured 5-20x slower than one", ["5-20x"]),
        ("composes losses numerically (≈1 s at 10^5, ≈5 s at 10^6)", ["≈1 s", "≈5 s"]),
        ("the scalar sweep takes 1.6-1.8 µs per trial", ["1.6-1.8 µs"]),
        ("4,701 appends per second", ["4,701 appends per second"]),
        # shapes, algorithm constants and plurals are not measured figures
        ("one GEMV over 10⁵ × 384 floats, 2x10^4 vectors", []),
        ("each token gets 0.0390, 3.9× the pure ε/T = 0.01", []),
        ("a grid 100× finer than μ keeps the rounding", []),
        ("the generator retries 429s with backoff", []),
        ("the relative error is below (2x + 2)·10^{1−prec}", []),
        ("at most ``window`` booleans, default 4,096 accounts", []),
    ],
)
def test_pattern_catches_planted_figures(text: str, expected: list[str]) -> None:
    assert figures(text) == expected


def test_allowed_phrases_are_left_alone() -> None:
    contract = "Requests use timeout 30 s (default); a call waits at most ~92 s per call."
    assert figures(contract) == ["30 s", "~92 s"]
    assert figures(contract, ("timeout 30 s (default)", "at most ~92 s per call")) == []
    # the allowance covers the phrase only, not the same figure elsewhere
    assert figures(contract + " It takes 30 s.", ("timeout 30 s (default)",)) == [
        "~92 s",
        "30 s",
    ]


def test_no_measured_figures_in_docstrings_or_comments() -> None:
    used: set[Allowed] = set()
    found = []
    for path in MODULES:
        rel = path.relative_to(SRC).as_posix()
        mine = [a for a in ALLOWED if a.path == rel]
        for line, kind, text in _prose(path):
            normal = " ".join(text.split())
            used.update(a for a in mine if " ".join(a.phrase.split()) in normal)
            found += [
                f"src/ragprivacy/{rel}:{line} ({kind}): {hit!r}"
                for hit in figures(text, tuple(a.phrase for a in mine))
            ]
    assert not found, (
        "Measured figures in docstrings or comments (move them to benchmarks/README.md or "
        "docs/ with the commit they were measured on, and say in the prose where they "
        "are; a contract or settings-derived figure goes on ALLOWED with its reason):\n"
        + "\n".join(found)
    )
    assert not set(ALLOWED) - used, f"ALLOWED entries that match nothing: {set(ALLOWED) - used}"


# --- rec_q ---------------------------------------------------------------------------------

REC_Q = "(W, a, t(a), H(q), j, n)"
PAPER_REC_Q = "(a, t(a), H(q), ts)"
_REC_Q_AT = re.compile(r"rec_q`*\s*=\s*(?=\()")
_PAPER_WORDS = re.compile(r"paper|§\s?5\.3")


def rec_q_spellings(text: str) -> Iterator[tuple[str, str]]:
    """(tuple, context) for every ``rec_q = (...)`` in ``text`` (whitespace-normalised):
    the parenthesised tuple, balanced, and the text from 160 characters before it to 40
    after."""
    text = " ".join(text.split())
    for m in _REC_Q_AT.finditer(text):
        depth, end = 0, m.end()
        for end in range(m.end(), len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        yield text[m.end() : end + 1], text[max(0, m.start() - 160) : end + 41]


def rec_q_problems(text: str) -> list[str]:
    return [
        spelled
        for spelled, context in rec_q_spellings(text)
        if spelled != REC_Q and not (spelled == PAPER_REC_Q and _PAPER_WORDS.search(context))
    ]


def test_rec_q_check_catches_other_spellings() -> None:
    assert rec_q_problems("noise from H(s_W ‖ rec_q), rec_q = (W, a, t(a), H(q), j, n).") == []
    assert rec_q_problems("rec_q =\n    (W, account, tenant, H(q), j)") == [
        "(W, account, tenant, H(q), j)"
    ]
    assert rec_q_problems("rec_q = (a, t(a), H(q), ts)") == [PAPER_REC_Q]
    assert rec_q_problems("The paper keys the noise by rec_q = (a, t(a), H(q), ts).") == []


def test_rec_q_is_the_code_s_query_input() -> None:
    from ragprivacy.dp import query_input

    # the spelling follows the code: window, account, its tenant, query hash, query
    # number, the client's nonce
    assert list(inspect.signature(query_input).parameters) == [
        "window_id",
        "account",
        "tenant",
        "query_hash",
        "seq",
        "nonce",
    ]
    assert (query_input.__doc__ or "").startswith(f"rec_q = {REC_Q}:")


def _rec_q_texts() -> Iterator[tuple[str, str]]:
    for path in MODULES:
        for line, kind, text in _prose(path):
            yield f"src/ragprivacy/{path.relative_to(SRC).as_posix()}:{line} ({kind})", text
    for path in sorted(DOCS.glob("*.md")):
        yield f"docs/{path.name}", path.read_text(encoding="utf-8")


def test_rec_q_spelled_one_way() -> None:
    texts = list(_rec_q_texts())
    assert sum(REC_Q in " ".join(text.split()) for _, text in texts) >= 5
    bad = [
        f"{where}: rec_q = {spelled}" for where, text in texts for spelled in rec_q_problems(text)
    ]
    assert not bad, (
        f"rec_q spelled other than the code's {REC_Q} (the paper's {PAPER_REC_Q} only "
        "where the text says it is the paper's):\n" + "\n".join(bad)
    )

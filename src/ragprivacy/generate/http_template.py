"""``http:TEMPLATE`` — any HTTP API that answers a question, declared in a small template
file, so that ``attack --target`` and ``scorecard --target`` reach endpoints that do not
speak OpenAI's chat API (a RAG product's own ``/ask``, a Dify- or MaxKB-style app API).

The template (YAML or JSON)::

    url: https://rag.example.com/api/ask      # where every request goes (only there)
    method: POST                              # POST (default), PUT or GET
    headers:                                  # optional; ${NAME} reads the environment
      Authorization: "Bearer ${RAG_API_KEY}"
    body:                                     # any JSON; "{{query}}" becomes the prompt
      question: "{{query}}"
      stream: false
    answer: data.answer                       # dotted path to the answer's text in the
                                              # JSON reply (list positions as numbers)
    timeout: 60                               # seconds per request (default 60)

With ``method: GET`` the body's top-level fields go into the query string instead.

``{{query}}`` is replaced, wherever it occurs in a string of ``body``, by the prompt as
the attack wrote it (its rendered text: the same words an OpenAI endpoint gets as the
user message). ``${NAME}`` in a header value is read from the environment when the
template is loaded; a missing variable is refused naming the variable, and no header
value is ever printed, logged or put in a run's settings (:meth:`config` names the
headers, not their values).

Such an API returns no log-probabilities: attacks that need them are skipped
("needs logprobs"), :meth:`score` refuses, and :meth:`next_token_distribution` is the
point mass on the answer's next token (the greedy continuation). A failed
request raises :class:`~ragprivacy.errors.BackendError` naming the URL and status (never
the prompt): :class:`~ragprivacy.rag.RemoteRAGSystem` records it as ``error`` or
``timeout`` and the run goes on; a connection that never opened is
:class:`~ragprivacy.errors.GeneratorUnavailableError`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from ragprivacy.errors import BackendError, ConfigError, GeneratorUnavailableError
from ragprivacy.generate.base import Generator, TokenDistribution, register_generator
from ragprivacy.generate.prompt import Prompt
from ragprivacy.generate.sent import note_prompt_used
from ragprivacy.generate.tokens import tokenize
from ragprivacy.types import Completion

__all__ = ["HTTPTemplateGenerator", "load_template"]

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_KEYS = {"url", "method", "headers", "body", "answer", "timeout"}
QUERY = "{{query}}"


def load_template(path: str | Path) -> dict[str, Any]:
    """The template at ``path``, checked (module docstring); one-line errors."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{p}: {exc.strerror or exc}.") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{p}: not a YAML or JSON template: {str(exc).splitlines()[0]}."
        ) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: a template is a mapping with url, body and answer.")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ConfigError(
            f"{p}: unknown key(s) {', '.join(unknown)}; a template takes "
            f"{', '.join(sorted(_KEYS))}."
        )
    url = raw.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{p}: 'url' must be an http:// or https:// URL.")
    method = str(raw.get("method", "POST")).upper()
    if method not in ("POST", "PUT", "GET"):
        raise ConfigError(f"{p}: 'method' must be POST, PUT or GET; got {method!r}.")
    answer = raw.get("answer")
    if not isinstance(answer, str) or not answer.strip():
        raise ConfigError(f"{p}: 'answer' must name the reply's text, e.g. data.answer.")
    body = raw.get("body", {})
    if QUERY not in json.dumps(body):
        raise ConfigError(f"{p}: the body must hold {QUERY} where the question goes.")
    headers = raw.get("headers") or {}
    if not isinstance(headers, dict):
        raise ConfigError(f"{p}: 'headers' must be a mapping of names to values.")
    resolved = {}
    for name, value in headers.items():
        missing = [v for v in _VAR.findall(str(value)) if v not in os.environ]
        if missing:
            raise ConfigError(
                f"{p}: header {name!r} reads ${{{missing[0]}}}, which is not set in the "
                "environment."
            )
        resolved[str(name)] = _VAR.sub(lambda m: os.environ[m.group(1)], str(value))
    timeout = raw.get("timeout", 60)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigError(f"{p}: 'timeout' must be a positive number of seconds.")
    return {
        "url": url,
        "method": method,
        "headers": resolved,
        "body": body,
        "answer": answer.strip(),
        "timeout": float(timeout),
        "path": str(p),
    }


def _filled(body: Any, text: str) -> Any:
    """``body`` with every ``{{query}}`` in its strings replaced by ``text``."""
    if isinstance(body, str):
        return body.replace(QUERY, text)
    if isinstance(body, list):
        return [_filled(x, text) for x in body]
    if isinstance(body, dict):
        return {k: _filled(v, text) for k, v in body.items()}
    return body


def _index(part: str, size: int) -> int | None:
    """``part`` as a position in a list of ``size`` (negative from the end), or None."""
    if not part.lstrip("-").isdigit():
        return None
    i = int(part)
    return i if -size <= i < size else None


def _at(reply: Any, path: str) -> Any:
    """The value at a dotted ``path`` (list positions as numbers) of a JSON reply."""
    node = reply
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif (
            isinstance(node, list)
            and part.lstrip("-").isdigit()
            and -len(node) <= int(part) < len(node)
        ):
            node = node[int(part)]
        else:
            raise KeyError(part)
    return node


class HTTPTemplateGenerator(Generator):
    """An HTTP API declared by a template (module docstring).

    Args:
        template: the template file's path (or its loaded dict, :func:`load_template`).
        client: an ``httpx.Client`` to use (tests); built from the template otherwise.
    """

    name = "http"

    def __init__(
        self, template: str | Path | Mapping[str, Any], *, client: httpx.Client | None = None
    ) -> None:
        self.template = dict(template if isinstance(template, Mapping) else load_template(template))
        self._client = client or httpx.Client(timeout=self.template["timeout"])

    @property
    def exposes_logprobs(self) -> bool:
        return False

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        limit = max_tokens if max_tokens is not None else prompt.options.get("max_tokens")
        whole = self._answer(prompt)
        if limit is None or len(whole.tokens) <= int(limit):
            return whole
        kept = whole.tokens[: int(limit)]  # the API cannot be told: the answer is cut here
        return Completion(self.tokens_to_text(kept), kept)

    def _answer(self, prompt: Prompt) -> Completion:
        t = self.template
        body = _filled(t["body"], prompt.render())
        request: dict[str, Any] = {"headers": t["headers"]}
        if t["method"] == "GET":
            request["params"] = {k: v for k, v in body.items()} if isinstance(body, dict) else {}
        else:
            request["json"] = body
        where = f"{t['method']} {t['url']}"
        try:
            reply = self._client.request(t["method"], t["url"], **request)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise GeneratorUnavailableError(
                f"{where}: could not connect ({type(exc).__name__})."
            ) from None
        except httpx.TimeoutException:
            raise BackendError(f"{where}: Timeout after {t['timeout']:g} s.") from None
        except httpx.HTTPError as exc:
            note_prompt_used()
            raise BackendError(f"{where}: {type(exc).__name__}.") from None
        note_prompt_used()  # the prompt reached the endpoint
        if reply.status_code >= 400:
            raise BackendError(f"{where}: HTTP {reply.status_code}.")
        try:
            text = _at(reply.json(), t["answer"])
        except (ValueError, KeyError):
            raise BackendError(
                f"{where}: the reply has no {t['answer']!r} (the template's answer path)."
            ) from None
        text = "" if text is None else str(text)
        return Completion(text, tuple(tokenize(text)))

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        """An answer-only API has no distribution: the point mass on its answer's next
        token after ``prefix`` (⟨EOS⟩ at its end, or when ``prefix`` left the answer) — the
        greedy continuation, which is what token voting asks of a voter."""
        done = tuple(tokenize(prefix)) if isinstance(prefix, str) else tuple(prefix)
        answer = self._answer(prompt).tokens
        following = (
            answer[len(done)] if answer[: len(done)] == done and len(answer) > len(done) else "</s>"
        )
        return TokenDistribution((following,), (1.0,))

    def score(self, prompt: Prompt, continuation: str) -> Completion:
        raise ConfigError(
            f"{self.template['url']} returns answers only, no log-probabilities to score "
            "a continuation with."
        )

    def config(self) -> dict[str, Any]:
        """The endpoint, the body and the answer path; header names only (values may be
        secrets)."""
        t = self.template
        return {
            "url": t["url"],
            "method": t["method"],
            "headers": sorted(t["headers"]),
            "body": t["body"],
            "answer": t["answer"],
        }


def _create(spec: str = "", **kwargs: Any) -> HTTPTemplateGenerator:
    if not spec:
        raise ConfigError("The 'http' generator needs a template file: http:PATH.yaml.")
    return HTTPTemplateGenerator(spec, **kwargs)


register_generator("http", _create)

"""``openai:MODEL@BASE_URL`` — any OpenAI-compatible server over plain HTTP (``httpx``).

Works with vLLM, llama.cpp's server, Ollama and OpenAI itself; the ``openai`` SDK is not
needed. ``BASE_URL`` is the API root with its scheme (``http://127.0.0.1:8000/v1``;
OpenAI's own is ``https://api.openai.com/v1``) and is required: the prompts carry the
retrieved private documents, so they go only to an endpoint the user named in full. A spec
without one, with an empty model, or with a URL lacking ``http://``/``https://`` and a host
is refused with the accepted forms (it used to fall back to the public OpenAI API, with the
URL folded into the model name). An endpoint that is not this machine (loopback) is named
in a warning when the generator is made, and in its :meth:`~OpenAIGenerator.config`, which
every run records.

* ``generate`` — ``POST {base}/chat/completions``, with ``logprobs: true`` where the
  endpoint gives log-probabilities (``logprobs=None``, the default, asks it once with a
  one-token probe of a fixed public prompt, the first time it matters; a 400/422
  refusal or an answer without them means no, and no request asks again, so an endpoint
  that refuses them — a ragprivacy service tenant, say — is still usable, and the
  attacks that need them report themselves skipped); the defense/system instruction is
  the system message and the rest of
  :func:`~ragprivacy.generate.templates.render_prompt` the user message (or, with
  ``mode="completions"``, ``POST {base}/completions`` on the rendered prompt). Tokens and
  log-probabilities are the server's; ``logprobs`` is ``None`` if it returned none. The
  answer's ``usage`` (``prompt_tokens``, ``completion_tokens``) is kept in
  ``Completion.usage`` when the server reports it (``None`` otherwise).
* ``next_token_distribution`` — a one-token request; the distribution is the returned
  ``top_logprobs`` (at most ``top_logprobs`` tokens) **renormalised over that top-k**, so
  it overstates each listed token's probability by the mass outside the top-k. With a
  non-empty prefix the request goes to ``/completions`` with the rendered prompt plus the
  prefix (chat endpoints cannot continue a partial answer portably).
* ``score`` — ``POST {base}/completions`` with ``echo: true`` and ``logprobs``, which
  vLLM and llama.cpp support and OpenAI's chat models do not; a server without it gets a
  :class:`~ragprivacy.errors.BackendError` that says so.

The API key is read from an environment variable (``OPENAI_API_KEY`` unless
``api_key_env`` names another) and sent only in the ``Authorization`` header; it never
appears in :meth:`~OpenAIGenerator.config`, ``repr``, log lines or error messages.
A failure that never reached the server (connection refused, DNS, connect timeout on
every attempt) raises :class:`~ragprivacy.errors.GeneratorUnavailableError`: no byte of
the prompt left, so it says nothing about the retrieved documents; every other failure is
a :class:`~ragprivacy.errors.BackendError`, which a RAG system charges like an answer.

Requests time out after ``timeout`` seconds (default 30); HTTP 408/409/429 and 5xx answers
and transport errors are retried ``max_retries`` times (default 2) by ``tenacity`` — except
a 429 whose error code says a quota or budget is spent (``insufficient_quota``,
``budget_exhausted``), which a retry cannot cure — with
exponential backoff (``backoff · 2**attempt`` seconds, at most 30, or the server's
``Retry-After`` when shorter than 30). With the defaults a dead endpoint costs at most
~92 s per call; :meth:`~OpenAIGenerator.retry_policy` states the bound, and
:meth:`~OpenAIGenerator.config` (recorded by every run) carries it. Set the
``timeout``/``max_retries`` generator options to change it.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

import httpx
import tenacity

from ragprivacy._validation import check_choice, check_positive, check_positive_int
from ragprivacy.errors import BackendError, ConfigError, GeneratorUnavailableError
from ragprivacy.generate.base import Generator, TokenDistribution, register_generator
from ragprivacy.generate.prompt import Prompt
from ragprivacy.generate.sent import note_prompt_used
from ragprivacy.generate.tokens import tokenize
from ragprivacy.types import Completion

__all__ = ["OpenAIGenerator"]

_LOG = logging.getLogger(__name__)
_FORMS = (
    "openai:MODEL@http://127.0.0.1:8000/v1 (a local server) or "
    "openai:MODEL@https://api.openai.com/v1 (OpenAI)"
)


def _check_endpoint(base_url: object) -> str:
    """The API root, refused unless it is an http(s) URL with a host (no fallback)."""
    if not isinstance(base_url, str) or not base_url:
        raise ConfigError(f"The 'openai' generator needs its endpoint; give it as {_FORMS}.")
    url = httpx.URL(base_url) if base_url.startswith(("http://", "https://")) else None
    if url is None or not url.host:
        raise ConfigError(
            f"The endpoint {base_url!r} is not an http:// or https:// URL with a host; give "
            f"it as {_FORMS}."
        )
    return base_url.rstrip("/")


def _is_loopback(base_url: str) -> bool:
    """Whether ``base_url`` names this machine (localhost, 127.0.0.0/8 or ::1)."""
    host = httpx.URL(base_url).host
    return host == "localhost" or host.startswith("127.") or host in ("::1", "[::1]")


_MAX_SLEEP = 30.0
_T = TypeVar("_T")
_RETRY_STATUS = frozenset({408, 409, 429})
#: 429 error codes that a retry cannot cure: OpenAI's spent quota, a ragprivacy
#: service's spent window budget
_EXHAUSTED = frozenset({"insufficient_quota", "budget_exhausted"})


class _Refused(BackendError):
    """A 4xx answer that is not worth retrying (the request as sent is refused)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class _Retryable(Exception):
    """A failure worth another attempt; ``retry_after`` is the server's ask, in seconds."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OpenAIGenerator(Generator):
    """A model behind an OpenAI-compatible HTTP API (see the module docstring).

    Args:
        model: the server's model name.
        base_url: API root with its scheme, e.g. ``http://127.0.0.1:8000/v1`` (required).
        api_key_env: environment variable holding the API key (unset: no key is sent).
        mode: ``"chat"`` (``/chat/completions``) or ``"completions"`` (``/completions``).
        max_tokens: default number of new tokens.
        temperature: sampling temperature (0 = greedy).
        top_logprobs: alternatives requested per token (1 to 20).
        seed: passed to the server for reproducible sampling where it supports one.
        timeout: seconds per request (default 30).
        max_retries: retries of 408/409/429/5xx and transport failures (default 2).
        backoff: first retry delay in seconds.
        concurrency: parallel requests in :meth:`generate_batch`.
        context_tokens: the model's context window (None: unknown), which a
            :class:`~ragprivacy.generate.PromptBudget` checks prompts against.
        client: an ``httpx.Client`` to use (tests, proxies); ``transport`` builds one.
        sleep: the delay function (tests pass a no-op).
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        mode: str = "chat",
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_logprobs: int = 20,
        logprobs: bool | None = None,
        seed: int | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        concurrency: int = 1,
        context_tokens: int | None = None,
        client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not model or not isinstance(model, str):
            raise ConfigError(f"The 'model' parameter must be a non-empty string; got {model!r}.")
        self.model = model
        self.base_url = _check_endpoint(base_url)
        if not _is_loopback(self.base_url):  # private documents leave this machine
            _LOG.warning(
                "generator openai:%s sends prompts, retrieved documents included, to %s "
                "(not this machine)",
                model,
                self.base_url,
            )
        self.api_key_env = api_key_env
        self.mode = check_choice("mode", mode, ("chat", "completions"))
        self.max_tokens = check_positive_int("max_tokens", max_tokens)
        self.temperature = check_positive("temperature", temperature, allow_zero=True)
        self.top_logprobs = check_positive_int("top_logprobs", top_logprobs)
        if self.top_logprobs > 20:
            raise ConfigError(
                f"The 'top_logprobs' parameter must be in [1, 20]; got {top_logprobs}."
            )
        if logprobs is not None and not isinstance(logprobs, bool):
            raise ConfigError(
                f"The 'logprobs' parameter must be true, false or unset; got {logprobs!r}."
            )
        self.logprobs = logprobs
        self._probed: bool | None = logprobs
        self._probe_lock = threading.Lock()
        self.seed = seed
        self.timeout = check_positive("timeout", timeout)
        self.max_retries = check_positive_int("max_retries", max_retries, allow_zero=True)
        self.backoff = check_positive("backoff", backoff, allow_zero=True)
        self.concurrency = check_positive_int("concurrency", concurrency)
        self.context_tokens = (
            None if context_tokens is None else check_positive_int("context_tokens", context_tokens)
        )
        self._key = os.environ.get(api_key_env) or None
        self._client = client or httpx.Client(timeout=self.timeout, transport=transport)
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"OpenAIGenerator(model={self.model!r}, base_url={self.base_url!r})"

    def config(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "base_url": self.base_url,
            "mode": self.mode,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_logprobs": self.top_logprobs,
            "logprobs": self.logprobs,
            "seed": self.seed,
            "api_key_env": self.api_key_env,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "backoff": self.backoff,
            "context_tokens": self.context_tokens,
            "retry_policy": self.retry_policy(),
        }

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()

    # ----------------------------------------------------------------- HTTP

    def _scrub(self, text: str) -> str:
        if self._key:
            text = text.replace(self._key, "***")
        return text

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    def _post(self, endpoint: str, payload: dict[str, Any], *, note: bool = True) -> dict[str, Any]:
        """POST once, retrying 408/409/429/5xx answers and transport errors with
        tenacity (exponential backoff, the server's ``Retry-After`` when shorter).
        ``note``: the request may carry the prompt (``ragprivacy.generate.sent``)."""
        url = f"{self.base_url}/{endpoint}"

        def send() -> dict[str, Any]:
            headers = self._headers()
            resp = self._client.post(url, json=payload, headers=headers, timeout=self.timeout)
            return self._answer(url, resp)

        return self._attempts(url, send, note=note)

    def _open(self, endpoint: str, payload: dict[str, Any]) -> httpx.Response:
        """POST ``payload`` for a streamed answer, retried as :meth:`_post` until the
        server accepts it: the open response, whose body the caller reads and closes."""
        url = f"{self.base_url}/{endpoint}"

        def send() -> httpx.Response:
            request = self._client.build_request(
                "POST", url, json=payload, headers=self._headers(), timeout=self.timeout
            )
            resp = self._client.send(request, stream=True)
            if resp.status_code >= 300:
                try:
                    resp.read()
                finally:
                    resp.close()
                self._answer(url, resp)  # raises: the refusal, or a retry
            return resp

        return self._attempts(url, send, note=True)

    def _attempts(self, url: str, send: Callable[[], _T], *, note: bool) -> _T:
        reached = False  # whether any attempt may have sent the prompt

        def attempt() -> _T:
            nonlocal reached
            try:
                out = send()
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # no connection was made: no byte of the prompt left this process
                raise _Retryable(f"{type(exc).__name__}: {self._scrub(str(exc))}") from None
            except httpx.HTTPError as exc:
                reached = True
                if note:
                    note_prompt_used()
                raise _Retryable(f"{type(exc).__name__}: {self._scrub(str(exc))}") from None
            except BaseException:
                reached = True  # the server answered, with a refusal or a retryable status
                if note:
                    note_prompt_used()
                raise
            reached = True
            if note:
                note_prompt_used()
            return out

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=tenacity.retry_if_exception_type(_Retryable),
            sleep=self._sleep,
            before_sleep=lambda state: _LOG.warning(
                "POST %s failed (%s), attempt %d of %d",
                url,
                state.outcome.exception() if state.outcome else "?",
                state.attempt_number,
                self.max_retries + 1,
            ),
            reraise=True,
        )
        try:
            return retrying(attempt)
        except _Retryable as exc:
            # Only a failure that never reached the server says nothing about the prompt
            # (ragprivacy.errors.GeneratorUnavailableError); any other may depend on it.
            error = BackendError if reached else GeneratorUnavailableError
            raise error(
                f"The server at {url} failed {self.max_retries + 1} time(s) "
                f"({self.retry_policy()}); last: {exc}. Check that it is running and "
                "reachable, or raise max_retries/timeout."
            ) from None

    def _answer(self, url: str, resp: httpx.Response) -> dict[str, Any]:
        """The JSON object of a successful answer; a retryable failure raises
        :class:`_Retryable`, any other a :class:`BackendError`."""
        status = resp.status_code
        if status < 300:
            try:
                data = resp.json()
            except ValueError as exc:
                raise BackendError(
                    f"The server at {url} answered HTTP {status} with a body that is not "
                    "JSON; check that base_url points to an OpenAI-compatible API root."
                ) from exc
            if not isinstance(data, dict):
                raise BackendError(
                    f"The server at {url} answered with JSON that is not an object; check base_url."
                )
            return data
        detail = self._scrub(resp.text[:300])
        if status in (401, 403):
            raise BackendError(
                f"The server at {url} refused the credentials (HTTP {status}): {detail} "
                f"Set the environment variable {self.api_key_env} to a valid API key."
            )
        if status not in _RETRY_STATUS and status < 500:
            raise _Refused(f"The server at {url} answered HTTP {status}: {detail}", status)
        if status == 429 and _error_code(resp) in _EXHAUSTED:
            # a spent quota or budget does not come back within a call: retrying it only
            # waits (a ragprivacy service's budget renews with its next window)
            raise _Refused(
                f"The server at {url} answered HTTP 429 ({_error_code(resp)}): {detail} "
                "Retrying cannot help until the quota or budget is renewed.",
                status,
            )
        retry_after = None
        with contextlib.suppress(ValueError, TypeError):
            retry_after = float(resp.headers.get("retry-after"))
        raise _Retryable(f"HTTP {status}: {detail}", retry_after)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        """``backoff · 2**(attempt-1)`` seconds, at most 30, or the server's
        ``Retry-After`` when it asks for less."""
        delay = min(self.backoff * 2 ** (state.attempt_number - 1), _MAX_SLEEP)
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            delay = min(max(exc.retry_after, 0.0), _MAX_SLEEP)
        return delay

    def retry_policy(self) -> str:
        """The timeout and retry policy in words, with the longest a call can take."""
        waits = sum(min(self.backoff * 2**i, _MAX_SLEEP) for i in range(self.max_retries))
        worst = (self.max_retries + 1) * self.timeout + waits
        return (
            f"timeout {self.timeout:g} s per request, {self.max_retries} retries with "
            f"backoff from {self.backoff:g} s; at most ~{worst:.0f} s per call"
        )

    # ----------------------------------------------------------------- payloads

    def _messages(self, prompt: Prompt) -> list[dict[str, str]]:
        if prompt.instruction and prompt.instruction.strip():
            return [
                {"role": "system", "content": prompt.instruction},
                {"role": "user", "content": replace(prompt, instruction=None).render()},
            ]
        return [{"role": "user", "content": prompt.render()}]

    def _base_payload(self, max_tokens: int, prompt: Prompt | None = None) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": self.temperature,
        }
        if self.seed is not None:
            payload["seed"] = self.seed
        key = prompt.options.get("cache_key") if prompt is not None else None
        if key:
            # A prompt or KV cache shared across accounts is a timing channel (one
            # account's cached prefix answers another's faster): name the account's
            # opaque cache key as the OpenAI 'user' and as vLLM's prefix-cache salt.
            payload["user"] = str(key)
            payload["cache_salt"] = str(key)
        return payload

    @staticmethod
    def _choice(data: dict[str, Any], url: str) -> dict[str, Any]:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise BackendError(
                f"The answer of {url} has no 'choices'; got keys {sorted(data)}. Is it an "
                "OpenAI-compatible server?"
            )
        return choices[0]

    @staticmethod
    def _usage(data: dict[str, Any]) -> dict[str, int] | None:
        """The answer's ``usage`` token counts (``None`` when absent or malformed)."""
        usage = data.get("usage")
        if not isinstance(usage, dict):
            return None
        out: dict[str, int] = {}
        for key in ("prompt_tokens", "completion_tokens"):
            value = usage.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                return None
            out[key] = value
        return out

    @staticmethod
    def _stated_privacy(data: dict[str, Any]) -> dict[str, Any] | None:
        """What a ragprivacy service says the answer spent (its ``ragprivacy.privacy``
        extension: finite non-negative ε, δ and cumulative ε, the mechanism's name);
        ``None`` from any other endpoint, or when nothing in it is well-formed."""
        block = data.get("ragprivacy")
        privacy = block.get("privacy") if isinstance(block, dict) else None
        if not isinstance(privacy, dict):
            return None
        out: dict[str, Any] = {}
        for key in ("epsilon", "delta", "cumulative_epsilon"):
            value = privacy.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(value) and value >= 0:
                out[key] = float(value)
        if isinstance(privacy.get("mechanism"), str):
            out["mechanism"] = privacy["mechanism"][:64]
        return out or None

    def _chat(self, prompt: Prompt, max_tokens: int, top: int) -> dict[str, Any]:
        return self._choice(self._chat_data(prompt, max_tokens, top), "chat/completions")

    def _chat_data(self, prompt: Prompt, max_tokens: int, top: int | None) -> dict[str, Any]:
        """``top``: the alternatives asked per token; ``None`` asks for log-probabilities
        only where the endpoint gives them (:attr:`exposes_logprobs`), and no
        alternatives."""
        payload = self._base_payload(max_tokens, prompt)
        payload["messages"] = self._messages(prompt)
        if top is not None:
            payload.update(logprobs=True, top_logprobs=top)
            return self._post("chat/completions", payload)
        return self._asking_logprobs("chat/completions", payload, {"logprobs": True})

    def _asking_logprobs(
        self, endpoint: str, payload: dict[str, Any], ask: dict[str, Any]
    ) -> dict[str, Any]:
        """POST ``payload`` with ``ask`` (the log-probability fields) where the endpoint
        gives them. Before that is known, the first answer tells. A 400/422 refusal is
        asked again once without them, and only if that succeeds are they never asked
        again: a refusal for another reason (a prompt over the context, say, which
        depends on the documents in it) must not change what later answers carry. An
        answer whose choice holds no ``logprobs`` object means the endpoint has none (an
        empty answer with an empty one does not)."""
        if self._probed is False:
            return self._post(endpoint, payload)
        if self._probed is True:
            return self._post(endpoint, {**payload, **ask})
        try:
            data = self._post(endpoint, {**payload, **ask})
        except _Refused as exc:
            if exc.status not in (400, 422):
                raise
            data = self._post(endpoint, payload)  # refused again: raised, nothing learnt
            self._probed = False
            return data
        self._probed = self._has_logprobs(data)
        return data

    @staticmethod
    def _has_logprobs(data: dict[str, Any]) -> bool:
        """Whether the answer's choice carries a ``logprobs`` object (OpenAI sends null
        where they were not given), whatever the length of the answer."""
        choices = data.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else {}
        return isinstance(choice, dict) and isinstance(choice.get("logprobs"), dict)

    @property
    def exposes_logprobs(self) -> bool:
        """Whether the endpoint gives log-probabilities: the ``logprobs`` setting, or
        (unset) the answer to one probe, made once per generator."""
        if self._probed is None:
            with self._probe_lock:
                if self._probed is None:
                    self._probed = self._probe_logprobs()
        return self._probed

    def _probe_logprobs(self) -> bool:
        """One one-token request of a fixed public prompt (no private data) asking for
        log-probabilities: yes when they come back, no when the request is refused
        (400/422) or answered without them; any other failure is raised."""
        payload = self._base_payload(1)
        if self.mode == "completions":
            endpoint = "completions"
            payload.update(prompt="Reply with one word.", logprobs=1)
        else:
            endpoint = "chat/completions"
            payload.update(
                messages=[{"role": "user", "content": "Reply with one word."}], logprobs=True
            )
        try:
            data = self._post(endpoint, payload, note=False)  # carries no prompt of ours
        except _Refused as exc:
            if exc.status in (400, 422):
                return False
            raise
        choices = data.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else {}
        lp = (first.get("logprobs") if isinstance(first, dict) else None) or {}
        got = lp.get("token_logprobs") if endpoint == "completions" else lp.get("content")
        return bool(got)  # the probe asks for one token: an answer without it says no

    def _completions(
        self,
        text: str,
        max_tokens: int,
        logprobs: int,
        prompt: Prompt | None = None,
        **extra: Any,
    ) -> Any:
        return self._choice(
            self._completions_data(text, max_tokens, logprobs, prompt, **extra), "completions"
        )

    def _completions_data(
        self,
        text: str,
        max_tokens: int,
        logprobs: int | None,
        prompt: Prompt | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        payload = self._base_payload(max_tokens, prompt)
        payload.update(prompt=text, **extra)
        if logprobs is not None:
            payload["logprobs"] = logprobs
        return self._post("completions", payload)

    # ----------------------------------------------------------------- Generator API

    def _limit(self, prompt: Prompt, max_tokens: int | None) -> int:
        value = max_tokens if max_tokens is not None else prompt.options.get("max_tokens")
        return self.max_tokens if value is None else check_positive_int("max_tokens", value)

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        limit = self._limit(prompt, max_tokens)
        if self.mode == "completions":
            payload = self._base_payload(limit, prompt)
            payload["prompt"] = prompt.render()
            data = self._asking_logprobs("completions", payload, {"logprobs": 1})
            choice = self._choice(data, "completions")
            text = str(choice.get("text") or "")
            lp = choice.get("logprobs") or {}
            tokens, logprobs = lp.get("tokens"), lp.get("token_logprobs")
        else:
            data = self._chat_data(prompt, limit, None)
            choice = self._choice(data, "chat/completions")
            message = choice.get("message") or {}
            text = str(message.get("content") or "")
            content = (choice.get("logprobs") or {}).get("content")
            tokens = [c.get("token", "") for c in content] if content else None
            logprobs = [c.get("logprob") for c in content] if content else None
        usage, stated = self._usage(data), self._stated_privacy(data)
        if tokens and logprobs and len(tokens) == len(logprobs) and None not in logprobs:
            return Completion(
                text,
                tuple(str(t) for t in tokens),
                tuple(float(x) for x in logprobs),
                usage=usage,
                stated_privacy=stated,
            )
        return Completion(text, tuple(tokenize(text)), None, usage=usage, stated_privacy=stated)

    def stream(self, prompt: Prompt, *, max_tokens: int | None = None) -> Iterator[Completion]:
        """The answer as the server streams it (``stream: true``; OpenAI's server-sent
        events), one piece per event that carries text. Log-probabilities are asked where
        the endpoint is known to give them (``logprobs=True``, or an earlier answer showed
        them): a stream sends no probe of its own, so it makes no request that could fail
        apart from the answer. The pieces' tokens are then the server's, and otherwise the
        piece's text in word tokens. Opening the stream
        is retried as :meth:`generate`'s request is, and a server never reached is a
        :class:`~ragprivacy.errors.GeneratorUnavailableError` at the first ``next``; a
        stream that breaks, carries an error event or ends without ``[DONE]`` is a
        :class:`~ragprivacy.errors.BackendError`. Closing the iterator closes the
        connection, which stops a server that notices (vLLM, llama.cpp)."""
        payload = self._base_payload(self._limit(prompt, max_tokens), prompt)
        chat = self.mode == "chat"
        if chat:
            endpoint = "chat/completions"
            payload["messages"] = self._messages(prompt)
        else:
            endpoint = "completions"
            payload["prompt"] = prompt.render()
        if self._probed is True:  # known to give them; a stream never probes (generate does)
            payload["logprobs"] = True if chat else 1
        payload["stream"] = True
        url = f"{self.base_url}/{endpoint}"
        resp = self._open(endpoint, payload)
        try:
            for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue  # comments, event names, keep-alives
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                piece = self._piece(url, data, chat)
                if piece is not None:
                    yield piece
        except httpx.HTTPError as exc:
            raise BackendError(
                f"The stream from {url} broke: {type(exc).__name__}: {self._scrub(str(exc))}"
            ) from None
        finally:
            resp.close()
        raise BackendError(f"The stream from {url} ended before its '[DONE]' event.")

    def _piece(self, url: str, data: str, chat: bool) -> Completion | None:
        """One streamed event's piece of the answer (``None``: it carries no text)."""
        try:
            event = json.loads(data)
        except ValueError:
            raise BackendError(f"The stream from {url} sent an event that is not JSON.") from None
        if not isinstance(event, dict):
            raise BackendError(f"The stream from {url} sent an event that is not an object.")
        if "error" in event:
            detail = self._scrub(str(event["error"])[:300])
            raise BackendError(f"The stream from {url} ended with an error: {detail}")
        choices = event.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            return None  # a usage-only or empty event
        if chat:
            text = str((choice.get("delta") or {}).get("content") or "")
            content = (choice.get("logprobs") or {}).get("content")
            tokens = [c.get("token", "") for c in content] if content else None
            logprobs = [c.get("logprob") for c in content] if content else None
        else:
            text = str(choice.get("text") or "")
            lp = choice.get("logprobs") or {}
            tokens, logprobs = lp.get("tokens"), lp.get("token_logprobs")
        if not text and not tokens:
            return None
        if tokens and logprobs and len(tokens) == len(logprobs) and None not in logprobs:
            return Completion(
                text, tuple(str(t) for t in tokens), tuple(float(x) for x in logprobs)
            )
        return Completion(text, tuple(tokenize(text)), None)

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        """Answer ``prompts`` with up to ``concurrency`` requests in flight."""
        if self.concurrency == 1 or len(prompts) < 2:
            return [self.generate(p, max_tokens=max_tokens) for p in prompts]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            # each call in the request's context: its prompts' use is noted for the request
            futures = [
                pool.submit(contextvars.copy_context().run, self.generate, p, max_tokens=max_tokens)
                for p in prompts
            ]
            return [f.result() for f in futures]

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        """The top-``top_logprobs`` next tokens, renormalised over that top-k."""
        extra = prefix if isinstance(prefix, str) else "".join(prefix)
        pairs: list[tuple[str, float]] = []
        if self.mode == "chat" and not extra:
            choice = self._chat(prompt, 1, self.top_logprobs)
            content = (choice.get("logprobs") or {}).get("content") or []
            if content:
                pairs = [
                    (str(t.get("token", "")), float(t["logprob"]))
                    for t in content[0].get("top_logprobs") or []
                    if t.get("logprob") is not None
                ]
        else:
            choice = self._completions(prompt.render() + extra, 1, self.top_logprobs, prompt)
            top = (choice.get("logprobs") or {}).get("top_logprobs") or []
            if top and isinstance(top[0], dict):
                pairs = [(str(t), float(v)) for t, v in top[0].items() if v is not None]
        if not pairs:
            raise BackendError(
                f"The server at {self.base_url} returned no top log-probabilities for "
                f"{self.model!r}; it must support 'logprobs'/'top_logprobs' for token-level "
                "attacks and token voting."
            )
        merged: dict[str, float] = {}
        for tok, lp in pairs:
            merged[tok] = merged.get(tok, 0.0) + math.exp(lp)
        total = sum(merged.values())
        return TokenDistribution(tuple(merged), tuple(v / total for v in merged.values()))

    def tokens_to_text(self, tokens: Sequence[str]) -> str:
        """The server's tokens are pieces of text: they join as they are."""
        return "".join(tokens)

    def score(self, prompt: Prompt, continuation: str | Sequence[str]) -> Completion:
        """Log-probabilities of ``continuation`` via ``/completions`` with ``echo``."""
        cont = continuation if isinstance(continuation, str) else "".join(continuation)
        head = prompt.render()
        full = head + cont
        try:
            choice = self._completions(full, 1, 1, echo=True)
        except BackendError as exc:
            raise BackendError(
                f"Scoring needs the legacy /completions endpoint with echo and logprobs, which "
                f"the server at {self.base_url} refused ({exc}). vLLM and llama.cpp support "
                "it; OpenAI's chat models do not."
            ) from exc
        lp = choice.get("logprobs") or {}
        tokens, values = lp.get("tokens"), lp.get("token_logprobs")
        if not tokens or values is None or len(tokens) != len(values):
            raise BackendError(
                f"The server at {self.base_url} did not echo prompt log-probabilities; "
                "scoring needs /completions with echo=true and logprobs (vLLM, llama.cpp)."
            )
        offsets = lp.get("text_offset")
        if not offsets or len(offsets) != len(tokens):
            offsets, pos = [], 0
            for t in tokens:
                offsets.append(pos)
                pos += len(str(t))
        out_t: list[str] = []
        out_v: list[float] = []
        for tok, value, off in zip(tokens, values, offsets):
            if len(head) <= int(off) < len(full) or (int(off) < len(head) < int(off) + len(tok)):
                if value is None:
                    continue
                out_t.append(str(tok))
                out_v.append(float(value))
        return Completion(cont, tuple(out_t), tuple(out_v))


def _create(spec: str = "", **kwargs: Any) -> OpenAIGenerator:
    """``MODEL@BASE_URL``: split at the first '@' followed by an http(s) URL, or else at
    the last '@'; the model must be non-empty and the URL complete (no fallback)."""
    spec = spec or ""
    m = re.search(r"@(?=https?://)", spec)
    at = m.start() if m else spec.rfind("@")
    model, url = (spec[:at], spec[at + 1 :]) if at >= 0 else (spec, kwargs.get("base_url"))
    if not model:
        raise ConfigError(f"The 'openai' generator needs a model name; give it as {_FORMS}.")
    if at >= 0 and "base_url" in kwargs:
        raise ConfigError("Give the endpoint once: in the spec (MODEL@URL) or as base_url.")
    kwargs["base_url"] = _check_endpoint(url)
    return OpenAIGenerator(model, **kwargs)


register_generator("openai", _create)


def _error_code(resp: httpx.Response) -> str | None:
    """The ``error.code`` of an OpenAI-style error body (``None`` without one)."""
    try:
        body = resp.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None

"""The official ``openai`` client, unchanged, against the running service's OpenAI-compatible
``POST /v1/chat/completions``: the answer, the receipt and privacy in the extra top-level
field ``ragprivacy``, and the refusals as the client's own exceptions."""

from __future__ import annotations

import hashlib
import secrets

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion

from ragprivacy.audit import QueryRecord, Receipt, verify_signature

RATE_LIMIT = 4


@pytest.fixture(scope="module")
def service(tenants_service_factory):  # type: ignore[no-untyped-def]
    return tenants_service_factory(rate_limit=RATE_LIMIT)


def client(service, key: str, **kw: object) -> openai.OpenAI:  # type: ignore[no-untyped-def]
    return openai.OpenAI(base_url=f"{service.url}/v1", api_key=key, **kw)  # type: ignore[arg-type]


def budget(service, account: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    r = httpx.get(f"{service.url}/v1/budget", headers=service.headers(account), timeout=60)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_the_official_client_gets_the_answer_and_the_receipt_in_the_extra_field(
    service,
) -> None:  # type: ignore[no-untyped-def]
    question = "Which patient has asthma?"
    nonce = secrets.token_hex(16)  # the noise's n, as the receipt-keeping client sends it
    with client(service, service.keys["bob"]) as c:
        resp = c.chat.completions.create(
            model="ragprivacy",
            messages=[
                {"role": "system", "content": "Answer from the records."},
                {"role": "user", "content": question},
            ],
            extra_body={"nonce": nonce},
        )
    assert isinstance(resp, ChatCompletion)
    assert resp.object == "chat.completion" and resp.model == "ragprivacy"
    assert resp.id.startswith("chatcmpl-") and resp.created > 0
    (choice,) = resp.choices
    assert choice.message.role == "assistant" and choice.finish_reason == "stop"
    answer = choice.message.content
    assert isinstance(answer, str) and answer.strip()
    assert choice.logprobs is None  # the service returns no log-probabilities
    assert resp.usage is not None and resp.usage.completion_tokens > 0
    # the prompt as the service bounds it (the query, every document at its budget)
    assert resp.usage.prompt_tokens > 3 * 1024  # K = 3 documents of --doc-tokens each
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    assert "FIRMCANARY" not in answer  # never the other tenant's documents

    extra = (resp.model_extra or {})["ragprivacy"]
    assert extra == resp.to_dict()["ragprivacy"]
    assert set(extra) == {"window_id", "receipt", "privacy", "budget"}  # no documents
    receipt = extra["receipt"]
    assert receipt["window_id"] == extra["window_id"] == "W1"
    assert receipt["holder"] == "bob" and receipt["nonce"] == nonce
    assert receipt["query_hash"] == hashlib.sha256(question.encode()).hexdigest()
    assert 0 <= receipt["position"] < receipt["tree_size"]
    commitments = httpx.get(f"{service.url}/v1/audit/windows/W1/commitments", timeout=60).json()
    signed = Receipt.from_dict(receipt)
    assert verify_signature(commitments["provider_key"], signed.message(), signed.signature)
    privacy = extra["privacy"]
    assert privacy["mechanism"] == "gaussian-noisy-topk" and privacy["scope"] == "retrieval"
    assert 0 < privacy["epsilon"] <= privacy["cumulative_epsilon"] <= 4.0
    assert privacy["delta"] == 1e-6
    assert extra["budget"] == {
        "rate_limit": RATE_LIMIT, "used": 1, "remaining": RATE_LIMIT - 1,
        "epsilon_acc": 4.0, "delta_acc": 1e-6,
    }  # fmt: skip
    assert budget(service, "bob")["used"] == 1
    # The receipt is in the public ledger at the position it names.
    records = httpx.get(
        f"{service.url}/v1/audit/windows/W1/records",
        params={"start": receipt["position"], "end": receipt["position"] + 1},
        timeout=60,
    ).json()
    assert len(records) == 1 and receipt["query_hash"] not in records[0]  # hidden
    record = QueryRecord.from_bytes(records[0].encode())
    assert record.opens_to(receipt["salt"], receipt["query_hash"], receipt["topk_hash"], nonce)


@pytest.mark.parametrize(
    "key",
    [
        "sk-not-a-ragprivacy-key",
        "rpk_000000000000_" + "A" * 43,  # well-formed, unknown
        "revoked",  # a revoked key of the same account
        "swapped",  # carol's key id with alice's secret
    ],
)
def test_a_bad_key_raises_authentication_error_and_spends_nothing(service, key) -> None:  # type: ignore[no-untyped-def]
    if key == "revoked":
        key = service.revoked["alice"]
    elif key == "swapped":
        key = "_".join([*service.keys["carol"].split("_")[:2], service.keys["alice"][-43:]])
    before = budget(service, "alice")["used"], budget(service, "carol")["used"]
    with (
        client(service, key) as c,
        pytest.raises(openai.AuthenticationError) as info,
    ):
        c.chat.completions.create(
            model="ragprivacy", messages=[{"role": "user", "content": "who has asthma?"}]
        )
    assert info.value.status_code == 401
    assert info.value.response.json()["detail"] == "Invalid API key."
    # the client shows the reason from OpenAI's error object (only "Error code: 401"
    # before; the newest clients show its message, the oldest allowed the whole body)
    assert "Invalid API key." in info.value.message
    assert info.value.response.headers["WWW-Authenticate"] == "Bearer"
    assert (budget(service, "alice")["used"], budget(service, "carol")["used"]) == before


def test_over_the_rate_limit_raises_rate_limit_error(service) -> None:  # type: ignore[no-untyped-def]
    messages = [{"role": "user", "content": "which patient has gout?"}]
    with client(service, service.keys["dave"]) as c:
        for n in range(1, RATE_LIMIT + 1):
            resp = c.chat.completions.create(model="ragprivacy", messages=messages)  # type: ignore[arg-type]
            assert (resp.model_extra or {})["ragprivacy"]["budget"]["used"] == n
        with pytest.raises(openai.RateLimitError) as info:
            c.chat.completions.create(model="ragprivacy", messages=messages)  # type: ignore[arg-type]
    assert info.value.status_code == 429
    assert info.value.response.headers["Retry-After"]
    detail = info.value.response.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail
    # The client's own retries of the 429 spent nothing: the budget is the 4 answers.
    assert budget(service, "dave") == {
        "rate_limit": RATE_LIMIT, "used": RATE_LIMIT, "remaining": 0,
        "epsilon_acc": 4.0, "delta_acc": 1e-6, "failures": {"charged": 0, "free": 0},
    }  # fmt: skip
    # Another account of the same tenant is not limited by dave's spending.
    with client(service, service.keys["carol"]) as c:
        resp = c.chat.completions.create(model="ragprivacy", messages=messages)  # type: ignore[arg-type]
    assert (resp.model_extra or {})["ragprivacy"]["receipt"]["holder"] == "carol"


def test_a_streamed_request_gets_the_answer_or_a_refusal_that_spends_nothing(service) -> None:  # type: ignore[no-untyped-def]
    """``stream=True`` (what many OpenAI clients send) must either stream the answer or be
    refused before anything is spent: an account must not pay for an answer its client
    cannot read."""
    before = budget(service, "alice")["used"]
    messages = [{"role": "user", "content": "which patient has migraine?"}]
    with client(service, service.keys["alice"]) as c:
        try:
            stream = c.chat.completions.create(
                model="ragprivacy",
                messages=messages,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = list(stream)
        except openai.BadRequestError:
            assert budget(service, "alice")["used"] == before  # refused: nothing spent
            return
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    last = chunks[-1]  # include_usage: a last chunk with no choice and the usage
    assert last.choices == [] and last.usage is not None and last.usage.prompt_tokens > 0
    assert all(ch.usage is None for ch in chunks[:-1])
    assert text.strip(), (
        f"the stream carried no answer ({len(chunks)} chunks), yet the account was charged "
        f"{budget(service, 'alice')['used'] - before} query"
    )


def test_models_content_parts_and_what_the_service_does_not_honour(service) -> None:  # type: ignore[no-untyped-def]
    """GET /v1/models names the one model; a user message given as text parts is one
    query; another model, or a parameter that would change what comes back (n, stop,
    tools, a JSON response format), is a 400 the client shows, and spends nothing."""
    with client(service, service.keys["bob"]) as c:
        assert [m.id for m in c.models.list().data] == ["ragprivacy"]
        parts = [
            {"type": "text", "text": "Which patient "},
            {"type": "text", "text": "has asthma?"},
        ]
        resp = c.chat.completions.create(
            model="ragprivacy",
            messages=[{"role": "user", "content": parts}],  # type: ignore[list-item]
        )
        extra = (resp.model_extra or {})["ragprivacy"]
        assert (
            extra["receipt"]["query_hash"]
            == hashlib.sha256(b"Which patient has asthma?").hexdigest()
        )
        used = budget(service, "bob")["used"]
        refused = [
            ({"model": "gpt-4o"}, "Unknown model 'gpt-4o'"),
            ({"n": 2}, "Not supported here: n"),
            ({"stop": ["\n"]}, "Not supported here: stop"),
            ({"response_format": {"type": "json_object"}}, "Not supported here: response_format"),
            ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ]
        for extra_args, message in refused:
            args = {"model": "ragprivacy", **extra_args}
            with pytest.raises(openai.BadRequestError) as info:
                c.chat.completions.create(
                    messages=[{"role": "user", "content": "who has asthma?"}],
                    **args,  # type: ignore[arg-type]
                )
            assert message in info.value.message and "\n" not in info.value.message
    assert budget(service, "bob")["used"] == used

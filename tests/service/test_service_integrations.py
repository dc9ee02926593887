"""The LangChain and LlamaIndex retrievers over a real running service (uvicorn on
127.0.0.1): documents with the service's ids and privacy, receipts kept for the audit,
and the account's exhausted budget surfaced through a chain and a query engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.language_models import FakeListChatModel
from langchain_core.prompts import ChatPromptTemplate
from llama_index.core import Settings
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine

from ragprivacy.errors import BudgetExhaustedError, ConfigError
from ragprivacy.integrations import langchain as lc
from ragprivacy.integrations import llama_index as li


@pytest.fixture(scope="module")
def service(tmp_path_factory, module_server_factory, corpus_file):  # type: ignore[no-untyped-def]
    from tests.service.conftest import run_admin

    root = tmp_path_factory.mktemp("integrations")
    state = root / "state"
    run_admin(state, "tenant", "create", "clinic", "--k", "2")
    run_admin(state, "docs", "add", "clinic", str(corpus_file(root / "c.jsonl", "rec", 40)))
    keys = {}
    for account in ("lc", "li"):
        run_admin(state, "account", "create", "clinic", account, "--eps", "4",
                  "--delta", "1e-6", "--rate-limit", "2")  # fmt: skip
        keys[account] = run_admin(state, "key", "create", account).split()[-1]
    run_admin(state, "window", "open")
    return module_server_factory(state), keys, root


def test_langchain_chain_over_the_service(service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server, keys, _ = service
    receipts = tmp_path / "receipts"
    retriever = lc.PrivateRetriever.from_service(server.url, keys["lc"], receipts_dir=receipts)
    docs = retriever.invoke("patient with asthma")
    assert len(docs) == 2
    for d in docs:
        assert d.metadata["ragprivacy_id"].startswith("rec-")
        assert d.metadata["privacy"]["window_id"]
        assert d.metadata["privacy"]["budget"] is not None
    prompt = ChatPromptTemplate.from_template("{context}\n{question}")
    chain = (
        {"context": retriever, "question": lambda q: q}
        | prompt
        | FakeListChatModel(responses=["ok", "never"])
    )
    assert chain.invoke("migraine").content == "ok"  # the account's second and last answer
    with pytest.raises(BudgetExhaustedError):
        chain.invoke("gout")
    # Two answers, two signed receipts kept for the audit; the refusal appended none.
    kept = [json.loads(line) for f in receipts.iterdir() for line in f.read_text().splitlines()]
    assert len(kept) == 2
    with pytest.raises(ConfigError, match="API key's account"):
        retriever.invoke("x", config={"metadata": {lc.ACCOUNT_KEY: "someone-else"}})
    retriever.close()


def test_llama_index_engine_over_the_service(service) -> None:  # type: ignore[no-untyped-def]
    server, keys, _ = service
    before = Settings._tokenizer
    Settings.tokenizer = str.split  # tiktoken would download its encoding
    try:
        retriever = li.PrivateRetriever.from_service(server.url, keys["li"], k=1)
        engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
        first = engine.query("fracture")
        assert [n.node.node_id[:4] for n in first.source_nodes] == ["rec-"]
        engine.query("eczema")
        with pytest.raises(BudgetExhaustedError):
            engine.query("anemia")
        retriever.close()
    finally:
        Settings._tokenizer = before

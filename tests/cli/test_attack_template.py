"""``attack --target http:TEMPLATE``: an endpoint that does not speak OpenAI's API (its own
request body, its own reply shape, an API key header read from the environment), attacked
through the real CLI: the members leak, attacks that need log-probabilities are skipped,
and the key appears nowhere in what the run writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ragprivacy.attacks import split_membership
from ragprivacy.corpus import Corpus, synthesize, write_jsonl
from ragprivacy.errors import ConfigError
from ragprivacy.generate import Prompt, Task, create_generator, load_template
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever

KEY = "sk-template-test-9f2c41"


class _AskServer:
    """``POST /ask {"question", "options"}`` → ``{"data": {"answers": [{"text"}]}}``: a RAG
    chatbot over ``members`` that refuses a request without its API key."""

    def __init__(self, members: Corpus) -> None:
        kb = KnowledgeBase.build(members, embedder="lsa")
        retriever, reader = TopKRetriever(kb, k=2), create_generator("reference")
        self.calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls += 1
                if self.headers.get("X-Api-Key") != KEY or self.path != "/ask":
                    status, reply = 401, {"error": "bad key"}
                else:
                    query = body["question"]
                    got = retriever.retrieve(query)
                    text = reader.generate(Prompt(Task.CHAT, query, kb.texts(got.indices))).text
                    status, reply = 200, {"data": {"answers": [{"text": text}]}}
                raw = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/ask"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("template")
    corpus = synthesize("medical", 120, seed=11)
    split = split_membership(corpus, targets=2, rng=4)
    write_jsonl(corpus, root / "candidates.jsonl")
    (root / "members.txt").write_text("\n".join(split.members.ids) + "\n")
    server = _AskServer(split.members)
    template = root / "ask.yaml"
    template.write_text(
        f"url: {server.url}\n"
        "headers:\n  X-Api-Key: ${TEST_RAG_KEY}\n"
        'body:\n  question: "{{query}}"\n  options: {lang: en}\n'
        "answer: data.answers.0.text\n"
    )
    yield server, root, template
    server.close()


def test_an_endpoint_of_its_own_shape_is_attacked_and_its_key_never_written(endpoint) -> None:  # type: ignore[no-untyped-def]
    server, root, template = endpoint
    args = [
        "--target", f"http:{template}",
        "--corpus", str(root / "candidates.jsonl"),
        "--members", str(root / "members.txt"),
        "--attack", "s2mia-s,min-k,dcmi",
        "--targets", "30", "--calibration", "10", "--workers", "1", "--no-progress",
        "--out", str(root / "out"),
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "ragprivacy", "attack", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TEST_RAG_KEY": KEY},
    )
    assert done.returncode == 0, done.stderr
    results = json.loads((root / "out" / "results.json").read_text())
    cells = {c["cell"]["attack"]: c["result"] for c in results["cells"]}
    scored = cells["s2mia-s"]
    assert scored["system"]["endpoint"]["url"] == server.url
    assert scored["system"]["endpoint"]["headers"] == ["X-Api-Key"]  # its name only
    assert scored["metrics"]["auc"] >= 0.85  # the members leak through this API too
    assert "no log-probabilities" in cells["min-k"]["skipped"]
    assert "no log-probabilities" in cells["dcmi"]["skipped"]  # it reads P(Yes)
    kept = (".json", ".md", ".jsonl", ".yaml")
    files = [p for p in (root / "out").rglob("*") if p.is_file() and p.suffix in kept]
    written = "".join(p.read_text(errors="replace") for p in files)
    assert KEY not in written and KEY not in done.stdout + done.stderr


def test_a_template_is_checked_when_loaded(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    t = tmp_path / "t.yaml"
    cases: list[tuple[str, str]] = [
        ("url: ftp://x\nbody: {q: '{{query}}'}\nanswer: a\n", "http:// or https://"),
        ("url: http://x\nbody: {q: fixed}\nanswer: a\n", "{{query}}"),
        ("url: http://x\nbody: {q: '{{query}}'}\n", "'answer'"),
        ("url: http://x\nbody: {q: '{{query}}'}\nanswer: a\nretries: 3\n", "unknown key"),
        ("url: http://x\nheaders: {K: '${NOPE_VAR}'}\nbody: {q: '{{query}}'}\nanswer: a\n",
         "${NOPE_VAR}"),
        ("[1, 2\n", "not a YAML or JSON template"),
    ]  # fmt: skip
    monkeypatch.delenv("NOPE_VAR", raising=False)
    for text, message in cases:
        t.write_text(text)
        with pytest.raises(ConfigError) as err:
            load_template(t)
        assert message in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"(?i)no such file"):
        load_template(tmp_path / "missing.yaml")


def test_the_reply_path_reads_lists_and_says_what_is_missing(endpoint) -> None:  # type: ignore[no-untyped-def]
    from ragprivacy.errors import BackendError
    from ragprivacy.generate import HTTPTemplateGenerator

    _, _, template = endpoint
    loaded: dict[str, Any] = {**load_template_with_key(template), "answer": "data.nope"}
    gen = HTTPTemplateGenerator(loaded)
    with pytest.raises(BackendError, match=r"'data\.nope'"):
        gen.generate(Prompt(Task.CHAT, "who has asthma?"))
    ok = HTTPTemplateGenerator(load_template_with_key(template))
    assert ok.generate(Prompt(Task.CHAT, "who has asthma?")).text
    assert not ok.exposes_logprobs


def load_template_with_key(template: Path) -> dict[str, Any]:
    os.environ["TEST_RAG_KEY"] = KEY
    try:
        return load_template(template)
    finally:
        del os.environ["TEST_RAG_KEY"]

"""Local OpenAI-compatible chat endpoints for tests: a RAG chatbot over a corpus we know,
and endpoints that answer whatever a test says (failures included)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ragprivacy.corpus import Corpus
from ragprivacy.generate import Prompt, Task, create_generator
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever

Reply = tuple[int, Any]  # (status, JSON object, raw bytes or Streamed events)


@dataclass
class Streamed:
    """A streamed answer: each event is sent (``data: JSON``) and flushed as the
    iterable yields it, then ``[DONE]`` unless ``done`` is false; the body ends when
    the connection closes (HTTP/1.0). ``broken``: set when the client hung up first."""

    events: Iterable[dict[str, Any]]
    done: bool = True
    broken: bool = False


def delta(text: str) -> dict[str, Any]:
    """A chat stream's event carrying ``text``."""
    return {"choices": [{"index": 0, "delta": {"content": text}}]}


class Endpoint:
    """An OpenAI-compatible ``/chat/completions`` on 127.0.0.1 answering with ``respond``;
    ``retry_after``: the ``Retry-After`` of its 429 and 5xx answers (a client's backoff
    then waits that long instead of its own delays)."""

    def __init__(
        self, respond: Callable[[dict[str, Any]], Reply], *, retry_after: str | None = None
    ) -> None:
        self.calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls += 1
                status, payload = respond(body)
                if isinstance(payload, Streamed):
                    self._stream(status, payload)
                    return
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    if retry_after is not None and (status == 429 or status >= 500):
                        self.send_header("Retry-After", retry_after)
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left (the slow endpoint)

            def _stream(self, status: int, streamed: Streamed) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for event in streamed.events:
                        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                        self.wfile.flush()
                    if streamed.done:
                        self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    streamed.broken = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def chat_reply(text: str) -> Reply:
    return 200, {"choices": [{"message": {"role": "assistant", "content": text}}]}


def rag_chatbot(members: Corpus) -> Callable[[dict[str, Any]], Reply]:
    """A RAG chatbot: the last user message retrieves the top 2 members, which the
    reference reader reads as a free-form chat turn."""
    kb = KnowledgeBase.build(members, embedder="lsa")
    retriever, reader = TopKRetriever(kb, k=2), create_generator("reference")

    def respond(body: dict[str, Any]) -> Reply:
        query = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        got = retriever.retrieve(query)
        prompt = Prompt(Task.CHAT, query, kb.texts(got.indices))
        return chat_reply(reader.generate(prompt, max_tokens=body.get("max_tokens")).text)

    return respond

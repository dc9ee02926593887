"""``ragprivacy attack --target``: membership attacks on a RAG endpoint we do not run,
through the real CLI against a local OpenAI-compatible RAG chatbot over a corpus we know."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests._chat_endpoint import Endpoint, rag_chatbot

from ragprivacy.attacks import split_membership
from ragprivacy.cli import main
from ragprivacy.corpus import synthesize, write_jsonl


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragprivacy", "attack", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def chatbot(tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("target")
    corpus = synthesize("medical", 120, seed=11)
    split = split_membership(corpus, targets=2, rng=4)
    write_jsonl(corpus, root / "candidates.jsonl")
    (root / "members.txt").write_text("\n".join(split.members.ids) + "\n")
    server = Endpoint(rag_chatbot(split.members))
    yield server, root
    server.close()


def test_attack_a_remote_endpoint_and_resume_from_the_cache(chatbot) -> None:  # type: ignore[no-untyped-def]
    server, root = chatbot
    args = [
        "--target", f"openai:chatbot@{server.url}",
        "--corpus", str(root / "candidates.jsonl"),
        "--members", str(root / "members.txt"),
        "--attack", "s2mia-s",
        "--targets", "30", "--calibration", "10", "--workers", "1", "--no-progress",
        "--out", str(root / "out"),
    ]  # fmt: skip
    done = _run(*args)
    assert done.returncode == 0, done.stderr
    results = json.loads((root / "out" / "results.json").read_text())
    (cell,) = results["cells"]
    result = cell["result"]
    assert result["system"]["name"] == "remote"
    assert result["system"]["endpoint"]["base_url"] == server.url
    assert result["metrics"]["auc"] >= 0.85
    assert result["metrics"]["retrieval_recall"] is None  # the endpoint shows no retrieval
    assert result["system"]["outcomes"]["answer"] == 40  # 30 evaluation + 10 calibration
    calls = server.calls
    assert calls >= 40  # evaluation and calibration targets were queried
    # A second run over the same directory is answered from the run's call cache.
    again = _run(*args)
    assert again.returncode == 0, again.stderr
    assert server.calls == calls


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--corpus", "medical"], "--target needs --corpus FILE"),
        (["--members", "/nonexistent/members.txt"], "no such file"),
        (["--defense", "paraphrasing"], "--defense must be 'none'"),
    ],
)
def test_bad_target_runs_get_one_line(  # type: ignore[no-untyped-def]
    chatbot, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    server, root = chatbot
    base = {
        "--target": f"openai:chatbot@{server.url}",
        "--corpus": str(root / "candidates.jsonl"),
        "--members": str(root / "members.txt"),
    }
    for flag, value in zip(extra[::2], extra[1::2]):
        base[flag] = value
    args = [x for kv in base.items() for x in kv] + ["--out", str(root / "bad")]
    assert main(["attack", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (root / "bad").exists()  # refused before anything was written

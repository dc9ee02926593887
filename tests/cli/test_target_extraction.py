"""``ragprivacy attack --target ... --extraction``: extraction attacks on a RAG endpoint we
do not run, through the real CLI against local OpenAI-compatible chatbots — one that copies
what it retrieves from a corpus we know, one that reports its token usage, one that fails
— with the endpoint's calls, tokens and cost in results.json and the report."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests._chat_endpoint import Endpoint, Reply, rag_chatbot

from ragprivacy.attacks import split_membership
from ragprivacy.cli import main
from ragprivacy.corpus import Corpus, synthesize, write_jsonl
from ragprivacy.types import Document


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragprivacy", "attack", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _results(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    return data


def _cells(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["cell"].get("mode", "membership"): c["result"] for c in results["cells"]}


@pytest.fixture(scope="module")
def known(tmp_path_factory):  # type: ignore[no-untyped-def]
    """Candidate documents on disk and the members a chatbot holds."""
    root = tmp_path_factory.mktemp("extraction")
    corpus = synthesize("medical", 120, seed=11)
    split = split_membership(corpus, targets=2, rng=4)
    write_jsonl(corpus, root / "candidates.jsonl")
    (root / "members.txt").write_text("\n".join(split.members.ids) + "\n")
    return root, split.members


def test_every_extraction_mode_against_a_copying_chatbot_and_rerun_from_cache(known) -> None:  # type: ignore[no-untyped-def]
    root, members = known
    server = Endpoint(rag_chatbot(members))
    out = root / "copying"
    args = [
        "--target", f"openai:chatbot@{server.url}",
        "--corpus", str(root / "candidates.jsonl"),
        "--extraction", "targeted,untargeted", "--extraction", "adversarial",
        "--targets", "12", "--attempts", "2", "--workers", "1", "--no-progress",
        "--price", "1.5,6", "--out", str(out),
    ]  # fmt: skip
    try:
        done = _run(*args)  # extraction only: no --members, no membership attack
        assert done.returncode == 0, done.stderr
        results = _results(out)
        cells = _cells(results)
        assert set(cells) == {"targeted", "untargeted", "adversarial"}
        assert all(r["system"]["name"] == "remote" for r in cells.values())
        # The chatbot copies what it retrieves: answers reproduce datastore documents.
        assert cells["untargeted"]["metrics"]["rate"] >= 0.8
        assert cells["adversarial"]["metrics"]["rate"] >= 0.8
        targeted = cells["targeted"]["metrics"]
        assert targeted["items"] == 12 and targeted["leaked"] >= 3
        for c in results["cells"]:  # each cell's calls, recorded beside its result
            got = c["result"]["metrics"]
            assert got["failed"] == 0
            assert got["outcomes"]["answer"] == c["calls"]["new"] + c["calls"]["cached"]
        calls = results["endpoint_calls"]["this_run"]
        assert calls["new"] == server.calls > 0  # every new call reached the endpoint
        assert calls["new"] + calls["cached"] == 12 * 2 + 12 + 12
        assert calls["tokens_estimated"] and calls["estimated"] == calls["new"]  # no usage
        expected = (calls["prompt_tokens"] * 1.5 + calls["completion_tokens"] * 6) / 1e6
        assert calls["cost_usd"] == pytest.approx(expected)
        report = (out / "report.md").read_text()
        assert "## Data extraction (candidates)" in report
        assert "Endpoint calls, this run" in report and "estimated cost $" in report
        assert "estimated from the text length" in report
        # A rerun into the same directory makes no call: finished cells are kept.
        before = server.calls
        again = _run(*args)
        assert again.returncode == 0, again.stderr
        assert server.calls == before
        rerun = _results(out)["endpoint_calls"]
        assert rerun["this_run"]["new"] == 0
        assert rerun["cells"]["new"] == calls["new"]  # what the kept cells cost
    finally:
        server.close()


def test_tokens_come_from_the_endpoints_usage(known) -> None:  # type: ignore[no-untyped-def]
    root, members = known
    chatbot = rag_chatbot(members)

    def with_usage(body: dict[str, Any]) -> Reply:
        status, payload = chatbot(body)
        payload["usage"] = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        return status, payload

    server = Endpoint(with_usage)
    out = root / "usage"
    try:
        done = _run(
            "--target", f"openai:chatbot@{server.url}",
            "--corpus", str(root / "candidates.jsonl"), "--members", str(root / "members.txt"),
            "--attack", "s2mia-s", "--extraction", "untargeted",
            "--targets", "10", "--calibration", "4", "--workers", "2", "--no-progress",
            "--price", "2,10", "--out", str(out),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        results = _results(out)
        assert set(_cells(results)) == {"membership", "untargeted"}
        calls = results["endpoint_calls"]["this_run"]
        assert calls["new"] == server.calls and calls["failed"] == 0
        assert not calls["tokens_estimated"]
        assert calls["prompt_tokens"] == 100 * calls["new"]
        assert calls["completion_tokens"] == 20 * calls["new"]
        assert calls["cost_usd"] == pytest.approx(calls["new"] * (100 * 2 + 20 * 10) / 1e6)
        assert results["endpoint_calls"]["cells"]["new"] == calls["new"]
    finally:
        server.close()


def test_a_failing_endpoint_is_reported_and_a_rerun_retries_only_the_failures(known) -> None:  # type: ignore[no-untyped-def]
    root, members = known
    chatbot = rag_chatbot(members)
    broken = {"on": True}

    def flaky(body: dict[str, Any]) -> Reply:
        query = body["messages"][-1]["content"]
        bucket = hashlib.sha256(query.encode()).digest()[0] % 4
        if broken["on"] and bucket == 0:
            return 500, {"error": "internal"}
        if broken["on"] and bucket == 1:
            return 200, b"{not json"
        return chatbot(body)

    server = Endpoint(flaky, retry_after="0")  # retried at once: the retries, not the waits
    out = root / "flaky"
    args = [
        "--target", f"openai:chatbot@{server.url}",
        "--corpus", str(root / "candidates.jsonl"),
        "--extraction", "untargeted", "--targets", "16", "--workers", "1", "--no-progress",
        "--out", str(out),
    ]  # fmt: skip
    try:
        done = _run(*args)
        assert done.returncode == 0, done.stderr
        results = _results(out)
        m = _cells(results)["untargeted"]["metrics"]
        assert m["prompts"] == 16
        assert m["failed"] > 0 and m["outcomes"]["error"] == m["failed"]
        assert m["outcomes"]["answer"] == 16 - m["failed"]  # the others were answered
        assert m["rate_answered"] >= 0.8  # the answered prompts leak as before
        assert results["endpoint_calls"]["this_run"]["failed"] == m["failed"]
        report = (out / "report.md").read_text()
        assert f"{m['failed']} failed" in report and "rate among answered" in report
        # The endpoint recovers: a rerun retries the failed calls only; the answers
        # already received come from the call cache.
        broken["on"] = False
        before = server.calls
        again = _run(*args)
        assert again.returncode == 0, again.stderr
        rerun = _results(out)
        calls = rerun["endpoint_calls"]["this_run"]
        assert calls["failed"] == 0 and calls["new"] + calls["cached"] == 16
        # one call per failed prompt (a prompt asked twice is answered once, then cached)
        assert 0 < calls["new"] == server.calls - before <= m["failed"]
        fixed = _cells(rerun)["untargeted"]["metrics"]
        assert fixed["failed"] == 0 and fixed["rate"] >= 0.8
    finally:
        server.close()


def test_a_corpus_without_pii_says_so_in_the_targeted_cell(tmp_path: Path) -> None:
    docs = [
        Document(f"d{i}", f"Note {i}: the garden grows tomatoes and basil in row {i}.")
        for i in range(30)
    ]
    write_jsonl(Corpus(docs), tmp_path / "plain.jsonl")
    server = Endpoint(rag_chatbot(Corpus(docs[:20])))
    try:
        done = _run(
            "--target", f"openai:chatbot@{server.url}", "--corpus", str(tmp_path / "plain.jsonl"),
            "--extraction", "targeted", "--targets", "5", "--workers", "1", "--no-progress",
            "--out", str(tmp_path / "out"),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        m = _cells(_results(tmp_path / "out"))["targeted"]["metrics"]
        assert m["items"] == 0 and m["rate"] is None
        assert "no email/url/phone PII" in m["note"] and "regex" in m["note"]
        assert server.calls == 0  # nothing to ask for, nothing sent
        assert (
            "targeted extraction had nothing to ask for"
            in (tmp_path / "out" / "report.md").read_text()
        )
    finally:
        server.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--attack", "none"], "runs nothing"),
        (["--extraction", "verbatim"], "Unknown extraction mode 'verbatim'"),
        (["--extraction", "untargeted", "--price", "cheap"], "PROMPT_USD,COMPLETION_USD"),
        (["--attack", "none,mba", "--extraction", "untargeted"], "--attack none"),
    ],
)
def test_bad_extraction_options_get_one_line(
    tmp_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["attack", "--corpus", "medical", *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()

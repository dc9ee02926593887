"""``ragprivacy scorecard`` end to end: the command runs every attack against the
undefended system and each defense, writes a self-contained ``index.html``, and the page
is checked in real headless Chromium (Debian's ``chromium`` and ``chromedriver``, which
``make test`` installs): it loads with no console error and no request for anything
outside the file, every figure renders, every table has headers, and a full-page
screenshot is kept in ``test-artifacts/`` (``RAGPRIVACY_TEST_ARTIFACTS`` moves it)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragprivacy.cli import main

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(os.environ.get("RAGPRIVACY_TEST_ARTIFACTS", "test-artifacts"))


@pytest.fixture(scope="module")
def scorecard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scorecard")
    argv = [
        "scorecard",
        "--out",
        str(out),
        "--n",
        "200",
        "--targets",
        "20",
        "--items",
        "15",
        "--epsilon",
        "10",
        "--attack",
        "mba,rag-mia",
        "--workers",
        "1",  # a pool of its own would only add process starts beside the suite's workers
        "--no-progress",
    ]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(argv) == 0
    (out / "printed.txt").write_text(printed.getvalue())
    return out / "index.html"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    assert not missing, f"{', '.join(missing)} missing: run `make browser` (Debian packages)"
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        # a page that asked for anything off the disk would fail to load it, loudly
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
        "--window-size=1280,1000",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=str(CHROMEDRIVER), log_output=subprocess.DEVNULL)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def test_the_page_is_self_contained(scorecard: Path) -> None:
    text = scorecard.read_text(encoding="utf-8")
    # nothing is fetched at view time: no script, stylesheet, image or font by URL
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", text)
    assert "<script" not in text and "@import" not in text
    assert not re.search(r"url\((?!#)", text)  # only references within the page


def test_the_page_renders_in_chromium(scorecard: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(scorecard.resolve().as_uri())
    assert browser.title.startswith("Privacy scorecard")
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe
    requested = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert requested == []

    # the verdict comes first, and says something
    first = browser.find_element(By.CSS_SELECTOR, "section")
    assert first.get_attribute("id") == "verdict"
    assert len(first.text.split()) > 30

    figures = browser.find_elements(By.CSS_SELECTOR, "figure")
    assert {f.get_attribute("id") for f in figures} == {"frontier", "roc"}
    for fig in figures:
        svg = fig.find_element(By.TAG_NAME, "svg")
        box = browser.execute_script(
            "const r = arguments[0].getBoundingClientRect(); return [r.width, r.height];", svg
        )
        assert box[0] > 200 and box[1] > 150, (fig.get_attribute("id"), box)
        drawn = browser.execute_script(
            "return arguments[0].querySelectorAll('path, line, use').length", svg
        )
        assert drawn > 20  # axes, ticks, curves or points, not an empty frame
        assert "AUC" in svg.text or "positive rate" in svg.text

    tables = browser.find_elements(By.TAG_NAME, "table")
    assert {t.get_attribute("id") for t in tables} >= {"matrix", "examples"}
    for table in tables:
        heads = table.find_elements(By.CSS_SELECTOR, "thead th")
        assert heads and all(h.text.strip() for h in heads), table.get_attribute("id")
        for row in table.find_elements(By.CSS_SELECTOR, "tbody tr"):
            cells = row.find_elements(By.CSS_SELECTOR, "th, td")
            assert len(cells) == len(heads), table.get_attribute("id")

    # the matrix: the undefended row and every defense, each AUC with its interval
    matrix = browser.find_element(By.ID, "matrix")
    labels = [th.text for th in matrix.find_elements(By.CSS_SELECTOR, "tbody th")]
    assert labels[0] == "rag"
    assert {"rag + prompt-modifying", "PII redaction", "noisy top-K ε=10", "MURAG ε=10"} <= set(
        labels
    )
    assert re.search(r"\d\.\d\d \(\d\.\d\d–\d\.\d\d\)", matrix.text)

    # the whole matrix is on screen at common widths: no column scrolled off
    for width in (1400, 2000):
        browser.set_window_size(width, 1000)
        shown, needed = browser.execute_script(
            "const t = document.getElementById('matrix');"
            "return [t.parentElement.clientWidth, t.scrollWidth];"
        )
        assert needed <= shown, (width, needed, shown)
    browser.set_window_size(1280, 1000)
    verdict = browser.find_element(By.CSS_SELECTOR, "p.verdict")
    assert "`" not in verdict.text and verdict.find_elements(By.TAG_NAME, "code")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, int(height) + 100)
    shot = ARTIFACTS / "scorecard.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 50_000
    shutil.copy(scorecard, ARTIFACTS / "scorecard.html")


def test_the_terminal_gets_the_verdict_too(scorecard: Path) -> None:
    printed = (scorecard.parent / "printed.txt").read_text()
    assert printed.startswith("Verdict: Undefended RAG over ")
    assert "`" not in printed and "scorecard: " in printed


def test_the_redaction_row_is_recorded_as_redacted(scorecard: Path) -> None:
    """Results say how each system was built: the PII-redaction row's cells carry the
    detector, so the page classifies the row from the record, not from its label."""
    import json

    from ragprivacy.eval import summarize

    results = json.loads((scorecard.parent / "results.json").read_text())
    redacted = [c for c in results["cells"] if c["cell"]["system"] == "PII redaction"]
    assert redacted and all(c["result"]["system"]["redact_pii"] == "regex" for c in redacted)
    plain = [c for c in results["cells"] if c["cell"]["system"] == "rag"]
    assert plain and not any("redact_pii" in c["result"]["system"] for c in plain)
    kinds = {r.label: r.kind for r in summarize(results).rows}
    assert kinds["PII redaction"] == "redaction" and kinds["rag"] == "none"


def test_examples_show_no_pii_value(scorecard: Path) -> None:
    """Every annotated PII value of the attacked corpus is masked in the page's examples."""
    import json

    from ragprivacy.eval import RunContext, parse_config

    results = json.loads((scorecard.parent / "results.json").read_text())
    docs = RunContext(parse_config(results["settings"])).corpus("medical")
    section = scorecard.read_text(encoding="utf-8").split("id=examples", 1)[1]
    section = section.split("</table>", 1)[0]
    assert "[NAME]" in section or "[DATE]" in section or "[PHONE]" in section
    values = {s.value for d in docs for s in d.pii if len(s.value) > 4}
    shown = [v for v in values if re.search(rf"(?<!\w){re.escape(v)}(?!\w)", section)]
    assert not shown, shown[:5]


def test_a_scorecard_of_an_endpoint_we_do_not_run(tmp_path: Path) -> None:
    """``--target``: one row, the endpoint as deployed, scored by membership and
    extraction attacks through its HTTP API (a local chatbot that copies what it
    retrieves from members of a corpus we know), with what it returned counted."""
    from tests._chat_endpoint import Endpoint, rag_chatbot

    from ragprivacy.attacks import split_membership
    from ragprivacy.corpus import synthesize, write_jsonl

    corpus = synthesize("medical", 160, seed=11)
    split = split_membership(corpus, targets=2, rng=4)
    write_jsonl(corpus, tmp_path / "candidates.jsonl")
    (tmp_path / "members.txt").write_text("\n".join(split.members.ids) + "\n")
    server = Endpoint(rag_chatbot(split.members))
    out = tmp_path / "card"
    argv = [
        "scorecard", "--target", f"openai:chatbot@{server.url}",
        "--corpus", str(tmp_path / "candidates.jsonl"), "--members", str(tmp_path / "members.txt"),
        "--attack", "s2mia-s", "--targets", "20", "--items", "10", "--workers", "1",
        "--price", "1.5,6", "--no-progress", "--out", str(out),
    ]  # fmt: skip
    try:
        assert main(argv) == 0
    finally:
        server.close()
    page = (out / "index.html").read_text(encoding="utf-8")
    assert page.count("<th scope=row>endpoint as deployed</th>") == 2  # matrix, outcomes
    assert "What the endpoint returned" in page and "Endpoint calls: " in page
    assert re.search(r"about \$\d+\.\d\d", page)  # the price given, applied
    assert "The endpoint as deployed over <code>candidates</code> leaks" in page
    # no defense of ours can wrap it: no other row
    assert "noisy top-K" not in page and "PII redaction</th>" not in page

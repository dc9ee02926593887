"""The operator's status page through a running server, checked in real headless
Chromium (Debian's ``chromium`` and ``chromedriver``): only the operator key opens it, it
loads with no console error and nothing fetched, shows the window with its live check,
every account's use, the tenants and the refusals, and a screenshot is kept in
``test-artifacts/``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(os.environ.get("RAGPRIVACY_TEST_ARTIFACTS", "test-artifacts"))


@pytest.fixture(scope="module")
def service(tmp_path_factory, admin, corpus_file, module_server_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("operator")
    state = root / "state"
    admin(state, "tenant", "create", "clinic", "--k", "2")
    admin(state, "docs", "add", "clinic", str(corpus_file(root / "c.jsonl", "clinic", 10)))
    keys = {}
    for account in ("alice", "bob"):
        admin(state, "account", "create", "clinic", account, "--eps", "4", "--delta", "1e-6",
              "--rate-limit", "3")  # fmt: skip
        keys[account] = admin(state, "key", "create", account).split()[-1]
    operator = admin(state, "operator-key").split()[-1]
    admin(state, "window", "open")
    server = module_server_factory(state, extra=("--metrics",))
    for query in ("asthma", "gout", "fracture", "one too many"):
        httpx.post(f"{server.url}/v1/retrieve", json={"query": query},
                   headers={"Authorization": f"Bearer {keys['alice']}"}, timeout=60)  # fmt: skip
    return {"url": server.url, "operator": operator, "keys": keys}


def test_only_the_operator_key_opens_the_page(service) -> None:  # type: ignore[no-untyped-def]
    url = f"{service['url']}/operator"
    assert httpx.get(url).status_code == 401
    account = {"Authorization": f"Bearer {service['keys']['alice']}"}
    assert httpx.get(url, headers=account).status_code == 401  # an account's key: no
    wrong = {"Authorization": "Bearer rpo_" + "x" * 43}
    assert httpx.get(url, headers=wrong).status_code == 401
    ok = httpx.get(url, headers={"Authorization": f"Bearer {service['operator']}"})
    assert ok.status_code == 200 and ok.headers["content-type"].startswith("text/html")
    assert service["operator"] not in ok.text


def test_the_page_renders_in_chromium(service) -> None:  # type: ignore[no-untyped-def]
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    assert not missing, f"{', '.join(missing)} missing: run `make browser` (Debian packages)"
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000",
                "--disable-background-networking", "--no-first-run"):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver: Any = webdriver.Chrome(
        options=options,
        service=Service(executable_path=str(CHROMEDRIVER), log_output=subprocess.DEVNULL),
    )
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders",
            {"headers": {"Authorization": f"Bearer {service['operator']}"}},
        )
        driver.get(f"{service['url']}/operator")
        assert driver.title == "ragprivacy operator status"
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not severe, severe
        fetched = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        assert fetched == []  # self-contained: nothing but the page itself
        sections = [s.get_attribute("id") for s in driver.find_elements(By.TAG_NAME, "section")]
        assert sections == ["window", "accounts", "tenants", "refusals"]
        window = driver.find_element(By.ID, "window")
        assert "LIVE OK" in window.text and "3 records" in window.text
        bars = driver.execute_script(
            "return [...document.querySelectorAll('#records rect')]"
            ".filter(r => r.getBBox().height > 0).length"
        )
        assert bars >= 1  # the three records drawn over time
        use = {
            row.find_element(By.TAG_NAME, "th").text: row.text
            for row in driver.find_elements(By.CSS_SELECTOR, "#account-use tbody tr")
        }
        assert "3 of 3" in use["alice"] and "0 of 3" in use["bob"]
        refusals = driver.find_element(By.ID, "refusal-list").text
        assert "budget_exhausted 1" in refusals  # alice's fourth query
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(ARTIFACTS / "operator.png"))
    finally:
        driver.quit()

"""The service section of `make demo`: a loopback server, two accounts, an outside PASS."""

from __future__ import annotations

import pytest

from ragprivacy.service import run_service_demo


def test_the_demo_section_serves_two_accounts_and_verifies(tmp_path) -> None:
    summary = run_service_demo(tmp_path, queries=3)
    assert summary["verdict"] == "PASS" and summary["epsilon_audit"] == pytest.approx(8.0)
    assert summary["records"] == summary["receipts"] == 6
    assert summary["url"].startswith("http://127.0.0.1:")
    page = (tmp_path / "service" / "service.md").read_text()
    assert "PASS, ε_audit = 8" in page and "| alice | 3 / 20 |" in page

"""The server caches the open window: a request looks up only the open window's id, and
loads (and parses) the window's row again only when that id changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragprivacy.errors import WindowClosedError
from ragprivacy.service import ServiceState
from ragprivacy.service.provider import ServiceProvider, close_window, open_window


def test_requests_reuse_the_open_window_and_see_a_new_one(tmp_path: Path, admin) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "text": f"record {i}: asthma"}) + "\n" for i in range(20)
        )
    )
    admin(state, "tenant", "create", "t", "--k", "2")
    admin(state, "docs", "add", "t", str(corpus))
    admin(state, "account", "create", "t", "a", "--eps", "4", "--delta", "1e-6",
          "--rate-limit", "100")  # fmt: skip
    st = ServiceState(state, create=False)
    for _ in range(5):  # closed windows, which a request must not read
        open_window(st)
        close_window(st)
    open_window(st)
    provider = ServiceProvider(st)
    assert provider.retrieve("a", "asthma").window_id == "W6"
    loads: list[str] = []
    window, windows = st.window, st.windows

    def counted_window(window_id: str):  # type: ignore[no-untyped-def]
        loads.append(window_id)
        return window(window_id)

    st.window = counted_window  # type: ignore[method-assign]
    st.windows = lambda: loads.append("*") or windows()  # type: ignore[method-assign]
    for i in range(5):
        provider.retrieve("a", f"asthma {i}")
        provider.budget("a")
    assert loads == []  # no window row was read or parsed again
    close_window(st)
    with pytest.raises(WindowClosedError):
        provider.retrieve("a", "asthma")
    open_window(st)
    loads.clear()  # the admin steps read their windows; the server loads the new one once
    assert provider.retrieve("a", "asthma").window_id == "W7"
    provider.retrieve("a", "asthma again")
    assert loads == ["W7"]
    provider.close()

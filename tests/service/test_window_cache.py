"""The server caches the open window: a request looks up only the open window's id, and
loads (and parses) the window's row again only when that id changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragprivacy.errors import BackendError, ChargedFailureError, WindowClosedError
from ragprivacy.generate import create_generator
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


def test_a_window_load_that_fails_half_way_is_loaded_again(tmp_path: Path, admin) -> None:  # type: ignore[no-untyped-def]
    """A storage failure while the server loads the open window (its texts' hashes come
    after its row) is that request's 502; the next request loads the whole window again instead of
    serving from a half-filled cache (a KeyError, a 500, on every later request)."""
    state = tmp_path / "state"
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": f"r {i} gout"}) + "\n"
                              for i in range(10)))  # fmt: skip
    admin(state, "tenant", "create", "t", "--k", "2")
    admin(state, "docs", "add", "t", str(corpus))
    admin(state, "account", "create", "t", "a", "--eps", "4", "--delta", "1e-6",
          "--rate-limit", "100")  # fmt: skip
    st = ServiceState(state, create=False)
    open_window(st)
    hashes = st.content_hashes
    lost = [True]

    def fails_once(tenant: str, count: int):  # type: ignore[no-untyped-def]
        if lost.pop() if lost else False:
            raise BackendError("Lost the connection to the state; retry.")
        return hashes(tenant, count)

    st.content_hashes = fails_once  # type: ignore[method-assign]
    provider = ServiceProvider(st)
    with pytest.raises(BackendError):
        provider.retrieve("a", "gout")
    served = provider.retrieve("a", "gout")
    assert served.window_id == "W1" and len(served.documents) == 2
    provider.close()


def test_a_failure_to_read_the_chosen_texts_is_charged_with_its_receipt(
    tmp_path: Path,
    admin,  # type: ignore[no-untyped-def]
) -> None:
    """The worker reads an answer's texts once its documents are chosen. A storage
    failure then comes after private data was read: it is charged like an answer (the
    record appended, the receipt returned), never a free retry — for a retrieval
    (after the append) and for a generated answer (before it)."""
    state = tmp_path / "state"
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": f"r {i} gout"}) + "\n"
                              for i in range(10)))  # fmt: skip
    admin(state, "tenant", "create", "t", "--k", "2")
    admin(state, "docs", "add", "t", str(corpus))
    admin(state, "account", "create", "t", "a", "--eps", "4", "--delta", "1e-6",
          "--rate-limit", "100")  # fmt: skip
    st = ServiceState(state, create=False)
    open_window(st)
    provider = ServiceProvider(st)
    provider.retrieve("a", "gout")  # the window is loaded; one record

    def lost(tenant: str, ids):  # type: ignore[no-untyped-def]
        raise BackendError("Lost the connection to the state; retry.")

    st.texts_of = lost  # type: ignore[method-assign]
    with pytest.raises(ChargedFailureError) as err:
        provider.retrieve("a", "gout")
    assert err.value.receipt is not None and err.value.receipt["seq"] == 2
    with pytest.raises(ChargedFailureError) as err:
        provider.answer("a", "gout", create_generator("reference"))
    assert err.value.receipt is not None and err.value.receipt["seq"] == 3
    assert provider.budget("a")["used"] == 3
    provider.close()

"""The SQLite budget store refuses a path it cannot use with one clear error."""

from __future__ import annotations

import pytest

from ragprivacy.dp import SqliteBudgetStore
from ragprivacy.errors import ConfigError, DataError


def test_a_store_path_that_is_no_sqlite_file_is_one_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="is a directory"):
        SqliteBudgetStore(tmp_path, 1.0)
    junk = tmp_path / "notes.txt"
    junk.write_text("not a database, and it must stay as it is\n" * 100)
    with pytest.raises(DataError, match="cannot be opened as a SQLite store"):
        SqliteBudgetStore(junk, 1.0)
    assert junk.read_text().startswith("not a database")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_recorded_charges_are_kept_whatever_the_capacity_and_only_once(tmp_path, kind) -> None:  # type: ignore[no-untyped-def]
    """``record`` keeps spending that already happened (an audit window's settled
    charges): past the capacity too, all at once, each charge id once."""
    from ragprivacy.dp import MemoryBudgetStore

    store = (
        MemoryBudgetStore(4.0)
        if kind == "memory"
        else SqliteBudgetStore(tmp_path / "b.sqlite", 4.0)
    )
    charges = [("W1/0/0", ["a", "b"], 3.0), ("W1/1/0", ["a"], 3.0)]
    store.record(charges)
    store.record(charges)  # a close retried: nothing twice
    assert store.spent(["a", "b", "c"])[:, 0].tolist() == [6.0, 3.0, 0.0]
    with pytest.raises(ConfigError):
        store.record([("W1/0/0", ["a"], 1.0)])  # the same id for another charge
    assert not store.can_afford(["a"], 1.0)[0]  # the recorded spending counts

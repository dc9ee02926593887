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

"""The ``ragprivacy`` command."""

from __future__ import annotations

from ragprivacy.cli.app import app, main

__all__ = ["app", "main"]

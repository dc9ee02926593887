"""``python -m ragprivacy.cli``: the ``ragprivacy`` command."""

from ragprivacy.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

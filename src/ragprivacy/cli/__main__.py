"""``python -m ragprivacy.cli``: the ``ragprivacy`` command."""

from ragprivacy.cli import main

raise SystemExit(main())

"""``python -m ragprivacy`` runs the command line."""

from __future__ import annotations

import sys

from ragprivacy.cli import main

sys.exit(main())

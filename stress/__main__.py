"""``python -m stress`` is the same as the ``stress`` command."""

from __future__ import annotations

import sys

from stress.cli.main import main

sys.exit(main())

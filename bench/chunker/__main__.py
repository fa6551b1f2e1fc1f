"""`python -m bench.chunker`: see run.py."""

from __future__ import annotations

import sys

from bench.chunker.run import main

sys.exit(main())

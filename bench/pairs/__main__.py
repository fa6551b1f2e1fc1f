"""`python -m bench.pairs`: see run.py."""

from __future__ import annotations

import sys

from bench.pairs.run import main

sys.exit(main())

"""`python -m bench.workers`: see run.py."""

from __future__ import annotations

import sys

from bench.workers.run import main

sys.exit(main())

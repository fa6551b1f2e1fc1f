"""`python -m bench.repeats`: see run.py."""

from __future__ import annotations

import sys

from bench.repeats.run import main

sys.exit(main())

"""`python -m bench.longform`: see run.py."""

from __future__ import annotations

import sys

from bench.longform.run import main

sys.exit(main())

"""`python -m bench.forgetting`: see run.py."""

from __future__ import annotations

import sys

from bench.forgetting.run import main

sys.exit(main())

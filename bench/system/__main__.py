"""`python -m bench.system`: see run.py."""

from __future__ import annotations

import sys

from bench.system.run import main

sys.exit(main())

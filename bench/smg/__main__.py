"""`python -m bench.smg`: see run.py."""

from __future__ import annotations

import sys

from bench.smg.run import main

sys.exit(main(sys.argv[1:]))

"""`python -m bench.workers`: see run.py."""

from __future__ import annotations

from bench.workers.run import main

main()

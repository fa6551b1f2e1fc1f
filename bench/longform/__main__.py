"""`python -m bench.longform`: see run.py."""

from __future__ import annotations

from bench.longform.run import main

main()

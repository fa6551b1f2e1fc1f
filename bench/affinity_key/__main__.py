"""`python -m bench.affinity_key`: see run.py."""

from __future__ import annotations

from bench.affinity_key.run import main

main()

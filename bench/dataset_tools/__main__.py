"""`python -m bench.dataset_tools`: see run.py."""

from __future__ import annotations

from bench.dataset_tools.run import main

main()

"""`python -m bench.s3_libraries`: see run.py."""

from __future__ import annotations

from bench.s3_libraries.run import main

main()

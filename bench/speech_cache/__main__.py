"""`python -m bench.speech_cache`: see run.py."""

from __future__ import annotations

from bench.speech_cache.run import main

main()

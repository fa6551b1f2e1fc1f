"""`python -m bench.speech_cache`: see run.py."""

from __future__ import annotations

import sys

from bench.speech_cache.run import main

sys.exit(main())
